// The embedded pools: `local` (this node, probed) and `sim:FILE` (a cluster file). No daemon: every
// call is one SQLite transaction on a file in the state directory that every process shares.

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "embedded.hpp"
#include "poolrun/common/hash.hpp"
#include "poolrun/common/options.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "poolrun/pool/queue_wait.hpp"
#include "poolrun/pool/service.hpp"
#include "poolrun/pool/store.hpp"
#include "poolrun/topo/hostlist.hpp"
#include "poolrun/topo/sources.hpp"

namespace poolrun::pool {
namespace {

using Clock = std::chrono::system_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A launch writes a few pages of log (its lease, then its release): checkpointing from 64 on keeps
// the log that each launch reads at its start under 0.3 MB.
constexpr int kIdleCheckpointFrames = 64;

bool sameNode(const PoolNode& n, const topo::ClusterNode& c) {
  if (n.levels != c.levels || n.fabric != c.fabric || n.labels != c.labels || !n.topology || !c.topology)
    return false;
  // The same hardware, wherever each copy was read from: the pool's copy comes back from its
  // JSON ("json:NODE"), the cluster file's from a topology file.
  topo::NodeTopology fresh = *c.topology;
  fresh.source = n.topology->source;
  return fresh == *n.topology;
}

// The preemption rules' times for the embedded pools, from POOLRUN_PREEMPT_GRACE and
// POOLRUN_MIN_RUNTIME (seconds; poold's --preempt-grace and --min-runtime).
PreemptOptions preemptOptionsFromEnvironment() {
  PreemptOptions o;
  auto read = [](const char* name, Range<int64_t> range, seconds& into) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return;
    into = seconds(common::parseOption<int64_t>(name, v, range.min, range.max));
  };
  read("POOLRUN_PREEMPT_GRACE", kPreemptGraceRange, o.grace);
  read("POOLRUN_MIN_RUNTIME", kPreemptSecondsRange, o.min_runtime);
  return o;
}

class EmbeddedPool : public PoolControl {
 public:
  EmbeddedPool(std::string description, const std::filesystem::path& db, const ClientOptions& options,
               bool local)
      : description_(std::move(description)),
        // quick_check, as every call opens the file: it reads the structure of every page, which
        // garbage over a page breaks; the full check also compares each index with its table,
        // at twice the cost (pool/README.md).
        store_(db, Durability::kNormal, StartCheck::kQuick),
        service_(Caller{options.owner.empty() ? currentUser() : options.owner, options.role != "user"}),
        local_(local) {
    if (options.role != "user" && options.role != "admin")
      throw badInput("bad role '" + options.role + "' (use user or admin)");
    state_.setPreemptOptions(preemptOptionsFromEnvironment());
    // The quotas of POOLRUN_QUOTAS (a quotas file, as poold's --quotas); none without it.
    if (const char* q = std::getenv("POOLRUN_QUOTAS"); q && *q) {
      try {
        state_.setQuotas(readQuotasFile(q));
      } catch (const Error& e) {
        throw Error(e.code(), std::string("POOLRUN_QUOTAS: ") + e.what());
      }
    }
    // The account tree of POOLRUN_ACCOUNTS (an accounts file, as poold's --accounts); none without it.
    if (const char* a = std::getenv("POOLRUN_ACCOUNTS"); a && *a) {
      try {
        state_.setAccounts(readAccountsFile(a));
      } catch (const Error& e) {
        throw Error(e.code(), std::string("POOLRUN_ACCOUNTS: ") + e.what());
      }
    }
  }

  void seed(const std::vector<topo::ClusterNode>& nodes) {
    transact([&](PoolState& s, TimePoint) {
      for (const topo::ClusterNode& n : nodes) {
        auto it = s.nodeMap().find(n.name);
        if (it == s.nodeMap().end() || !sameNode(it->second, n)) s.registerNode(n);
      }
      return 0;
    });
  }

