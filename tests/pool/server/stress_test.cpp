// Many client processes at once, and poold killed with SIGKILL under load: no GPU is ever in two
// leases, and every change a client was told about is what the pool holds.

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <httplib.h>

#include <future>
#include "poolrun/pool/etcd_client.hpp"

#include "poold_process.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "support/etcd_cluster.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

struct Held {
  std::vector<std::string> gpus;
  int64_t from = 0;
  int64_t to = INT64_MAX;  // not released (as far as the client knows)
  bool released = false;
  bool releasing = false;  // a release was sent; without R its outcome is unknown
  int64_t sent = 0;        // when it was sent (held until then at least)
};

struct Log {
  std::map<std::string, Held> leases;
  int acquired = 0, released = 0, errors = 0;
  std::string first_error;
};

void readLog(const std::filesystem::path& file, Log& log) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string kind, id;
    int64_t t = 0;
    w >> kind;
    if (kind == "E") {
      ++log.errors;
      if (log.first_error.empty()) std::getline(w, log.first_error);
      continue;
    }
    w >> id;
    w >> t;
    if (kind == "r") {
      log.leases.at(id).releasing = true;
      log.leases.at(id).sent = t;
      continue;
    }
    if (kind == "A") {
      ASSERT_EQ(log.leases.count(id), 0u) << "lease id " << id << " granted twice";
      Held& h = log.leases[id];
      h.from = t;
      std::string g;
      while (w >> g) h.gpus.push_back(g);
      ++log.acquired;
    } else if (kind == "R") {
      log.leases.at(id).to = t;
      log.leases.at(id).released = true;
      ++log.released;
    }
  }
}

// Two leases hold a GPU at the same moment only if their known holding intervals overlap. A lease
// whose client stopped between sending its release and writing R (killed, or its call failed) is
// known held until it sent the release, and to the end where the pool still holds it in `heldAtEnd`
// (read once every client has stopped). Its release may have landed and its GPUs gone to another
// client, which wrote A, before the killed one could write R: holding it to the end counted that as
// two leases on one GPU (once in a full ctest run, under load).
void expectNoGpuInTwoLeases(const Log& log, const std::set<std::string>& heldAtEnd = {}) {
  struct Span {
    int64_t from, to;
    const std::string* id;
    bool operator<(const Span& o) const { return std::tie(from, to) < std::tie(o.from, o.to); }
  };
  std::map<std::string, std::vector<Span>> byGpu;
  for (const auto& [id, h] : log.leases) {
    const int64_t to = h.released || !h.releasing || heldAtEnd.count(id) ? h.to : h.sent;
    for (const std::string& g : h.gpus) byGpu[g].push_back({h.from, to, &id});
  }
  int overlaps = 0;
  std::string which;
  auto describe = [&](const Span& s) {
    const Held& h = log.leases.at(*s.id);
    return *s.id + " [" + std::to_string(s.from) + ", " +
           (s.to == INT64_MAX ? std::string("end") : std::to_string(s.to)) + "]" +
           (h.released    ? ""
            : h.releasing ? " (release sent, not acknowledged)"
                          : " (not released)");
  };
  for (auto& [gpu, spans] : byGpu) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].from < spans[i - 1].to && ++overlaps <= 5)
        which += "\n  " + gpu + ": " + describe(spans[i - 1]) + " and " + describe(spans[i]);
  }
  EXPECT_EQ(overlaps, 0) << "GPUs held by two leases at once (lease [from, to] in CLOCK_MONOTONIC ns):"
                         << which;
}

// The ids of the leases `pool` holds.
std::set<std::string> leaseIds(PoolControl& pool) {
  std::set<std::string> ids;
  for (const Lease& l : pool.leases()) ids.insert(l.id);
  return ids;
}

std::vector<pid_t> startClients(const std::string& uri, const std::string& state, const std::string& token,
                                int n, int iterations, const test::TempDir& dir) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string it = std::to_string(iterations), seed = std::to_string(100 + i);
      std::string out = (dir.path() / ("client" + std::to_string(i) + ".log")).string();
      std::string owner = "user" + std::to_string(i);
      execl(POOL_STRESS_BINARY, POOL_STRESS_BINARY, uri.c_str(), state.c_str(), token.c_str(), owner.c_str(),
            it.c_str(), seed.c_str(), out.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  return pids;
}

int waitAll(const std::vector<pid_t>& pids) {
  int failures = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  return failures;
}

Log readLogs(const test::TempDir& dir, int n) {
  Log log;
  for (int i = 0; i < n; ++i) readLog(dir.path() / ("client" + std::to_string(i) + ".log"), log);
  return log;
}

