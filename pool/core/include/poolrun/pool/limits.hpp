#pragma once

// The ranges of every number a client gives the pool: poold's request bodies (pool/protocol/src/json.cpp),
// poolctl's and poolrun's options. A value outside its range is refused with the field or option,
// the value and the range, never wrapped or clamped. poold narrows two of them with its own options
// (--max-ttl, --max-user-priority; see ServerOptions). pool/README.md lists them.
//
// The durations are bounded so that now + any of them, in nanoseconds, stays far inside
// std::chrono::system_clock (about the year 2262): a TTL or a wait can never wrap to the past.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace poolrun::pool {

template <typename T>
struct Range {
  T min;
  T max;
};

inline constexpr Range<int> kGpusRange{1, 1'000'000};
inline constexpr Range<int> kGpusPerNodeRange{0, 1024};        // 0: any split
inline constexpr Range<int> kMaxGpusRange{0, kGpusRange.max};  // an elastic lease's maximum; 0: not elastic
inline constexpr Range<int64_t> kResizeIntervalSecondsRange{0, 30 * 86'400};
inline constexpr Range<size_t> kGpuIndexRange{0, 1023};  // a GPU's index in its node
// A lease's unit: a GPU's index, or a MIG instance's unit number (GPUs + 64 instances each).
inline constexpr Range<size_t> kUnitIndexRange{0, 1024 * 65 - 1};
inline constexpr size_t kMaxMigProfileBytes = 64;  // "1g.10gb", "1c.3g.40gb", "1g.20gb+me"
inline constexpr size_t kMaxMigUuidBytes = 96;     // "MIG-" and a UUID (or the older MIG-GPU-.../gi/ci form)
// An MPS share: a percentage of a GPU's SMs, and the device memory it may pin.
inline constexpr Range<int> kSharePercentRange{0, 100};                         // 0: not limited
inline constexpr Range<uint64_t> kShareMemoryBytesRange{0, uint64_t{1} << 50};  // 0: its part of the GPU
// The most clients one MPS server takes on a GPU of the Volta architecture or later (NVIDIA's MPS
// documentation; 16 before Volta).
inline constexpr int kMaxMpsClients = 48;
inline constexpr Range<int> kPriorityRange{-1'000'000, 1'000'000};
inline constexpr Range<int64_t> kTtlSecondsRange{1, 86'400};       // a day; poold's --max-ttl is lower
inline constexpr Range<int64_t> kWaitSecondsRange{0, 31'536'000};  // 365 days; 0: do not queue
// 366 days: poolrun's --timeout (up to 365 days) plus a TTL (up to a day) fits.
inline constexpr Range<int64_t> kMaxDurationSecondsRange{1, 31'622'400};
inline constexpr Range<uint64_t> kMinMemoryBytesRange{0, uint64_t{1} << 50};  // 1 PiB
// The range of a lease request's number by the name the API gives its field ("gpus", "ttl_s",
// "share_memory_bytes"): the table validateRequest (state.hpp) judges a request by, and a reader of
// a request's JSON reads each number against (a value past the field's type is out of it too).
// Throws std::logic_error for a name that is not a request's number.
Range<int64_t> requestFieldRange(std::string_view field);
// poold's --min-runtime (POOLRUN_MIN_RUNTIME): 0 to 30 days; --preempt-grace (POOLRUN_PREEMPT_GRACE)
// from 1 s: a victim's holder must be able to hear of it before its lease ends.
inline constexpr Range<int64_t> kPreemptSecondsRange{0, 30 * 86'400};
inline constexpr Range<int64_t> kPreemptGraceRange{1, 30 * 86'400};
// poold's --max-queued-per-owner: requests one owner may have in the queue.
inline constexpr Range<size_t> kMaxQueuedPerOwnerRange{1, 1'000'000};

// Bounds of a heartbeat, against a broken or hostile agent.
inline constexpr size_t kMaxProcessesPerGpu = 4096;
inline constexpr size_t kMaxXidEventsPerGpu = 1024;
inline constexpr size_t kMaxNicPorts = 1024;
inline constexpr size_t kMaxVersionBytes = 128;  // "poold-agent 0.9.0"
inline constexpr size_t kMaxErrorBytes = 1024;   // a sample's error text
inline constexpr size_t kMaxHealthBytes = 4096;  // what a node's failed health checks say
inline constexpr Range<uint32_t> kPidRange{1, 1u << 30};
inline constexpr size_t kMaxMigLayoutProfiles = 8;  // GPU instances in one layout (7 on an A100/H100)
// Nodes one lease request may exclude (LeaseRequest::exclude_nodes).
inline constexpr size_t kMaxExcludedNodes = 1024;
// Leases one heartbeat's reply lists on its node (every unit and MPS share of a node held apart).
inline constexpr size_t kMaxNodeLeases = 65536;

}  // namespace poolrun::pool
