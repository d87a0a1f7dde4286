// The usage ledger (docs/accounting.md): GET /v1/usage, a report grouped by owner, account, job,
// node or GPU model over a range of time; GET /v1/fairshare, the account tree's fair-share factors
// (docs/fairshare.md). Every user may read them, as sreport's and sshare's.

#include "poolrun/common/names.hpp"
#include "poolrun/pool/json_read.hpp"
#include "poolrun/pool/usage_json.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

// The latest time a range may name: what the pool's clock holds (about 2262).
constexpr int64_t kLatestMillis = json_read::kTimeMillisRange.max;

// ?by=owner|account|job|node|gpu-model&since_ms=T&until_ms=T: rows overlapping [since, until) count
// pro rata to their overlap; no until: up to now.
json usageReport(ServerCore& m, Context& c) {
  auto by = c.req.query.find("by");
  UsageQuery query;
  if (by != c.req.query.end()) {
    auto parsed = usageByOf(by->second);
    if (!parsed)
      throw badRequest("by '" + common::printable(by->second) +
                       "': give owner, account, job, node or gpu-model");
    query.by = *parsed;
  }
  const int64_t since = c.query("since_ms", 0, 0, kLatestMillis);
  const int64_t until = c.query("until_ms", kLatestMillis, 0, kLatestMillis);
  if (since >= until)
    throw badRequest("since_ms " + std::to_string(since) + " is not before until_ms " +
                     std::to_string(until) + ": give a range that starts before it ends");
  query.since = TimePoint(std::chrono::milliseconds(since));
  query.until = until == kLatestMillis ? kNever : TimePoint(std::chrono::milliseconds(until));
  return m.read([&](const PoolState& s) {
    json rows = json::array();
    for (const UsageTotals& t : s.usage().report(query, std::chrono::system_clock::now()))
      rows.push_back(toJson(t));
    return json{
        {"by", toString(query.by)}, {"since_ms", since}, {"until_ms", until}, {"rows", std::move(rows)}};
  });
}

// The fair-share tree as of now (sshare's view): every account and user with its shares, decayed
// usage and factor, the weights and the half-life. Computed under the lock (a walk of the tree and
// of the decayed usage, not of the ledger's rows), written outside it.
json fairShare(ServerCore& m, Context&) {
  const FairShareReport report =
      m.read([](const PoolState& s) { return s.fairShareReport(std::chrono::system_clock::now()); });
  return toJson(report);
}

}  // namespace

std::vector<RouteSpec> usageRoutes() {
  return {
      {"GET", "/v1/usage", Role::kUser, StateLock::kRead, "", usageReport},
      {"GET", "/v1/fairshare", Role::kUser, StateLock::kRead, "", fairShare},
  };
}

}  // namespace poolrun::pool