// The checks above, on logs written by hand: a client killed after sending a release whose release
// landed (the pool no longer holds its lease) held its GPUs until it sent it, and a later lease on
// them is no overlap; where the pool still holds it, it holds them to the end.
TEST(StressLog, AReleaseSentButNotAcknowledgedHoldsUntilSentUnlessThePoolStillHoldsIt) {
  test::TempDir dir;
  dir.write("client0.log", "A L1 100 n0:0 n0:1\nr L1 200\n");  // killed before R
  dir.write("client1.log", "A L2 300 n0:1\nr L2 400\nR L2 400\nA L3 500 n0:0\n");
  Log log = readLogs(dir, 2);
  expectNoGpuInTwoLeases(log, {"L3"});
  EXPECT_NONFATAL_FAILURE(expectNoGpuInTwoLeases(log, {"L1", "L3"}), "n0:0: L1 [100, end]");
  // A lease granted while the release was on its way overlaps, released or not.
  dir.write("client2.log", "A L4 150 n0:0\nr L4 180\nR L4 180\n");
  log = readLogs(dir, 3);
  EXPECT_NONFATAL_FAILURE(expectNoGpuInTwoLeases(log, {"L3"}), "n0:0: L1 [100, 200]");
}

TEST(EmbeddedPool, OpeningAnUnchangedClusterWritesNothing) {
  // Every poolrun --pool sim:FILE compares the cluster file with the nodes the pool stores; when
  // nothing changed, nothing may be written (the stored copy, read back from JSON, once always
  // compared unequal, and every launch rewrote every node).
  test::TempDir dir;
  ClientOptions o;
  o.state_dir = dir.path().string();
  auto walBytes = [&] {
    uintmax_t bytes = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
      if (f.path().string().ends_with("-wal")) bytes += f.file_size();
    }
    return bytes;
  };
  openPoolControl("sim:" + test::hgxCluster(), o)->status();
  uintmax_t seeded = walBytes();
  EXPECT_GT(seeded, 0u);
  for (int i = 0; i < 3; ++i) openPoolControl("sim:" + test::hgxCluster(), o)->status();
  EXPECT_EQ(walBytes(), seeded) << "bytes of write-ahead log after reopening an unchanged cluster";
}

TEST(EmbeddedPool, ADamagedFileIsNamedWithWhatToDo) {
  test::TempDir dir;
  ClientOptions o;
  o.state_dir = dir.path().string();
  openPoolControl("sim:" + test::hgxCluster(), o)->status();
  std::filesystem::path file;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
    if (f.path().extension() == ".sqlite") file = f.path();
  }
  ASSERT_FALSE(file.empty());
  std::filesystem::remove(file.string() + "-wal");
  std::filesystem::remove(file.string() + "-shm");
  std::ofstream(file, std::ios::trunc) << std::string(8192, 'x');
  try {
    openPoolControl("sim:" + test::hgxCluster(), o);
    FAIL() << "a damaged pool file was opened";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(file.string()), std::string::npos) << what;
    EXPECT_NE(what.find("move it"), std::string::npos) << what;
  }
}

TEST(EmbeddedPool, WriteAheadLogStaysSmallOverManyLaunches) {
  // Every poolrun opens the pool file alone and SQLite then reads the whole write-ahead log to
  // rebuild its index: the log must stay short however many jobs have run (with SQLite's own
  // checkpoints alone, at 1000 pages, it grew to 4 MB, read by every launch).
  test::TempDir dir;
  ClientOptions o;
  o.state_dir = dir.path().string();
  for (int i = 0; i < 300; ++i) {
    auto pool = openPoolControl("sim:" + test::hgxCluster(), o);
    LeaseRequest r;
    r.gpus = 8;
    r.gpus_per_node = 8;
    r.wait = std::chrono::seconds(0);
    Lease lease = pool->acquire(r, nullptr);
    pool->idle();  // where poolrun calls it: while the job runs
    pool->release(lease.id);
  }
  auto pool = openPoolControl("sim:" + test::hgxCluster(), o);
  EXPECT_EQ(pool->status().leases_granted, 300u);
  uintmax_t largest = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
    if (f.path().string().ends_with("-wal")) largest = std::max(largest, f.file_size());
  }
  EXPECT_GT(largest, 0u) << "the pool keeps its write-ahead log between processes";
  EXPECT_LT(largest, 1u << 20) << "bytes of write-ahead log after 300 launches";
}

TEST(Concurrency, ManyProcessesShareTheEmbeddedPool) {
  test::TempDir dir;
  const int clients = 8, iterations = 25;
  // Seed the state once so that the clients race on leases, not on creating the file.
  ClientOptions o;
  o.state_dir = dir.path().string();
  openPoolControl("sim:" + test::hgxCluster(), o)->status();
  auto pids = startClients("sim:" + test::hgxCluster(), dir.path().string(), "", clients, iterations, dir);
  EXPECT_EQ(waitAll(pids), 0);
  Log log = readLogs(dir, clients);
  EXPECT_EQ(log.errors, 0) << log.first_error;
  EXPECT_EQ(log.acquired, clients * iterations);
  EXPECT_EQ(log.released, clients * iterations);
  expectNoGpuInTwoLeases(log);
  auto pool = openPoolControl("sim:" + test::hgxCluster(), o);
  EXPECT_TRUE(pool->leases().empty());
  PoolStatus s = pool->status();
  EXPECT_EQ(s.gpus_free, 128);
  EXPECT_EQ(s.leases_granted, static_cast<uint64_t>(clients * iterations)) << "every lease accounted for";
}

