// /v1/leases...: list, acquire (queued or not, idempotent by the client's request id), renew,
// shrink and release.

#include "poolrun/common/names.hpp"
#include "poolrun/pool/http_failures.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/service.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

json leaseList(ServerCore& m, Context&) {
  return m.read([](const PoolState& s) {
    json out = json::array();
    for (const Lease& l : s.leaseList()) out.push_back(toJson(l));
    return out;
  });
}

// The key the acquire's client request id (field request_id) is remembered under; empty without one.
std::string requestKeyOf(const json& doc, const std::string& owner) {
  if (!doc.is_object() || !doc.contains("request_id")) return "";
  const json& id = doc["request_id"];
  if (!id.is_string() || id.get_ref<const std::string&>().size() > 128)
    throw badRequest("field 'request_id': expected a string of at most 128 characters");
  return PoolService::requestKey(owner, id.get<std::string>());
}

json tooManyQueued(const ServerOptions& opt, const std::string& owner, size_t queued) {
  return json{
      {"error", "owner " + owner + " already has " + std::to_string(queued) +
                    " requests in the queue, the most poold allows one owner (its "
                    "--max-queued-per-owner is " +
                    std::to_string(opt.max_queued_per_owner) +
                    "); this one does not fit now and was not queued: end some of "
                    "the owner's waiting clients (`poolctl queue` lists their "
                    "requests; one whose client stops leaves the queue within " +
                    std::to_string(opt.stale_after.count()) + " s) or wait until some start, then ask again"},
      {"reason", "too_many_queued"},
      {"queued", queued},
      {"limit", opt.max_queued_per_owner}};
}

// wait_s 0 and it does not fit now: 409 not_now (http_failures.hpp), with where it would have stood.
PoolError notNow(const LeaseRequest& r, int position) {
  return PoolError(
      PoolFailure::kTimeout, ErrorCode::kIo,
      "a request for " + std::to_string(r.gpus) + " GPUs does not fit now (it would be number " +
          std::to_string(position) +
          " in the queue) and was not queued, as wait_s is 0: give a wait_s to wait in the queue, "
          "or ask for fewer",
      position);
}

json submitted(const SubmitResult& sub) {
  return sub.lease ? json{{"lease", toJson(*sub.lease)}}
                   : json{{"ticket", sub.ticket}, {"position", sub.position}};
}

json acquireLease(ServerCore& m, Context& c) {
  json doc = parseBody(c.req.body);
  LeaseRequest r = requestFromJson(doc);
  m.checkLimits(r, c.who);
  // A user's token names its owner: an `owner` field (poolrun sends $USER) is the token's.
  r.owner = PoolService(c.who).ownerOf(r.owner);
  const bool queue = !(r.wait && r.wait->count() == 0);
  const std::string requestKey = requestKeyOf(doc, r.owner);
  return m.mutate([&](PoolState& s, TimePoint now) {
    // A retry gets the first answer, as the state has it now.
    if (std::optional<SubmitResult> first = PoolService::retried(s, requestKey)) {
      c.status = first->lease ? 200 : 202;
      return submitted(*first);
    }
    // An owner at its limit may still take what is free now, but queues nothing more.
    const size_t queued = s.queuedBy(r.owner);
    const bool full = queue && queued >= m.opt.max_queued_per_owner;
    SubmitResult sub = s.submit(r, now, queue && !full);
    if (!sub.lease && full) {
      c.status = httpFailureNamed("too_many_queued").status;
      return tooManyQueued(m.opt, r.owner, queued);
    }
    if (!sub.lease && sub.ticket == 0) throw notNow(r, sub.position);
    c.status = sub.lease ? 200 : 202;
    PoolService::remember(s, requestKey, sub, now);
    return submitted(sub);
  });
}

json renewLease(ServerCore& m, Context& c) {
  takesNoFields(c.req.body);
  return m.mutate([&](PoolState& s, TimePoint now) {
    return json{{"lease", toJson(PoolService(c.who).renew(s, c.params[0], now))}};
  });
}

json shrinkLease(ServerCore& m, Context& c) {
  takesNoFields(c.req.body);
  return m.mutate([&](PoolState& s, TimePoint now) {
    return json{{"lease", toJson(PoolService(c.who).shrink(s, c.params[0], now))}};
  });
}

