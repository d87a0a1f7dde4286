#pragma once

// The usage ledger (docs/accounting.md): who held which GPUs, for how long, how much of that time
// they computed, and the energy the GPUs drew. A row per lease and node, opened when the lease is
// granted, brought up to date by its node's heartbeats and every accounting interval, closed when
// the lease ends; after UsageOptions::detail, ended rows are folded into a row per day, owner,
// account, node and GPU model; after UsageOptions::retention they are forgotten (their GPU-seconds
// stay in each owner's total, which never goes down). Part of PoolState: stored, replicated and
// restored with it. No clock of its own.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

struct Dirty;  // state.hpp

// poold's options for accounting.
struct UsageOptions {
  std::chrono::seconds interval{60};             // --account-interval: running rows are stored this often
  std::chrono::seconds detail{30 * 86'400};      // --usage-detail: rows older are folded into days
  std::chrono::seconds retention{400 * 86'400};  // --usage-retention: rows older are forgotten
  // Rows kept at most: past it, the oldest ended rows are folded into days early (an hour's lease
  // churn of a busy pool cannot grow the state without bound). The embedded pools, which read the
  // whole file in every process, keep fewer (kEmbeddedUsage).
  size_t max_rows = 2'000'000;
  // --fairshare-half-life: fair share's usage halves in this time (fairshare.hpp).
  std::chrono::seconds half_life{7 * 86'400};
};

// The embedded pools' ledger: rows a day, days a month, at most 100,000 rows (each poolctl and
// poolrun process reads them all: about 0.3 s at the most).
inline const UsageOptions kEmbeddedUsage{std::chrono::seconds(60), std::chrono::seconds(86'400),
                                         std::chrono::seconds(30 * 86'400), 100'000,
                                         std::chrono::seconds(7 * 86'400)};

// Fair share's usage: ((account, user), allocated GPU-seconds decayed to now), each pair once.
using DecayedUsage = std::vector<std::pair<std::pair<std::string, std::string>, double>>;

// One row of the ledger.
struct UsageRecord {
  enum class Kind { kLease, kDay, kTotal };
  uint64_t id = 0;  // the ledger's own, increasing: the store's key
  Kind kind = Kind::kLease;
  std::string lease;                        // kLease
  std::string job;                          // kLease: the job the lease ran ("" where none)
  std::string owner, account, node, model;  // kTotal: owner only
  TimePoint start{}, end{};  // kLease: end is when it was last brought up to date while it runs
  bool running = false;
  double gpus = 0;  // GPUs held on the node now (a MIG instance or MPS share as a part of one)
  double allocated_s = 0, used_s = 0, idle_s = 0, energy_j = 0;  // GPU-seconds, joules
  std::string ended;  // kLease: "released", "expired", "preempted", "lost"; "" while running
  bool operator==(const UsageRecord&) const = default;
};

std::string toString(UsageRecord::Kind kind);  // "lease", "day", "total"
std::optional<UsageRecord::Kind> usageKindOf(std::string_view text);

// What a GPU did between two samples, for the leases holding it.
struct GpuSpan {
  double seconds = 0;                 // between the samples
  std::optional<double> utilization;  // the later sample's (0 to 1)
  std::optional<double> energy_j;     // the energy counter's growth, else power x seconds
  double idle_below = 0.05;           // a utilisation under this is idle
};

// A report's grouping: poolctl usage --by.
enum class UsageBy { kOwner, kAccount, kJob, kNode, kGpuModel };
std::string toString(UsageBy by);  // "owner", "account", "job", "node", "gpu-model"
std::optional<UsageBy> usageByOf(std::string_view text);

struct UsageQuery {
  UsageBy by = UsageBy::kOwner;
  TimePoint since{};  // rows overlapping [since, until) count pro rata to their overlap
  TimePoint until = kNever;
};

// One line of a report.
struct UsageTotals {
  std::string name;  // the owner, account, job, node or GPU model ("" where the rows have none)
  double allocated_s = 0, used_s = 0, idle_s = 0, energy_j = 0;
  size_t leases = 0;  // lease rows counted (folded days count none)
  bool operator==(const UsageTotals&) const = default;
};

class UsageLedger {
 public:
  struct Holding {  // a lease's part of one node
    std::string node, model;
    double gpus = 0;
  };

  // A lease was granted or resized: its rows, brought up to `now`, hold `holdings` from now on (a
  // node it left keeps its row at 0 GPUs until the lease ends).
  void holds(const Lease& lease, const std::string& account, const std::vector<Holding>& holdings,
             TimePoint now, Dirty& dirty);
  void setJob(const std::string& lease, const std::string& job, Dirty& dirty);
  // A lease ended `how` ("released", "expired", "preempted") at `at`: its rows counted up to then
  // (an expired lease's time past its expiry, counted by a checkpoint meanwhile, taken back).
  void ended(const std::string& lease, std::string_view how, TimePoint at, Dirty& dirty);
  // What a GPU of `node` did, for the lease holding `share` of it.
  void sample(const std::string& lease, const std::string& node, double share, const GpuSpan& span,
              TimePoint now);
  // Every interval: running rows brought up to `now` and stored; rows past the detail folded into
  // days, rows past the retention forgotten.
  void checkpoint(TimePoint now, const UsageOptions& options, Dirty& dirty);
  // After a load: rows left running by a lease the state no longer has are closed as "lost" at
  // their last update.
  void closeLost(const std::set<std::string, std::less<>>& leases, Dirty& dirty);

  // Running rows count their GPUs up to `now` (their use, up to their last sample).
  std::vector<UsageTotals> report(const UsageQuery& query, TimePoint now) const;
  // Each owner's figures since the ledger began, forgotten rows included, running rows' allocated
  // GPU-seconds up to `now` (counters: /metrics).
  std::map<std::string, UsageTotals, std::less<>> totalsByOwner(TimePoint now) const;
  // The rows of a lease (a walk of the ledger), or of a job's leases (indexed).
  std::vector<UsageRecord> ofLease(std::string_view lease) const;
  bool counts(const std::string& lease) const { return open_.count(lease) > 0; }  // has running rows
  std::vector<UsageRecord> ofJob(std::string_view job) const;
  // What a job's leases used, running ones up to `now` (leases 0: none counted, or folded into days).
  UsageTotals ofJobTotals(std::string_view job, TimePoint now) const;

  // Fair share's usage: each (account, owner)'s allocated GPU-seconds, each counted at its time and
  // halved every `half_life` since (Slurm's PriorityDecayHalfLife). Kept as the ledger counts, and
  // made again from the rows after a load or a new half-life (a row's GPU-seconds spread evenly
  // over its span: exact for a lease of one size, close for a day's row, which is at least
  // --usage-detail old). Running rows count up to their last update.
  void setHalfLife(std::chrono::seconds halfLife);
  std::chrono::seconds halfLife() const { return half_life_; }
  DecayedUsage decayed(TimePoint now) const;

  // The store's side.
  std::optional<UsageRecord> find(uint64_t id) const;
  size_t size() const { return rows_.size() - dead_; }
  uint64_t nextId() const { return next_id_; }
  void load(const UsageRecord& row);  // rows in any order; then finishLoad()
  void loadNextId(uint64_t next) { next_id_ = std::max(next_id_, next); }
  void finishLoad();
  template <typename F>
  void forEach(F f) const {
    for (size_t i = 0; i < rows_.size(); ++i)
      if (!gone_[i]) f(record(rows_[i]));
  }

 private:
  // A row as the ledger keeps it: the names that repeat (owner, account, node, model, how it
  // ended) are indexes into names_, so that a million rows take a third of UsageRecord's memory.
  struct Row {
    uint64_t id = 0;
    std::string lease, job;
    uint32_t owner = 0, account = 0, node = 0, model = 0, ended = 0;
    UsageRecord::Kind kind = UsageRecord::Kind::kLease;
    bool running = false;
    TimePoint start{}, end{};
    double gpus = 0, allocated_s = 0, used_s = 0, idle_s = 0, energy_j = 0;
  };
  uint32_t nameOf(std::string_view text);
  const std::string& text(uint32_t name) const { return names_[name]; }
  UsageRecord record(const Row& r) const;
  Row* row(uint64_t id);
  const Row* row(uint64_t id) const;
  uint64_t add(Row r, Dirty& dirty);
  void remove(uint64_t id, Dirty& dirty);
  void accrue(Row& r, TimePoint now);
  void count(const Row& r);  // its figures into its owner's totals_
  void fold(TimePoint before, size_t maxRows, Dirty& dirty);
  void forget(TimePoint before, Dirty& dirty);
  void pack();

  std::vector<Row> rows_;   // by id (ids increase)
  std::vector<bool> gone_;  // per row: removed (until pack())
  size_t dead_ = 0;
  uint64_t next_id_ = 1;
  std::vector<std::string> names_{""};  // never shrinks: owners, accounts, nodes, models are few
  std::unordered_map<std::string, uint32_t> name_ids_{{"", 0}};
  // Running leases: their rows by node (the node's name index), so that a sample finds its row at
  // once however many nodes its lease has.
  std::unordered_map<std::string, std::unordered_map<uint32_t, uint64_t>> open_;
  std::unordered_map<std::string, std::vector<uint64_t>> by_job_;  // jobs: their leases' rows (some gone)
  std::map<std::string, UsageTotals, std::less<>> totals_;         // per owner, every row's figures
  std::map<std::string, uint64_t, std::less<>> total_rows_;        // the kTotal row of each owner
  TimePoint last_fold_{};  // folding and forgetting walk every row: once an hour

  // Fair share's decayed usage per (account << 32 | owner) name pair: the value at `at`.
  struct Decayed {
    double value = 0;
    TimePoint at{};
  };
  // `gpuSeconds` spent evenly over [from, to] into the owner's and account's decayed usage.
  void decay(const Row& r, double gpuSeconds, TimePoint from, TimePoint to);
  void rebuildDecayed();
  std::unordered_map<uint64_t, Decayed> decayed_;
  std::chrono::seconds half_life_{7 * 86'400};
};

}  // namespace poolrun::pool
