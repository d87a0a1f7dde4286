// validateRequest: the one place a request's numbers, names and their combinations are judged
// (state.hpp), whether it came as JSON (poold; the reader reads the types and calls it), from options
// (poolrun, poolctl) or in code (the embedded pools).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/accounts.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

namespace {

template <typename T>
constexpr Range<int64_t> wide(Range<T> r) {
  return {static_cast<int64_t>(r.min), static_cast<int64_t>(r.max)};
}

// A request's numbers, by the name the API gives each field, with their ranges (limits.hpp).
struct NumberField {
  std::string_view name;
  Range<int64_t> range;
};
constexpr NumberField kNumberFields[] = {
    {"gpus", wide(kGpusRange)},
    {"gpus_per_node", wide(kGpusPerNodeRange)},
    {"min_memory_bytes", wide(kMinMemoryBytesRange)},
    {"priority", wide(kPriorityRange)},
    {"wait_s", kWaitSecondsRange},
    {"ttl_s", kTtlSecondsRange},
    {"max_duration_s", kMaxDurationSecondsRange},
    {"max_gpus", wide(kMaxGpusRange)},
    {"resize_interval_s", kResizeIntervalSecondsRange},
    {"share_percent", wide(kSharePercentRange)},
    {"share_memory_bytes", wide(kShareMemoryBytesRange)},
};

[[noreturn]] void bad(const std::string& what) {
  throw badInput("bad lease request: " + what);
}

// "field 'gpus': 0 is out of range (1 to 1000000)", as the JSON reader words a number out of range.
void checkNumber(std::string_view field, int64_t value, Range<int64_t> range) {
  if (value < range.min || value > range.max)
    bad("field '" + std::string(field) + "': " + std::to_string(value) + " is out of range (" +
        std::to_string(range.min) + " to " + std::to_string(range.max) + ")");
}

void checkNumber(std::string_view field, int64_t value) {
  checkNumber(field, value, requestFieldRange(field));
}

void checkNumbers(const LeaseRequest& r, RequestCheck check) {
  checkNumber("gpus", r.gpus);
  checkNumber("gpus_per_node", r.gpus_per_node);
  // The byte counts are unsigned: compared as such (a count past INT64_MAX is out of range, not
  // negative), with the same words.
  if (r.min_memory_bytes > static_cast<uint64_t>(kMinMemoryBytesRange.max))
    bad("field 'min_memory_bytes': " + std::to_string(r.min_memory_bytes) + " is out of range (0 to " +
        std::to_string(kMinMemoryBytesRange.max) + ")");
  checkNumber("priority", r.priority);
  if (r.wait) checkNumber("wait_s", r.wait->count());
  // A day is the most a client may ask for (poold narrows it with --max-ttl); a pool in its caller's
  // own process (the embedded ones, the tests' tables) may be renewed less often.
  checkNumber("ttl_s", r.ttl.count(),
              check == RequestCheck::kFieldsAlone ? kTtlSecondsRange
                                                  : Range<int64_t>{kTtlSecondsRange.min, INT64_MAX});
  if (r.max_duration) checkNumber("max_duration_s", r.max_duration->count());
  checkNumber("max_gpus", r.max_gpus);
  checkNumber("resize_interval_s", r.resize_interval.count());
  checkNumber("share_percent", r.share_percent);
  if (r.share_memory_bytes > static_cast<uint64_t>(kShareMemoryBytesRange.max))
    bad("field 'share_memory_bytes': " + std::to_string(r.share_memory_bytes) + " is out of range (0 to " +
        std::to_string(kShareMemoryBytesRange.max) + ")");
}

// The request's names and texts, as topo/names.hpp's rules take them. Those of a client's request
// body whole; a request made in its pool's own process (an embedded pool, whose caller checked its
// options) may carry a text from elsewhere, an older state file's, which the views replace where
// shown: only its owner and MIG profile are judged there.
void checkNames(const LeaseRequest& r, RequestCheck check) {
  const std::string field = "bad lease request: field '";
  if (r.mig()) common::checkText(r.mig_profile, kMaxMigProfileBytes, field + "mig_profile'");
  if (check == RequestCheck::kWhole) {
    if (r.owner.empty()) bad("no owner");
    return;
  }
  if (!r.owner.empty()) {
    common::checkText(r.owner, common::kMaxOwnerBytes, field + "owner'");
    common::checkOwner(r.owner, field + "owner'");
  }
  common::checkText(r.job_name, common::kMaxJobNameBytes, field + "job_name'");
  if (!r.account.empty())
    if (std::string p = accountNameProblem(r.account); !p.empty())
      bad("field 'account' '" + common::printable(r.account) + "': " + p);
  if (!r.reservation.empty())
    if (std::string p = accountNameProblem(r.reservation); !p.empty())
      bad("field 'reservation' '" + common::printable(r.reservation) + "': " + p);
  common::checkText(r.gpu_model, common::kMaxLabelBytes, field + "gpu_model'");
  for (const auto& [key, value] : r.labels) {
    common::checkText(key, common::kMaxLabelBytes, "bad lease request: a key of field 'labels'");
    common::checkText(value, common::kMaxLabelBytes, field + "labels." + key + "'");
  }
  if (r.exclude_nodes.size() > kMaxExcludedNodes)
    bad("field 'exclude_nodes' names " + std::to_string(r.exclude_nodes.size()) + " nodes, more than " +
        std::to_string(kMaxExcludedNodes));
  for (const std::string& node : r.exclude_nodes) common::checkNodeName(node, field + "exclude_nodes'");
}

// What the fields ask for together.
void checkCombination(const LeaseRequest& r) {
  if (r.gpus_per_node > 0 && r.gpus % r.gpus_per_node != 0)
    bad("gpus " + std::to_string(r.gpus) + " is not a multiple of gpus_per_node " +
        std::to_string(r.gpus_per_node));
  if (r.gpus_per_node > 0 && r.whole_nodes) bad("give either gpus_per_node or whole_nodes, not both");
  if (r.mig()) {
    const std::string what = "mig_profile " + r.mig_profile + " with ";
    if (r.whole_nodes) bad(what + "whole_nodes: MIG instances are leased one by one; drop whole_nodes");
    if (r.gpus_per_node > 0)
      bad(what + "gpus_per_node: MIG instances are packed onto the fewest GPUs; drop it");
    if (r.max_gpus > 0) bad(what + "max_gpus: MIG leases are not elastic; ask for a fixed number");
  } else if (r.mig_or_larger) {
    bad("mig_or_larger without mig_profile (name the smallest profile that will do)");
  }
  if (r.shared()) {
    const std::string what = "an MPS share with ";
    if (r.mig()) bad(what + "mig_profile: a MIG instance is not shared; ask for one or the other");
    if (r.whole_nodes) bad(what + "whole_nodes: shares are leased one per rank; drop whole_nodes");
    if (r.gpus_per_node > 0) bad(what + "gpus_per_node: shares are packed onto the fewest nodes; drop it");
    if (r.max_gpus > 0) bad(what + "max_gpus: MPS leases are not elastic; ask for a fixed number");
  }
  if (r.max_gpus == 0) return;
  const std::string range = "elastic " + std::to_string(r.gpus) + ":" + std::to_string(r.max_gpus);
  if (r.max_gpus < r.gpus) bad(range + ": the most (max_gpus) must be at least the least (gpus)");
  if (r.gpus_per_node > 0 && r.max_gpus % r.gpus_per_node != 0)
    bad(range + ": max_gpus " + std::to_string(r.max_gpus) + " is not a multiple of gpus_per_node " +
        std::to_string(r.gpus_per_node));
  if (r.whole_nodes)
    bad(range +
        " with whole_nodes: an elastic lease grows and shrinks by GPUs; ask for gpus_per_node "
        "(the node's GPU count) instead");
}

}  // namespace

Range<int64_t> requestFieldRange(std::string_view field) {
  for (const NumberField& f : kNumberFields)
    if (f.name == field) return f.range;
  throw std::logic_error("requestFieldRange: no number field '" + std::string(field) +
                         "' in a lease request");
}

void validateRequest(const LeaseRequest& r, RequestCheck check) {
  checkNumbers(r, check);
  checkNames(r, check);
  if (check == RequestCheck::kWhole) checkCombination(r);
}

}  // namespace poolrun::pool