json releaseLease(ServerCore& m, Context& c) {
  if (std::string why = common::leaseIdProblem(c.params[0]); !why.empty())
    throw badRequest("'" + common::printable(c.params[0]) + "' is no lease id: " + why);
  return m.mutate([&](PoolState& s, TimePoint now) {
    auto held = s.leaseMap().find(c.params[0]);
    const std::string owner = held != s.leaseMap().end() ? held->second.owner : "";
    const bool released = PoolService(c.who).release(s, c.params[0], now);
    // Another's lease: an administrator's action, in the audit trail.
    if (released && owner != c.who.owner) {
      json fields = {{"lease", c.params[0]}, {"owner", owner}};
      fields.update(auditOf(c));
      m.events->record("lease_released_by_admin", fields, now);
    }
    return json{{"id", c.params[0]}, {"released", released}};
  });
}

// A launch credential per node of a lease (launch_credential.hpp), for its owner: each lets that
// node's agent start a daemon of the job there, as the owner, for the next kLaunchCredentialLife.
constexpr std::chrono::seconds kLaunchCredentialLife{300};

json launchCredentials(ServerCore& m, Context& c) {
  takesNoFields(c.req.body);
  const std::string& id = c.params[0];
  if (std::string why = common::leaseIdProblem(id); !why.empty())
    throw badRequest("'" + common::printable(id) + "' is no lease id: " + why);
  std::vector<std::pair<common::LaunchGrant, std::string>> grants;  // with the node's launch address
  const TimePoint now = std::chrono::system_clock::now();
  m.read([&](const PoolState& s) {
    auto held = s.leaseMap().find(id);
    if (held == s.leaseMap().end())
      throw PoolError(PoolFailure::kGone, ErrorCode::kNotFound,
                      "no lease " + id + " (it ended, or never was)");
    const Lease& lease = held->second;
    if ((lease.owner != c.who.owner && !c.who.admin) || (!c.who.job_lease.empty() && c.who.job_lease != id))
      throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                      "owner " + c.who.owner + " may not start the daemons of lease " + id + " of " +
                          lease.owner + " (only its owner may)");
    for (const GpuRef& g : lease.gpus) {
      auto it =
          std::find_if(grants.begin(), grants.end(), [&](const auto& x) { return x.first.node == g.node; });
      if (it == grants.end()) {
        common::LaunchGrant grant;
        grant.lease = id;
        grant.node = g.node;
        grant.user = lease.owner;
        // No longer than the lease is sure to hold (its TTL's end: renewals push it on).
        grant.expires = std::chrono::duration_cast<std::chrono::seconds>(
                            std::min(now + kLaunchCredentialLife, lease.expires).time_since_epoch())
                            .count();
        auto node = s.nodeMap().find(g.node);
        grants.emplace_back(grant, node == s.nodeMap().end() ? "" : node->second.launch);
        it = std::prev(grants.end());
      }
      it->first.units.push_back(g.index);
    }
  });
  json nodes = json::array();
  int64_t expires = 0;
  for (auto& [grant, launch] : grants) {
    expires = grant.expires;
    nodes.push_back({{"node", grant.node},
                     {"agent", launch.empty() ? json(nullptr) : json(launch)},
                     {"credential", m.launch_signer->sign(grant)}});
  }
  return json{{"lease", id}, {"expires", expires}, {"nodes", nodes}};
}

}  // namespace

std::vector<RouteSpec> leaseRoutes() {
  return {
      {"GET", "/v1/leases", Role::kUser, StateLock::kRead, "", leaseList},
      {"POST", "/v1/leases", Role::kUser, StateLock::kChange, "", acquireLease},
      {"POST", "/v1/leases/*/renew", Role::kUser, StateLock::kChange, "", renewLease},
      {"POST", "/v1/leases/*/shrink", Role::kUser, StateLock::kChange, "", shrinkLease},
      {"POST", "/v1/leases/*/launch", Role::kUser, StateLock::kRead, "", launchCredentials},
      {"DELETE", "/v1/leases/*", Role::kUser, StateLock::kChange, "", releaseLease},
  };
}

}  // namespace poolrun::pool