// poold's tests run against both stores: "sqlite" (its state directory) and "etcd".
class PooldStore : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "etcd") POOLRUN_TEST_REQUIRE_ETCD();
  }
  // poold's options for the store, the cluster file included, listening on `port`.
  std::vector<std::string> options(int port) const {
    std::vector<std::string> o = test::storeOptions(GetParam(), port);
    o.insert(o.end(), {"--cluster", test::hgxCluster()});
    return o;
  }
};

using PooldConcurrency = PooldStore;
using Crash = PooldStore;

TEST_P(PooldConcurrency, ManyProcessesShareAPoold) {
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  const int port = test::freePort();
  test::PooldProcess poold(dir.path() / "state", tokens, options(port), port);
  ASSERT_TRUE(poold.waitServing());
  const int clients = 16, iterations = 40;
  auto pids = startClients(poold.uri(), "", "tok-alice-0123456789", clients, iterations, dir);
  EXPECT_EQ(waitAll(pids), 0);
  Log log = readLogs(dir, clients);
  EXPECT_EQ(log.errors, 0) << log.first_error;
  EXPECT_EQ(log.acquired, clients * iterations);
  expectNoGpuInTwoLeases(log);
  ClientOptions o;
  o.token = "tok-root-0123456789";
  auto pool = openPoolControl(poold.uri(), o);
  EXPECT_TRUE(pool->leases().empty());
  EXPECT_EQ(pool->status().leases_granted, static_cast<uint64_t>(clients * iterations));
}