  Lease acquire(const LeaseRequest& request,
                const std::function<void(const QueueProgress&)>& queued) override {
    LeaseRequest r = request;
    r.owner = service_.ownerOf(r.owner);
    if (local_) {
      int gpus = transact([](PoolState& s, TimePoint) {
        return s.status().gpus_free + s.status().gpus_leased + s.status().gpus_failed + s.status().gpus_mig;
      });
      if (gpus == 0)
        throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                        "no GPUs on this node; use --pool sim:FILE");
    }
    const auto start = std::chrono::steady_clock::now();
    const bool noWait = r.wait && *r.wait == seconds(0);
    SubmitResult sub = transact([&](PoolState& s, TimePoint now) { return s.submit(r, now, !noWait); });
    if (sub.lease) return keepUnlessInterrupted(*sub.lease);
    if (sub.ticket == 0) throw queueTimeout(r, sub.position, description_);
    int position = sub.position;
    std::string reason;  // the last wait reason heard: what a --wait that runs out says
    ProgressPacer pacer;
    milliseconds interval(0);
    for (;;) {
      if (pendingInterrupt() != 0) {
        std::string did = "withdrew the queued request (ticket " + std::to_string(sub.ticket) + ")";
        try {
          withdraw(sub.ticket);
        } catch (const Error& e) {
          did = "could not withdraw the queued request (ticket " + std::to_string(sub.ticket) + ": " +
                e.what() + "; the pool drops it 30 s after its last poll)";
        }
        throw interrupted(did);
      }
      std::this_thread::sleep_for(interval);
      interval = std::clamp(interval * 2, milliseconds(10), milliseconds(200));
      PollResult p = transact([&](PoolState& s, TimePoint now) { return s.poll(sub.ticket, now); });
      if (p.status == QueueEntry::Status::kGranted) return keepUnlessInterrupted(*p.lease);
      if (p.status == QueueEntry::Status::kFailed)
        throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported, p.reason);
      position = p.position;
      reason = p.wait_reason;
      auto now = std::chrono::steady_clock::now();
      QueueProgress progress{sub.ticket, position, std::chrono::duration_cast<seconds>(now - start),
                             p.wait_reason, p.planned_start};
      if (queued && pacer.due(progress, now)) queued(progress);
      if (r.wait && now - start >= *r.wait) {
        withdraw(sub.ticket);
        throw queueTimeout(r, position, description_, reason);
      }
    }
  }

  Lease renew(const std::string& id) override {
    return transact([&](PoolState& s, TimePoint now) { return service_.renew(s, id, now); });
  }

  Lease shrink(const std::string& id) override {
    return transact([&](PoolState& s, TimePoint now) { return service_.shrink(s, id, now); });
  }

  bool release(const std::string& id) override {
    return transact([&](PoolState& s, TimePoint now) { return service_.release(s, id, now); });
  }

  void idle() override {
    std::lock_guard<std::mutex> lock(mu_);
    store_.checkpoint(kIdleCheckpointFrames);
  }

  topo::ClusterNode node(const std::string& name) override {
    return transact([&](PoolState& s, TimePoint) { return PoolService::clusterNode(s, name, description_); });
  }

  std::string describe() const override { return description_; }
  RankSite rankSite() const override { return local_ ? RankSite::kThisMachine : RankSite::kSimulated; }

  PoolStatus status() override {
    return transact([](PoolState& s, TimePoint) { return s.status(); });
  }
  std::vector<NodeInfo> nodes() override {
    return transact([](PoolState& s, TimePoint) { return s.nodeInfos(); });
  }
  std::vector<Lease> leases() override {
    return transact([](PoolState& s, TimePoint) { return s.leaseList(); });
  }
  std::vector<QueueInfo> queue() override {
    return transact([](PoolState& s, TimePoint) { return s.queueList(); });
  }
  std::vector<QuotaUse> quotas() override {
    return transact([](PoolState& s, TimePoint) { return s.quotaUse(); });
  }
  // The rows of the leases this pool granted and ended (no accounting interval: no heartbeats).
  std::vector<UsageTotals> usage(const UsageQuery& query) override {
    return transact([&](PoolState& s, TimePoint now) { return s.usage().report(query, now); });
  }
  std::vector<Reservation> reservations() override {
    return transact([](PoolState& s, TimePoint) {
      std::vector<Reservation> out;
      for (const auto& [name, r] : s.reservations()) out.push_back(r);
      return out;
    });
  }
  Reservation reserve(const ReservationRequest& request) override {
    requireAdmin("make reservations");
    Reservation r;
    r.name = request.name;
    try {
      r.nodes = topo::expandHostlist(request.nodes, kMaxReservedNodes);
    } catch (const Error& e) {
      throw badInput("--nodes: " + std::string(e.what()));
    }
    r.users = request.users;
    r.accounts = request.accounts;
    r.created_by = service_.caller().owner;
    return transact([&](PoolState& s, TimePoint now) {
      r.start = request.start.value_or(now);
      r.end = r.start + request.duration;
      s.reserve(r, now);
      s.tick(now);
      return s.reservations().at(r.name);
    });
  }
  void unreserve(const std::string& name) override {
    requireAdmin("remove reservations");
    transact([&](PoolState& s, TimePoint now) {
      s.unreserve(name);
      s.tick(now);
      return 0;
    });
  }
  FairShareReport fairShare() override {
    return transact([](PoolState& s, TimePoint now) { return s.fairShareReport(now); });
  }
  void registerNodes(const std::vector<topo::ClusterNode>& nodes) override {
    requireAdmin("register nodes");
    transact([&](PoolState& s, TimePoint now) {
      for (const topo::ClusterNode& n : nodes) s.registerNode(n);
      s.tick(now);
      return 0;
    });
  }
  void drain(const std::string& node) override { setState(node, NodeState::kDraining, "drain"); }
  void resume(const std::string& node) override { setState(node, NodeState::kUp, "resume"); }
  void failGpu(const std::string& node, size_t index) override {
    requireAdmin("mark GPUs failed");
    transact([&](PoolState& s, TimePoint now) {
      s.failGpu(node, index, now);
      s.tick(now);
      return 0;
    });
  }
  // Refused by the rules for a node without an agent, which an embedded pool's nodes all are.
  void setMigLayout(const std::string& node, size_t gpu, const std::vector<std::string>& profiles) override {
    requireAdmin("change MIG layouts");
    transact([&](PoolState& s, TimePoint now) {
      s.setMigLayout(node, gpu, profiles);
      s.tick(now);
      return 0;
    });
  }

 private:
  // A queued request taken back: a lease granted to it meanwhile is released with it.
  void withdraw(int64_t ticket) {
    transact([&](PoolState& s, TimePoint now) {
      s.cancel(ticket, now);
      return 0;
    });
  }

  // A lease granted as a signal came is given back at once.
  Lease keepUnlessInterrupted(const Lease& lease) {
    if (pendingInterrupt() == 0) return lease;
    release(lease.id);
    throw interrupted("released lease " + lease.id + " (granted as the wait was interrupted)");
  }

  void requireAdmin(const std::string& what) const { service_.requireAdmin(what); }

  void setState(const std::string& node, NodeState state, const std::string& what) {
    requireAdmin(what + " nodes");
    transact([&](PoolState& s, TimePoint now) {
      PoolService::setNodeState(s, node, state);
      s.tick(now);
      return 0;
    });
  }

  // One transaction: reload if another process committed, expire, apply, write, commit.
  template <typename F>
  auto transact(F&& fn) -> decltype(fn(std::declval<PoolState&>(), TimePoint())) {
    std::lock_guard<std::mutex> lock(mu_);
    store_.begin();
    try {
      int64_t version = store_.dataVersion();
      if (!loaded_ || version != version_) {
        store_.load(state_);
        loaded_ = true;
        version_ = version;
      }
      TimePoint now = Clock::now();
      state_.tick(now);
      state_.setUsageOptions(kEmbeddedUsage);
      state_.accountUsage(now);
      auto result = fn(state_, now);
      store_.write(state_, state_.takeDirty());
      store_.commit();
      return result;
    } catch (...) {
      store_.rollback();
      loaded_ = false;
      throw;
    }
  }

  std::string description_;
  std::mutex mu_;
  Store store_;
  PoolState state_;
  bool loaded_ = false;
  int64_t version_ = 0;
  PoolService service_;  // who this pool acts for
  bool local_;
};

}  // namespace

