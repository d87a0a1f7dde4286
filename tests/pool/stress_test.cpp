// Many client processes at once, and poold killed with SIGKILL under load: no GPU is ever in two
// leases, and every change a client was told about is what the pool holds.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "poold_process.hpp"
#include "poolrun/pool/control.hpp"
#include "support/etcd_cluster.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

struct Held {
  std::vector<std::string> gpus;
  int64_t from = 0;
  int64_t to = INT64_MAX;  // not released (as far as the client knows)
  bool released = false;
  bool releasing = false;  // a release was sent; without R its outcome is unknown
};

struct Log {
  std::map<std::string, Held> leases;
  int acquired = 0, released = 0, errors = 0;
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
      continue;
    }
    w >> id;
    if (kind == "r") {
      log.leases.at(id).releasing = true;
      continue;
    }
    w >> t;
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

// Two leases hold a GPU at the same moment only if their known holding intervals overlap.
void expectNoGpuInTwoLeases(const Log& log) {
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> byGpu;
  for (const auto& [id, h] : log.leases)
    for (const std::string& g : h.gpus) byGpu[g].push_back({h.from, h.to});
  int overlaps = 0;
  for (auto& [gpu, spans] : byGpu) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second) ++overlaps;
  }
  EXPECT_EQ(overlaps, 0) << "GPUs held by two leases at once";
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
  EXPECT_EQ(log.errors, 0);
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
  auto tokens = dir.write("tokens", test::kTokens);
  const int port = test::freePort();
  test::PooldProcess poold(dir.path() / "state", tokens, options(port), port);
  const int clients = 16, iterations = 40;
  auto pids = startClients(poold.uri(), "", "tok-alice-0123456789", clients, iterations, dir);
  EXPECT_EQ(waitAll(pids), 0);
  Log log = readLogs(dir, clients);
  EXPECT_EQ(log.errors, 0);
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
  auto tokens = dir.write("tokens", test::kTokens);
  const auto state = dir.path() / "state";
  const int clients = 8;
  // The same store after the restart (etcd: the same prefix; the new poold leads once the killed
  // one's etcd lease has expired).
  const int port = test::freePort();
  const std::vector<std::string> opts = options(port);
  std::string shortLease;
  {
    test::PooldProcess poold(state, tokens, opts, port);
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
  expectNoGpuInTwoLeases(log);

  test::PooldProcess poold(state, tokens, opts, port);
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

auto storeName = [](const auto& info) { return info.param; };
INSTANTIATE_TEST_SUITE_P(Sqlite, PooldConcurrency, ::testing::Values("sqlite"), storeName);
INSTANTIATE_TEST_SUITE_P(Etcd, PooldConcurrency, ::testing::Values("etcd"), storeName);
INSTANTIATE_TEST_SUITE_P(Sqlite, Crash, ::testing::Values("sqlite"), storeName);
INSTANTIATE_TEST_SUITE_P(Etcd, Crash, ::testing::Values("etcd"), storeName);

}  // namespace
}  // namespace poolrun::pool