TEST_P(Crash, SigkillUnderLoadLosesNoAcknowledgedChange) {
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  const auto state = dir.path() / "state";
  const int clients = 8;
  // The same store after the restart (etcd: the same prefix; the new poold leads once the killed
  // one's etcd lease has expired).
  const int port = test::freePort();
  const std::vector<std::string> opts = options(port);
  std::string shortLease;
  {
    test::PooldProcess poold(state, tokens, opts, port);
    ASSERT_TRUE(poold.waitServing());
    ClientOptions o;
    o.token = "tok-bob-0123456789";
    LeaseRequest r;
    r.gpus = 1;
    r.ttl = std::chrono::seconds(2);
    shortLease = openPoolControl(poold.uri(), o)->acquire(r).id;  // must expire across the restart
    auto pids = startClients(poold.uri(), "", "tok-alice-0123456789", clients, 1'000'000, dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    poold.kill9();
    waitAll(pids);  // each client stops at its first failed call
  }
  Log log = readLogs(dir, clients);
  ASSERT_GT(log.acquired, 50) << "the load ran";
  EXPECT_EQ(log.errors, clients) << "every client saw poold go";

  test::PooldProcess poold(state, tokens, opts, port);
  ASSERT_TRUE(poold.waitServing()) << "the restarted poold leads once the killed one's etcd lease expired";
  ClientOptions o;
  o.token = "tok-root-0123456789";
  auto pool = openPoolControl(poold.uri(), o);
  std::map<std::string, Lease> held;
  std::set<std::string> gpus;
  for (const Lease& l : pool->leases()) {
    held[l.id] = l;
    for (const GpuRef& g : l.gpus)
      EXPECT_TRUE(gpus.insert(g.node + ":" + std::to_string(g.index)).second)
          << "GPU in two leases after restart";
  }
  expectNoGpuInTwoLeases(log, leaseIds(*pool));
  int kept = 0;
  for (const auto& [id, h] : log.leases) {
    if (h.released) {
      EXPECT_EQ(held.count(id), 0u) << "acknowledged release of " << id << " lost";
    } else if (!h.releasing) {
      EXPECT_EQ(held.count(id), 1u) << "acknowledged lease " << id << " lost";
      ++kept;
    }
  }
  EXPECT_LE(held.size(), static_cast<size_t>(kept + clients + 1))
      << "beyond what clients know, only replies lost in the crash";
  // Expiry keeps working across the restart.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool expired = false;
  while (!expired && std::chrono::steady_clock::now() < deadline) {
    expired = true;
    for (const Lease& l : pool->leases()) expired &= l.id != shortLease;
    if (!expired) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(expired) << "the 2 s lease did not expire after the restart";
  for (const Lease& l : pool->leases()) pool->release(l.id);
  EXPECT_EQ(pool->status().gpus_free, 128);
}

// --- poold replicas on etcd: the leader killed under load, stopped (a partition), and etcd losing
// members. Each test starts its own three-member etcd and its replicas, with --etcd-ttl 3 (a
// standby takes over about 3 s after the leader dies; the default 5 s would add 2 s per failover).

constexpr int kTestEtcdTtl = test::PooldReplicas::kEtcdTtl;

// poold replicas of the simulated HGX cluster.
class Replicas : public test::PooldReplicas {
 public:
  Replicas(const test::EtcdCluster& etcd, int n, const test::TempDir& dir, std::filesystem::path tokens)
      : PooldReplicas(etcd.uri(), n, dir.path(), std::move(tokens), {"--cluster", test::hgxCluster()}) {}
};

std::unique_ptr<PoolControl> rootOf(const std::string& uri) {
  ClientOptions o;
  o.token = "tok-root-0123456789";
  return openPoolControl(uri, o);
}

// What every client was told holds in the pool: each lease it got is there unless it released
// it; beyond those, only leases whose grant reply was lost (at most one per client and failover).
void expectAcknowledgedLeasesHeld(const Log& log, PoolControl& pool, size_t lostReplies) {
  std::map<std::string, Lease> held;
  std::set<std::string> gpus;
  for (const Lease& l : pool.leases()) {
    held[l.id] = l;
    for (const GpuRef& g : l.gpus)
      EXPECT_TRUE(gpus.insert(g.node + ":" + std::to_string(g.index)).second) << "GPU in two leases";
  }
  size_t kept = 0;
  for (const auto& [id, h] : log.leases) {
    if (h.released) {
      EXPECT_EQ(held.count(id), 0u) << "acknowledged release of " << id << " lost";
    } else if (!h.releasing) {
      EXPECT_EQ(held.count(id), 1u) << "acknowledged lease " << id << " lost";
      ++kept;
    }
  }
  EXPECT_LE(held.size(), kept + lostReplies) << "beyond what clients know, only replies lost in a failover";
}

void stopClients(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
}

// A poolrun job of 2 ranks on the simulated nodes of `uri`, as bob, running `sleep sleepSeconds` (its
// stderr in `err`): the spawned shell's pid.
pid_t spawnJob(const std::string& uri, const test::TempDir& dir, int sleepSeconds, const std::string& err) {
  return test::spawnShell(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_TOKEN=tok-bob-0123456789 "
      "POOLRUN_STATE_DIR=" +
      (dir.path() / "job").string() + " " + POOLRUN_BINARY + " --pool " + uri +
      " --simulate --no-doctor -n 2 --lease-ttl 9 -- sleep " + std::to_string(sleepSeconds) + " >" +
      (dir.path() / "job-out").string() + " 2>" + err);
}

// Until `pool` holds a lease, up to 30 s.
void waitForALease(PoolControl& pool) {
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       pool.leases().empty() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// A detached job's launcher (poolrun --adopt-lease, as the agent starts it) that finds poold down,
// killed as the job was granted, waits for it with one warning and runs the job on its lease once
// poold is back on its port; a lease that is gone ends it at once.
TEST_P(Crash, ALauncherAdoptingItsLeaseWaitsForARestartingPoold) {
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  const int port = test::freePort();
  const std::vector<std::string> opts = options(port);
  auto poold = std::make_unique<test::PooldProcess>(dir.path() / "state", tokens, opts, port);
  ASSERT_TRUE(poold->waitServing());
  ClientOptions bob;
  bob.token = "tok-bob-0123456789";
  LeaseRequest request;
  request.gpus = 2;
  request.ttl = std::chrono::seconds(30);
  request.wait = std::chrono::seconds(0);
  const std::string lease = openPoolControl(poold->uri(), bob)->acquire(request, nullptr).id;
  poold->kill9();
  const std::string err = (dir.path() / "err").string();
  auto launch = [&](const std::string& id) {
    return test::spawnShell(
        "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_TOKEN=tok-bob-0123456789 "
        "POOLRUN_STATE_DIR=" +
        (dir.path() / "job").string() + " " + POOLRUN_BINARY + " --pool " + poold->uri() + " --adopt-lease " +
        id + " --simulate --no-doctor -n 2 -- /bin/true 2>" + err);
  };
  test::Reaped job{launch(lease)};
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  poold = std::make_unique<test::PooldProcess>(dir.path() / "state", tokens, opts, port);
  ASSERT_TRUE(poold->waitServing());
  EXPECT_EQ(job.wait(), 0) << test::slurp(err);
  EXPECT_EQ(test::occurrences(test::slurp(err), "trying again while lease " + lease), 1u) << test::slurp(err);
  EXPECT_TRUE(rootOf(poold->uri())->leases().empty()) << "the launcher released its lease";
  test::Reaped gone{launch(lease)};
  EXPECT_NE(gone.wait(), 0) << "a lease that is gone is not waited for";
  EXPECT_EQ(test::slurp(err).find("trying again"), std::string::npos) << test::slurp(err);
}

// An acquire retried with its request id after poold went (its reply lost with it) gets the lease
// the first one was granted, from the restarted poold or the standby that leads now: the request
// ids are in the store, not in the process.
TEST_P(Crash, ARetriedAcquireGetsItsFirstLeaseAfterARestart) {
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  const int port = test::freePort();
  const std::vector<std::string> opts = options(port);
  const std::string body = R"({"gpus": 8, "ttl_s": 120, "request_id": "Rretry-0001"})";
  const httplib::Headers alice{{"Authorization", "Bearer tok-alice-0123456789"}};
  auto acquire = [&](const std::string& what) -> std::pair<int, nlohmann::json> {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    auto r = c.Post("/v1/leases", alice, what, "application/json");
    if (!r) return {0, nullptr};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  };
  std::string first;
  {
    test::PooldProcess poold(dir.path() / "state", tokens, opts, port);
    ASSERT_TRUE(poold.waitServing());
    auto [status, reply] = acquire(body);
    ASSERT_EQ(status, 200) << reply.dump();
    first = reply["lease"]["id"];
    EXPECT_EQ(acquire(body).second["lease"]["id"], first) << "a retry to the same poold";
    poold.kill9();
  }
  test::PooldProcess poold(dir.path() / "state", tokens, opts, port);
  ASSERT_TRUE(poold.waitServing());
  auto [status, reply] = acquire(body);
  ASSERT_EQ(status, 200) << reply.dump();
  EXPECT_EQ(reply["lease"]["id"], first) << "the restarted poold granted a second lease";
  auto pool = rootOf(poold.uri());
  EXPECT_EQ(pool->leases().size(), 1u);
  // Another request id is another lease; the same id of another owner too.
  EXPECT_NE(acquire(R"({"gpus": 8, "ttl_s": 120, "request_id": "Rretry-0002"})").second["lease"]["id"],
            first);
  httplib::Client c("127.0.0.1", port);
  auto bob = c.Post("/v1/leases", {{"Authorization", "Bearer tok-bob-0123456789"}}, body, "application/json");
  ASSERT_TRUE(bob);
  EXPECT_NE(nlohmann::json::parse(bob->body)["lease"]["id"], first);
  // Released, its id is forgotten with it: a retry now is a new request.
  pool->release(first);
  EXPECT_NE(acquire(body).second["lease"]["id"], first);
}

TEST(Failover, ALeaderKilledUnderLoadLosesNothingAndAStandbyLeadsWithin10s) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  test::EtcdCluster etcd(3);
  Replicas replicas(etcd, 3, dir, tokens);
  const int clients = 16, rounds = 5;
  // A job through poolrun on the simulated nodes, running through the failovers.
  auto pool = rootOf(replicas.uri());
  const std::string jobErr = (dir.path() / "job-err").string();
  test::Reaped job{spawnJob(replicas.uri(), dir, 12, jobErr)};
  waitForALease(*pool);
  ASSERT_EQ(pool->leases().size(), 1u) << "the job started: " << test::slurp(jobErr);
  auto pids = startClients(replicas.uri(), "", "tok-alice-0123456789", clients, 1'000'000, dir);
  std::vector<double> failover;
  for (int round = 0; round < rounds; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));  // the load runs
    const int leader = replicas.leader(std::chrono::seconds(10));
    ASSERT_GE(leader, 0) << "no leader in round " << round;
    const auto killed = std::chrono::steady_clock::now();
    replicas.at(leader).kill9();
    const int next = replicas.leader(std::chrono::seconds(15), leader);
    ASSERT_GE(next, 0) << "no standby took over in round " << round;
    failover.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
    replicas.start(leader);  // back, as a standby
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  stopClients(pids);
  EXPECT_EQ(job.wait(), 0) << "the job across the failovers: " << test::slurp(jobErr);
  EXPECT_EQ(test::occurrences(test::slurp(jobErr), "warning: cannot renew"), 0u) << test::slurp(jobErr);
  Log log = readLogs(dir, clients);
  EXPECT_EQ(log.errors, 0) << "a client saw a failover as an error: " << log.first_error;
  ASSERT_GT(log.acquired, 100) << "the load ran";
  expectNoGpuInTwoLeases(log, leaseIds(*pool));
  expectAcknowledgedLeasesHeld(log, *pool, static_cast<size_t>(clients * (rounds + 1)));
  std::vector<double> sorted = failover;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], worst = sorted.back();
  std::printf(
      "failover (leader SIGKILLed, 16 clients, --etcd-ttl %d): median %.2f s, worst %.2f s over %d rounds; "
      "%d leases granted\n",
      kTestEtcdTtl, median, worst, rounds, log.acquired);
  RecordProperty("failover_median_ms", static_cast<int>(median * 1000));
  RecordProperty("failover_worst_ms", static_cast<int>(worst * 1000));
  EXPECT_LT(worst, 10.0) << "a standby leads within 10 s";
}