std::string stateDirectory(const ClientOptions& options) {
  std::filesystem::path dir;
  if (!options.state_dir.empty()) {
    dir = options.state_dir;
  } else if (const char* s = std::getenv("POOLRUN_STATE_DIR"); s && *s) {
    dir = s;
  } else if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) {
    dir = std::filesystem::path(x) / "poolrun";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::filesystem::path(h) / ".local" / "state" / "poolrun";
  } else {
    throw badInput("no state directory: set POOLRUN_STATE_DIR (or HOME)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(ErrorCode::kIo, dir.string() + ": cannot create the state directory (" + ec.message() + ")");
  return dir.string();
}

std::unique_ptr<PoolControl> openEmbeddedLocal(const ClientOptions& options) {
  std::filesystem::path db = std::filesystem::path(stateDirectory(options)) / "local.sqlite";
  auto pool = std::make_unique<EmbeddedPool>("local (" + db.string() + ")", db, options, true);
  pool->seed({thisNode()});
  return pool;
}

topo::ClusterNode thisNode() {
  topo::ClusterNode node;
  auto topology = std::make_shared<topo::NodeTopology>(topo::probeLive());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  node.name = topology->hostname.empty() ? host : topology->hostname;
  node.topology = std::move(topology);
  return node;
}

std::unique_ptr<PoolControl> openEmbeddedSim(const std::string& file, const ClientOptions& options) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::weakly_canonical(file, ec);
  if (ec || !std::filesystem::is_regular_file(abs))
    throw Error(ErrorCode::kNotFound, "sim:" + file + ": no such cluster file (see clusters/*.toml)");
  topo::Cluster cluster = topo::readClusterFile(abs);
  std::filesystem::path db =
      std::filesystem::path(stateDirectory(options)) /
      ("sim-" + abs.stem().string() + "-" + common::fnv1aHex(abs.string(), 8) + ".sqlite");
  auto pool = std::make_unique<EmbeddedPool>("sim:" + file, db, options, false);
  pool->seed(cluster.nodes);
  return pool;
}

}  // namespace poolrun::pool