TEST(Failover, AJobRunsThroughAFailoverAndItsRenewalsSayOneLine) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  test::EtcdCluster etcd(3);
  Replicas replicas(etcd, 2, dir, tokens);
  auto pool = rootOf(replicas.uri());
  const std::string err = (dir.path() / "err").string();
  test::Reaped job{spawnJob(replicas.uri(), dir, 10, err)};
  waitForALease(*pool);
  ASSERT_EQ(pool->leases().size(), 1u) << test::slurp(err);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int leader = replicas.leader(std::chrono::seconds(5));
  ASSERT_GE(leader, 0);
  replicas.at(leader).kill9();
  EXPECT_EQ(job.wait(), 0) << test::slurp(err);
  const std::string text = test::slurp(err);
  EXPECT_EQ(test::occurrences(text, "warning: cannot renew"), 0u) << text;
  EXPECT_LE(test::occurrences(text, "the pool's leader is now"), 1u) << text;
  EXPECT_TRUE(pool->leases().empty()) << "the job's lease was released through the new leader";
}

TEST(Failover, APartitionedLeaderChangesNothingWhenItResumes) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  test::EtcdCluster etcd(3);
  Replicas replicas(etcd, 2, dir, tokens);
  const int old = replicas.leader(std::chrono::seconds(10));
  ASSERT_GE(old, 0);
  // A client that knows only the old leader, as one on its side of a partition would.
  auto stranded = rootOf("http://127.0.0.1:" + std::to_string(replicas.port(old)));
  ASSERT_EQ(stranded->status().leases_granted, 0u);
  kill(replicas.at(old).pid(), SIGSTOP);
  const int next = replicas.leader(std::chrono::seconds(15), old);
  ASSERT_GE(next, 0) << "no standby took over from the stopped leader";
  EtcdClient client(parseEtcdUri(etcd.uri()));
  int64_t before = 0;
  client.range(replicas.prefix() + "/", EtcdClient::prefixEnd(replicas.prefix() + "/"), &before);
  // A request waits in the stopped leader's socket; it resumes past its lease.
  auto late = std::async(std::launch::async, [&] {
    LeaseRequest r;
    r.gpus = 8;
    r.ttl = std::chrono::seconds(60);
    try {
      stranded->acquire(r);
      return std::string("granted");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(replicas.at(old).pid(), SIGCONT);
  const std::string answer = late.get();
  EXPECT_EQ(answer.find("granted"), std::string::npos) << "the deposed leader granted a lease";
  EXPECT_TRUE(answer.find("no longer leads") != std::string::npos ||
              answer.find("cannot reach poold") != std::string::npos)
      << answer;
  const int status = replicas.at(old).waitExit(std::chrono::seconds(10));
  EXPECT_TRUE(status == 75 || status == 70) << "the deposed leader exits (status " << status << ")";
  int64_t after = 0;
  client.range(replicas.prefix() + "/", EtcdClient::prefixEnd(replicas.prefix() + "/"), &after);
  EXPECT_EQ(after, before) << "etcd changed after the deposed leader resumed";
  auto pool = rootOf(replicas.uri());
  EXPECT_TRUE(pool->leases().empty());
  LeaseRequest r;
  r.gpus = 8;
  r.ttl = std::chrono::seconds(60);
  EXPECT_NO_THROW(pool->release(pool->acquire(r).id)) << "the new leader serves";
}

TEST(Failover, EtcdLosingOneMemberServesAndLosingTwoRefusesChangesUntilTheyReturn) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  test::EtcdCluster etcd(3);
  Replicas replicas(etcd, 2, dir, tokens);
  auto pool = rootOf(replicas.uri());
  LeaseRequest r;
  r.gpus = 8;
  r.ttl = std::chrono::seconds(300);
  const std::string kept = pool->acquire(r).id;
  etcd.kill(0);
  EXPECT_NO_THROW(pool->release(pool->acquire(r).id)) << "one etcd member lost: the pool serves";
  etcd.kill(1);
  const auto start = std::chrono::steady_clock::now();
  try {
    pool->acquire(r);
    ADD_FAILURE() << "a lease granted without an etcd quorum";
  } catch (const PoolError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("no replica can lead: etcd cluster"), std::string::npos) << what;
    EXPECT_NE(what.find("check that a majority of its members run"), std::string::npos) << what;
    std::printf("without an etcd quorum, after %.1f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                what.c_str());
  }
  // Nothing served from a state that cannot be checked: each replica refuses, or is gone.
  for (int i = 0; i < 2; ++i)
    EXPECT_THROW(rootOf("http://127.0.0.1:" + std::to_string(replicas.port(i)))->leases(), PoolError) << i;
  etcd.start(0);
  etcd.start(1);
  ASSERT_TRUE(etcd.waitHealthy(std::chrono::seconds(30)));
  // The replicas recover by themselves (a leader that could not commit exited; the standby leads).
  std::vector<Lease> leases;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    try {
      leases = pool->leases();
      break;
    } catch (const PoolError& e) {
      if (std::chrono::steady_clock::now() >= deadline) FAIL() << "the pool did not recover: " << e.what();
    }
  }
  // The lease granted before the outage; and perhaps the refused one: etcd had it in its log when
  // the leader gave up waiting, and committed it when the members came back. Nobody holds it; it
  // expires at its TTL, like a grant whose reply a failover lost.
  std::set<std::string> ids;
  for (const Lease& l : leases) ids.insert(l.id);
  EXPECT_EQ(ids.count(kept), 1u) << "the lease granted before the outage";
  EXPECT_LE(leases.size(), 2u);
  EXPECT_NO_THROW(pool->release(pool->acquire(r).id));
}

TEST(Failover, PoolctlStatusAndMetricsShowTheReplicasAndEtcdsMembers) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  test::EtcdCluster etcd(3);
  Replicas replicas(etcd, 2, dir, tokens);
  const int leader = replicas.leader(std::chrono::seconds(10));
  ASSERT_GE(leader, 0);
  auto status = [&] {
    std::string out;
    EXPECT_EQ(test::runProgram({POOLCTL_BINARY, "--pool", replicas.uri(), "status"}, &out,
                               {"POOLRUN_TOKEN=tok-alice-0123456789"}),
              0);
    return out;
  };
  // The standby lists itself once it campaigns (after the line PooldProcess waits for).
  std::string out;
  for (int i = 0; i < 50 && test::occurrences(out = status(), "  standby\n") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string url = "http://127.0.0.1:" + std::to_string(replicas.port(leader));
  const std::string other = "http://127.0.0.1:" + std::to_string(replicas.port(1 - leader));
  EXPECT_NE(out.find("replicas (" + etcd.uri() + " (prefix " + replicas.prefix() + ")):"), std::string::npos)
      << out;
  EXPECT_NE(out.find("  " + url + "  leader\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  " + other + "  standby\n"), std::string::npos) << out;
  EXPECT_NE(out.find("etcd: 3 of 3 members answer\n"), std::string::npos) << out;
  EXPECT_EQ(test::occurrences(out, "etcd's leader"), 1u) << out;
  // The leader's /metrics: its flag and the elections (one so far), valid for promtool.
  httplib::Client http("127.0.0.1", replicas.port(leader));
  auto m = http.Get("/metrics", {{"Authorization", "Bearer tok-root-0123456789"}});
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_NE(m->body.find("\npoolrun_leader 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("\npoolrun_leader_elections_total 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("\npoolrun_leader_since_seconds "), std::string::npos) << m->body;
  if (test::runShell("command -v promtool").status == 0) {
    test::ProcessResult r =
        test::runShell("promtool check metrics < " + dir.write("metrics.txt", m->body).string());
    EXPECT_EQ(r.status, 0) << r.out << r.err;
  }
  etcd.kill(2);
  out = status();
  EXPECT_NE(out.find("etcd: 2 of 3 members answer\n"), std::string::npos) << out;
  EXPECT_NE(out.find("127.0.0.1:" + std::to_string(etcd.clientPort(2)) + "  unreachable: "),
            std::string::npos)
      << out;
}

// Prometheus scrapes every replica. A standby answers /metrics itself, with the leader's access
// rules: poolrun_leader 0, its own process and etcd series, none of the pool's (before, it
// redirected to the leader, whose series were then stored under both and the GPU total doubled).
TEST(Failover, AStandbyServesItsOwnMetricsAndNoneOfThePools) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  test::EtcdCluster etcd(3);
  Replicas replicas(etcd, 2, dir, tokens);
  const int leader = replicas.leader(std::chrono::seconds(10));
  ASSERT_GE(leader, 0);
  const int standby = 1 - leader;
  auto get = [&](int i, const std::string& path, const std::string& token) {
    httplib::Client c("127.0.0.1", replicas.port(i));
    c.set_follow_location(false);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    return c.Get(path, headers);
  };
  auto lead = get(leader, "/metrics", "tok-root-0123456789");
  ASSERT_TRUE(lead);
  ASSERT_EQ(lead->status, 200) << lead->body;
  EXPECT_NE(lead->body.find("\npoolrun_leader 1\n"), std::string::npos) << lead->body;
  EXPECT_NE(lead->body.find("\npoolrun_gpus{state=\"free\"} "), std::string::npos) << lead->body;
  auto own = get(standby, "/metrics", "tok-alice-0123456789");
  ASSERT_TRUE(own);
  ASSERT_EQ(own->status, 200) << own->status << " " << own->get_header_value("Location") << own->body;
  const std::string& m = own->body;
  EXPECT_NE(m.find("\npoolrun_leader 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nprocess_start_time_seconds "), std::string::npos) << m;
  EXPECT_NE(m.find("\npoolrun_build_info{version="), std::string::npos) << m;
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(m.find("\npoolrun_etcd_member_up{endpoint=\"127.0.0.1:" + std::to_string(etcd.clientPort(i)) +
                     "\"} 1\n"),
              std::string::npos)
        << m;
  for (const char* pools : {"poolrun_gpus", "poolrun_nodes", "poolrun_leases", "poolrun_queue",
                            "poolrun_leader_elections_total", "poolrun_request_duration_seconds"})
    EXPECT_EQ(m.find(pools), std::string::npos) << pools << " is the leader's alone: " << m;
  if (test::runShell("command -v promtool").status == 0) {
    test::ProcessResult r =
        test::runShell("promtool check metrics < " + dir.write("standby.txt", m).string());
    EXPECT_EQ(r.status, 0) << r.out << r.err;
  }
  // The leader's access rules: no token, or one poold does not know, gets 401.
  auto none = get(standby, "/metrics", "");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401) << none->body;
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"poold\"");
  auto unknown = get(standby, "/metrics", "tok-nobody-0123456789");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401) << unknown->body;
  EXPECT_EQ(unknown->body.find("poolrun_leader"), std::string::npos);
  // Every other path still goes to the leader.
  auto status = get(standby, "/v1/status", "tok-alice-0123456789");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 307);
}

// poold --max-queued-per-owner: past it one owner's request that does not fit now gets 429, saying
// the limit and what to do, while another owner still queues; the count is the stored queue's, so
// it holds after a restart.
using QueueLimit = PooldStore;
TEST_P(QueueLimit, AnOwnersQueuedRequestsStopAtTheLimitAcrossARestart) {
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  const auto state = dir.path() / "state";
  const int port = test::freePort();
  std::vector<std::string> opts = options(port);
  opts.insert(opts.end(), {"--max-queued-per-owner", "3"});
  auto post = [&](const std::string& token, const std::string& body) {
    httplib::Client http("127.0.0.1", port);
    auto r = http.Post("/v1/leases", {{"Authorization", "Bearer " + token}}, body, "application/json");
    return r ? std::pair(r->status, r->body) : std::pair(-1, std::string("no reply"));
  };
  const std::string alice = "tok-alice-0123456789", bob = "tok-bob-0123456789";
  const std::string all = R"({"gpus": 128, "ttl_s": 60, "wait_s": 600})";  // waits while a GPU is held
  {
    test::PooldProcess poold(state, tokens, opts, port);
    ASSERT_TRUE(poold.waitServing());
    ASSERT_EQ(post("tok-root-0123456789", R"({"gpus": 1, "ttl_s": 3600})").first, 200);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(post(alice, all).first, 202) << i;
    auto [status, body] = post(alice, all);
    EXPECT_EQ(status, 429) << body;
    const nlohmann::json reply = nlohmann::json::parse(body);
    EXPECT_EQ(reply["reason"], "too_many_queued") << body;
    EXPECT_EQ(reply["limit"], 3) << body;
    EXPECT_NE(body.find("owner alice already has 3 requests in the queue"), std::string::npos) << body;
    EXPECT_NE(body.find("--max-queued-per-owner is 3"), std::string::npos) << body;
    EXPECT_EQ(post(bob, all).first, 202) << "another owner still queues";

    // poolctl says it in one line and fails.
    test::ProcessResult r = test::runShell("POOLRUN_TOKEN=" + alice + " timeout 20 " + POOLCTL_BINARY +
                                           " --pool " + poold.uri() + " acquire -n 128 --wait 600");
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("(429): owner alice already has 3 requests in the queue"), std::string::npos)
        << r.err;
    poold.stop();
  }
  test::PooldProcess poold(state, tokens, opts, port);
  ASSERT_TRUE(poold.waitServing());
  auto [status, body] = post(alice, all);
  EXPECT_EQ(status, 429) << "the count came back with the stored queue: " << body;
}

auto storeName = [](const auto& info) { return info.param; };
INSTANTIATE_TEST_SUITE_P(Sqlite, PooldConcurrency, ::testing::Values("sqlite"), storeName);
INSTANTIATE_TEST_SUITE_P(Etcd, PooldConcurrency, ::testing::Values("etcd"), storeName);
INSTANTIATE_TEST_SUITE_P(Sqlite, Crash, ::testing::Values("sqlite"), storeName);
INSTANTIATE_TEST_SUITE_P(Etcd, Crash, ::testing::Values("etcd"), storeName);
INSTANTIATE_TEST_SUITE_P(Sqlite, QueueLimit, ::testing::Values("sqlite"), storeName);
INSTANTIATE_TEST_SUITE_P(Etcd, QueueLimit, ::testing::Values("etcd"), storeName);

}  // namespace
}  // namespace poolrun::pool
