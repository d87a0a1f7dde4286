// The pool's costs: a placement decision over a 10,000-GPU inventory, acquire+release pairs per
// second against a poold on loopback with committed state (synchronous=NORMAL and FULL), and
// opening the state file with its checks. Measures only; asserts nothing about time.

#include <benchmark/benchmark.h>
#include <httplib.h>
#include <sqlite3.h>
#include <algorithm>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "inventory.hpp"
#include "poold_process.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/dashboard.hpp"
#include "poolrun/pool/heartbeat_reader.hpp"
#include "poolrun/pool/munge_users.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/reservations.hpp"
#include "poolrun/pool/store.hpp"
#include "sample_heartbeat.hpp"
#include "support/etcd_cluster.hpp"
#include "support/fixtures.hpp"
#include "support/munge_daemon.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"
#include "support/test_pki.hpp"

namespace poolrun::pool {
namespace {

// 1,250 nodes x 8 GPUs under 5 leaf switches, every third node half leased.
std::string bigInventory() {
  std::string spec;
  for (int s = 0; s < 5; ++s) {
    char buf[64];
    snprintf(buf, sizeof buf, "n[%04d-%04d]/gpu[0-7]@leaf%d; ", s * 250 + 1, s * 250 + 250, s + 1);
    spec += buf;
  }
  for (int n = 1; n <= 1250; n += 3) {
    char buf[32];
    snprintf(buf, sizeof buf, "n%04d leased 0-3; ", n);
    spec += buf;
  }
  return spec;
}

void BM_Place10kGpus(benchmark::State& state) {
  PoolState pool;
  TimePoint now = std::chrono::system_clock::now();
  test::addInventory(pool, bigInventory(), now);
  LeaseRequest r = test::parseRequest(std::to_string(state.range(0)));
  std::vector<NodeView> views;
  for (const PoolNode* n : pool.nodesInOrder()) {
    NodeView v{n, {}, false};
    for (size_t i = 0; i < n->gpuCount(); ++i)
      if (!pool.holder(n->name, i)) v.usable.push_back(i);
    v.whole = v.usable.size() == n->gpuCount();
    views.push_back(std::move(v));
  }
  for (auto _ : state) benchmark::DoNotOptimize(place(views, r));
  state.SetLabel("10,000 GPUs, 1,250 nodes, 5 switches");
}
BENCHMARK(BM_Place10kGpus)->Arg(4)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);

// The whole decision as poold makes it: filter the inventory, place, grant; then release.
void BM_SubmitRelease10kGpus(benchmark::State& state) {
  PoolState pool;
  TimePoint now = std::chrono::system_clock::now();
  test::addInventory(pool, bigInventory(), now);
  LeaseRequest r = test::parseRequest(std::to_string(state.range(0)));
  for (auto _ : state) {
    SubmitResult s = pool.submit(r, now);
    pool.release(s.lease->id, r.owner, false, now);
    pool.takeDirty();
  }
}
BENCHMARK(BM_SubmitRelease10kGpus)->Arg(4)->Arg(64)->Unit(benchmark::kMicrosecond);

// The inventory of heartbeat_bench's scale: 12,500 nodes of 8 GPUs under 25 leaf switches.
std::string hundredThousandGpus() {
  std::string spec;
  for (int s = 0; s < 25; ++s) {
    char buf[64];
    snprintf(buf, sizeof buf, "n[%05d-%05d]/gpu[0-7]@leaf%d; ", s * 500 + 1, s * 500 + 500, s + 1);
    spec += buf;
  }
  return spec;
}

// The leases of hundredThousandGpus()'s nodes n00001..n12500 that `leased(n)` names, each whole.
template <typename Leased>
std::string wholeNodesLeased(Leased leased) {
  std::string spec;
  for (int n = 1; n <= 12500; ++n) {
    if (!leased(n)) continue;
    char buf[32];
    snprintf(buf, sizeof buf, "n%05d leased 0-7; ", n);
    spec += buf;
  }
  return spec;
}

// Reservations tomorrow of `count` nodes each on the leased nodes of hundredThousandGpus() (nine of
// every ten), so that they cost each placement its filtering without changing where it lands.
void reserveLeasedNodes(PoolState& pool, int count, int nodes_each, TimePoint now) {
  int n = 1;
  for (int k = 0; k < count; ++k) {
    Reservation r;
    r.name = "r" + std::to_string(k);
    r.users = {"bob"};
    r.start = now + std::chrono::hours(24);
    r.end = r.start + std::chrono::hours(2);
    while (static_cast<int>(r.nodes.size()) < nodes_each && n <= 12500) {
      char name[16];
      snprintf(name, sizeof name, "n%05d", n);
      if (n % 10 != 0) r.nodes.push_back(name);
      ++n;
    }
    pool.reserve(std::move(r), now);
  }
}

// The same at the scale of heartbeat_bench: 12,500 nodes x 8 GPUs under 25 leaf switches, 90% of
// the nodes wholly leased, 8 GPUs acquired and released (what poold does under its state lock);
// the second argument the reservations of 9 nodes each the pool keeps (placement keeps off them).
void BM_SubmitRelease100kGpus(benchmark::State& state) {
  const std::string spec = hundredThousandGpus() + wholeNodesLeased([](int n) { return n % 10 != 0; });
  PoolState pool;
  TimePoint now = std::chrono::system_clock::now();
  test::addInventory(pool, spec, now);
  reserveLeasedNodes(pool, static_cast<int>(state.range(1)), 9, now);
  pool.takeDirty();
  LeaseRequest r = test::parseRequest(std::to_string(state.range(0)));
  for (auto _ : state) {
    SubmitResult s = pool.submit(r, now);
    pool.release(s.lease->id, r.owner, false, now);
    pool.takeDirty();
  }
  state.SetLabel("100,000 GPUs, 12,500 nodes, 25 switches, 90% leased, " + std::to_string(state.range(1)) +
                 " reservations");
}
BENCHMARK(BM_SubmitRelease100kGpus)->ArgsProduct({{8, 64}, {0, 1000}})->Unit(benchmark::kMicrosecond);

// 99,936 GPUs in NVL72 racks: 1,388 NVLink domains of 18 nodes x 4 GPUs, 8 domains under each leaf,
// 8 leaves under each spine; Arg 1: 1 leases every whole node but one in ten (each rack keeps 1-2
// nodes free, so a large request spans many domains), 0 none.
std::string nvl72Racks(bool fragmented) {
  std::string spec;
  char buf[128];
  for (int rack = 0; rack < 1388; ++rack) {
    snprintf(buf, sizeof buf, "r%04dn[01-18]/gpu[0-3]@leaf%d nvl=rack%d spine=s%d; ", rack, rack / 8, rack,
             rack / 64);
    spec += buf;
    for (int n = 1; fragmented && n <= 18; ++n)
      if ((rack * 18 + n) % 10 != 0) {
        snprintf(buf, sizeof buf, "r%04dn%02d leased 0-3; ", rack, n);
        spec += buf;
      }
  }
  return spec;
}

// An acquire and release of Arg 0 GPUs on nvl72Racks(Arg 1), as poold makes it under its lock.
void BM_SubmitReleaseNvl72(benchmark::State& state) {
  PoolState pool;
  TimePoint now = std::chrono::system_clock::now();
  test::addInventory(pool, nvl72Racks(state.range(1) != 0), now);
  pool.takeDirty();
  LeaseRequest r = test::parseRequest(std::to_string(state.range(0)));
  for (auto _ : state) {
    SubmitResult s = pool.submit(r, now);
    if (!s.lease) {
      state.SkipWithError("did not fit");
      break;
    }
    pool.release(s.lease->id, r.owner, false, now);
    pool.takeDirty();
  }
  state.SetLabel(std::string("99,936 GPUs in 1,388 NVL72 domains") +
                 (state.range(1) ? ", 90% of nodes leased" : ""));
}
BENCHMARK(BM_SubmitReleaseNvl72)->ArgsProduct({{4, 64, 72, 144, 200}, {0, 1}})->Unit(benchmark::kMicrosecond);

// The dashboard's snapshot of the same 100,000 GPUs, each with a heartbeat's sample: Arg 0 the copy
// made under the state's lock (captureDashboard), Arg 1 the JSON written after it (dashboardJson).
void BM_DashboardSnapshot100kGpus(benchmark::State& state) {
  const std::string spec = hundredThousandGpus() + wholeNodesLeased([](int n) { return n % 8 == 1; });
  PoolState pool;
  TimePoint now = std::chrono::system_clock::now();
  test::addInventory(pool, spec, now);
  for (const auto& [name, node] : pool.nodeMap()) {
    Heartbeat hb;
    hb.node = name;
    hb.topology_hash = node.topology_hash;
    for (size_t i = 0; i < node.gpuCount(); ++i) {
      topo::GpuSample g;
      g.index = i;
      g.sm_utilization = 0.5;
      g.memory_used_bytes = uint64_t{40} << 30;
      g.memory_total_bytes = uint64_t{80} << 30;
      g.temperature_c = 50;
      g.power_w = 400;
      hb.gpus.push_back(g);
    }
    pool.heartbeat(hb, now);
  }
  pool.takeDirty();
  const DashboardData data = captureDashboard(pool, now);
  size_t bytes = 0;
  for (auto _ : state) {
    if (state.range(0) == 0) {
      benchmark::DoNotOptimize(captureDashboard(pool, now));
    } else {
      std::string json = dashboardJson(data);
      bytes = json.size();
      benchmark::DoNotOptimize(json);
    }
  }
  state.SetLabel(state.range(0) == 0 ? "the copy, under the state's lock"
                                     : "the JSON after it: " + std::to_string(bytes / 1024) + " KiB");
}
BENCHMARK(BM_DashboardSnapshot100kGpus)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// What poold does with one heartbeat of a held node (8 GPUs with a process each, 8 NIC ports), in
// three parts: Arg 0 reading its 4.4 KB body, Arg 1 applying it to a pool of 12,500 agent nodes
// (100,000 GPUs) held by leases of 64 GPUs, Arg 2 writing the reply (8 GPUs' leases).
void BM_HeartbeatParts(benchmark::State& state) {
  auto topology = std::make_shared<const topo::NodeTopology>(test::synthetic({}));
  PoolState pool;
  TimePoint now = std::chrono::system_clock::now();
  const int nodes = state.range(0) == 1 ? 12500 : 8;
  auto name = [](int n) {
    char buf[16];
    snprintf(buf, sizeof buf, "hb%05d", n + 1);
    return std::string(buf);
  };
  for (int n = 0; n < nodes; ++n) {
    NodeRegistration r;
    r.node.name = name(n);
    r.node.topology = topology;
    r.node.levels.switch_name = "leaf" + std::to_string(n / 500);
    r.agent_version = "poold-agent bench";
    pool.registerAgentNode(r, now);
  }
  LeaseRequest r = test::parseRequest("64");
  r.gpus_per_node = 8;
  std::string lease;
  for (int n = 0; n + 8 <= nodes; n += 8) {
    SubmitResult s = pool.submit(r, now);
    if (n == 0) lease = s.lease->id;
  }
  pool.takeDirty();
  const std::string body =
      toJson(bench::heartbeatOf(name(0), *topology, topologyHash(*topology), lease, 0)).dump();
  const Heartbeat hb = heartbeatFromText(body);
  const HeartbeatReply reply = pool.heartbeat(hb, now);
  if (reply.register_again || reply.gpu_leases.size() != 8)
    state.SkipWithError("the heartbeat was not taken");
  for (auto _ : state) {
    if (state.range(0) == 0) {
      benchmark::DoNotOptimize(heartbeatFromText(body));
    } else if (state.range(0) == 1) {
      now += std::chrono::milliseconds(1);
      benchmark::DoNotOptimize(pool.heartbeat(hb, now));
    } else {
      benchmark::DoNotOptimize(heartbeatReplyText(reply));
    }
  }
  state.SetLabel(state.range(0) == 0   ? "read a " + std::to_string(body.size()) + "-byte heartbeat"
                 : state.range(0) == 1 ? "apply it (12,500 nodes, 1,562 leases)"
                                       : "write the reply");
}
BENCHMARK(BM_HeartbeatParts)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

// A whole scheduling pass (PoolState::tick) on a full pool: 12,500 nodes x 8 GPUs under 25 leaf
// switches, held by 10,000 leases (7,500 of 8 GPUs, 2,500 of 16 across two nodes; half of them
// preemptible; priorities 0-10; a third without an end, the others ending within a day; all past
// the minimum runtime), and WAITING requests (1 to 64 GPUs, priorities 0-20, half with a maximum
// duration). The first pass chooses the victims (first_pass_ms); the time is that of each later
// pass, which plans every request again. Arg 1 = 1: fair share on (docs/fairshare.md): 1,000 accounts
// (100 under the root, 9 under each), 10,000 users (10 an account) who hold the leases and ask for
// the requests, each with a ledger row of past usage; the pass then computes every factor first.
void BM_SchedulingPass(benchmark::State& state) {
  const int waiting = static_cast<int>(state.range(0));
  const bool fair = state.range(1) == 1;
  constexpr int kUsers = 10'000;
  auto userOf = [](int i) { return "user" + std::to_string(i % kUsers); };
  auto accountOf = [](int i) { return "acct" + std::to_string((i % kUsers) / 10); };
  std::mt19937 rng(11);
  const TimePoint now = std::chrono::system_clock::now();
  PoolState pool;
  test::SyntheticSpec spec;
  spec.gpus = 8;
  spec.nics = 8;
  auto topology = std::make_shared<topo::NodeTopology>(test::synthetic(spec));
  auto name = [](int n) {
    char buf[16];
    snprintf(buf, sizeof buf, "n%05d", n);
    return std::string(buf);
  };
  for (int n = 1; n <= 12500; ++n) {
    PoolNode node;
    node.name = name(n);
    node.order = n;
    node.topology = topology;
    node.levels.switch_name = "leaf" + std::to_string((n - 1) / 500);
    pool.loadNode(std::move(node));
  }
  auto lease = [&](int id, std::vector<int> nodes) {
    Lease l;
    l.id = "L" + std::to_string(id);
    l.owner = fair ? userOf(id) : "owner" + std::to_string(id % 20);
    if (fair) l.account = accountOf(id);
    for (int n : nodes)
      for (size_t i = 0; i < 8; ++i) l.gpus.push_back({name(n), i});
    l.priority = std::uniform_int_distribution<int>(0, 10)(rng);
    l.preemptible = id % 2 == 0;
    l.created = now - std::chrono::seconds(std::uniform_int_distribution<int>(700, 18000)(rng));
    l.ttl = std::chrono::seconds(60);
    l.expires = now + std::chrono::hours(1);
    if (id % 3 != 0)
      l.max_end = now + std::chrono::seconds(std::uniform_int_distribution<int>(60, 86400)(rng));
    pool.loadLease(std::move(l));
  };
  for (int i = 0; i < 7500; ++i) lease(i, {i + 1});
  for (int i = 0; i < 2500; ++i) lease(7500 + i, {7501 + 2 * i, 7502 + 2 * i});
  const int sizes[] = {1, 2, 4, 8, 16, 32, 64};
  for (int t = 1; t <= waiting; ++t) {
    QueueEntry e;
    e.ticket = t;
    e.request.gpus = sizes[std::uniform_int_distribution<int>(0, 6)(rng)];
    e.request.priority = std::uniform_int_distribution<int>(0, 20)(rng);
    e.request.owner = fair ? userOf(t * 7) : "owner" + std::to_string(t % 20);
    if (fair) e.request.account = accountOf(t * 7);
    if (t % 2 == 0)
      e.request.max_duration = std::chrono::seconds(std::uniform_int_distribution<int>(600, 36000)(rng));
    e.enqueued = now - std::chrono::seconds(t);
    e.heartbeat = now;
    pool.loadQueueEntry(std::move(e));
  }
  pool.loadCounters(10000, waiting + 1);
  if (fair) {
    std::string tree;
    for (int a = 0; a < 1000; ++a) {
      tree += "[accounts.acct" + std::to_string(a) + "]\nshares = " + std::to_string(1 + a % 7) + "\n";
      if (a % 10 != 0) tree += "parent = \"acct" + std::to_string(a - a % 10) + "\"\n";
      tree += "users = [";
      for (int u = 0; u < 10; ++u) tree += (u ? ", \"user" : "\"user") + std::to_string(a * 10 + u) + "\"";
      tree += "]\n";
    }
    pool.setAccounts(parseAccounts(tree, "bench"));
    for (int u = 0; u < kUsers; ++u) {
      UsageRecord r;
      r.id = static_cast<uint64_t>(u + 1);
      r.lease = "U" + std::to_string(u);
      r.owner = userOf(u);
      r.account = accountOf(u);
      r.node = name(1 + u % 12500);
      r.start = now - std::chrono::hours(24 + u % 100);
      r.end = now - std::chrono::hours(u % 24);
      r.gpus = 8;
      r.allocated_s = 8.0 * 3600 * (1 + u % 50);
      r.ended = "released";
      pool.loadUsage(std::move(r));
    }
    pool.finishUsageLoad();
  }
  pool.takeDirty();
  auto start = std::chrono::steady_clock::now();
  pool.tick(now, std::chrono::hours(1));  // the first pass: victims chosen
  state.counters["first_pass_ms"] =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  pool.takeDirty();
  std::vector<double> passes;  // each pass's time, ms
  for (auto _ : state) {
    auto t = std::chrono::steady_clock::now();
    pool.replan(now);  // tick() would skip it: nothing changed
    pool.takeDirty();
    passes.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  // The median and the 99th percentile (nearest rank) of the passes measured.
  std::sort(passes.begin(), passes.end());
  state.counters["median_ms"] = passes[passes.size() / 2];
  state.counters["p99_ms"] = passes[std::min(passes.size() - 1, (passes.size() * 99 + 99) / 100 - 1)];
  state.counters["preempted"] = static_cast<double>(pool.leasesPreempted());
  state.counters["granted"] = static_cast<double>(pool.leasesGranted() - 10000);
  if (fair) {
    auto t = std::chrono::steady_clock::now();
    const FairShare shares = pool.fairShare(now);
    state.counters["factors_ms"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    state.counters["rows"] = static_cast<double>(shares.rows().size());
  }
  state.SetLabel("100,000 GPUs, 10,000 leases, " + std::to_string(waiting) + " waiting" +
                 (fair ? ", fair share over 1,000 accounts and 10,000 users" : ""));
}
BENCHMARK(BM_SchedulingPass)
    ->ArgsProduct({{10, 100, 1000}, {0, 1}})
    ->Iterations(30)
    ->Unit(benchmark::kMillisecond);

// One owner's flood of requests that cannot start now (every GPU of a 128-GPU pool, one GPU held
// without an end): the cost of each enqueue (PoolState::submit, as poold runs it under its state
// lock) as the queue grows to Arg requests, and another owner's acquire of 1 GPU behind them.
// An enqueue behind every waiting request is planned against the last pass's plan (before, each
// ran a scheduling pass over the whole queue: the flood cost O(queue^2), 12.3 s for 2,000).
void BM_EnqueueFlood(benchmark::State& state) {
  const int flood = static_cast<int>(state.range(0));
  const TimePoint now = std::chrono::system_clock::now();
  double floodMs = 0, otherUs = 0;
  for (auto _ : state) {
    PoolState pool;
    test::addInventory(pool, "n[01-16]/gpu[0-7]@leaf1; n01 leased 0", now);
    pool.takeDirty();
    const LeaseRequest all = test::parseRequest("128 owner=mallory");
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < flood; ++i) pool.submit(all, now);
    floodMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    t = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(pool.submit(test::parseRequest("1 owner=alice"), now));
    otherUs += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
  }
  state.counters["flood_ms"] = floodMs / static_cast<double>(state.iterations());
  state.counters["other_acquire_us"] = otherUs / static_cast<double>(state.iterations());
  state.SetLabel(std::to_string(flood) + " queued requests of one owner, 128 GPUs");
}
BENCHMARK(BM_EnqueueFlood)->Arg(100)->Arg(1000)->Arg(10000)->Iterations(1)->Unit(benchmark::kMillisecond);

// acquire+release pairs per second: 16 client threads, each with its own connection.
void BM_PooldAcquireRelease(benchmark::State& state) {
  const bool full = state.range(0) == 1;
  const int clients = static_cast<int>(state.range(1));
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  std::string cluster = (test::sourceDir() / "clusters" / "hgx-h100.toml").string();
  test::PooldProcess poold(dir.path() / "state", tokens,
                           {"--cluster", cluster, "--sync", full ? "full" : "normal"});
  for (auto _ : state) {
    std::atomic<bool> stop{false};
    std::atomic<long> pairs{0};
    std::mutex errorMu;
    std::string firstError;
    std::vector<std::thread> threads;
    auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < clients; ++c)
      threads.emplace_back([&] {
        ClientOptions o;
        o.token = "tok-alice-0123456789";
        auto pool = openPool(poold.uri(), o);
        LeaseRequest r;
        r.gpus = 1;
        try {
          while (!stop) {
            Lease l = pool->acquire(r);
            pool->release(l.id);
            ++pairs;
          }
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(errorMu);
          if (firstError.empty()) firstError = e.what();
        }
      });
    std::this_thread::sleep_for(std::chrono::seconds(3));
    stop = true;
    for (auto& t : threads) t.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(secs);
    state.counters["pairs_per_s"] = static_cast<double>(pairs) / secs;
    if (!firstError.empty()) state.SkipWithError(firstError.c_str());
  }
  state.SetLabel(std::string(full ? "synchronous=FULL" : "synchronous=NORMAL") + ", " +
                 std::to_string(clients) + " clients");
}
BENCHMARK(BM_PooldAcquireRelease)
    ->Args({0, 16})
    ->Args({1, 16})
    ->Args({0, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);

// The etcd store against SQLite in the same run: acquire+release pairs per second through a poold
// with 16 client threads, first on its state directory, then as the leader of two replicas on a
// three-member etcd (127.0.0.1, this machine's disk); then the failover: the leader killed
// (SIGKILL) five times, the time until the other replica serves (the default --etcd-ttl, 5 s).
// Skipped without /usr/bin/etcd.
double pairsPerSecond(const std::string& uri, int clients, std::chrono::seconds length, std::string& error,
                      const std::string& ca = "") {
  std::atomic<bool> stop{false};
  std::atomic<long> pairs{0};
  std::mutex errorMu;
  std::vector<std::thread> threads;
  auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      ClientOptions o;
      o.token = "tok-alice-0123456789";
      o.ca_file = ca;
      auto pool = openPool(uri, o);
      LeaseRequest r;
      r.gpus = 1;
      try {
        while (!stop) {
          Lease l = pool->acquire(r);
          pool->release(l.id);
          ++pairs;
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(errorMu);
        if (error.empty()) error = e.what();
      }
    });
  std::this_thread::sleep_for(length);
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(pairs) /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether the replica on `port` serves as the leader (GET /healthz 200; a standby answers 503).
bool serves(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(0, 200'000);
  auto r = c.Get("/healthz");
  return r && r->status == 200;
}

void BM_PooldEtcdAgainstSqlite(benchmark::State& state) {
  std::string why;
  if (!test::EtcdCluster::available(why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int clients = 16;
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  std::string cluster = (test::sourceDir() / "clusters" / "hgx-h100.toml").string();
  test::EtcdCluster etcd(3);
  for (auto _ : state) {
    std::string error;
    double sqlite = 0, onEtcd = 0;
    {
      test::PooldProcess poold(dir.path() / "sqlite", tokens, {"--cluster", cluster});
      sqlite = pairsPerSecond(poold.uri(), clients, std::chrono::seconds(5), error);
    }
    std::vector<int> ports{test::freePort(), test::freePort()};
    std::vector<std::unique_ptr<test::PooldProcess>> replicas(2);
    auto start = [&](size_t i) {
      replicas[i] = std::make_unique<test::PooldProcess>(
          dir.path() / ("replica" + std::to_string(i)), tokens,
          std::vector<std::string>{"--store", etcd.uri(), "--advertise",
                                   "http://127.0.0.1:" + std::to_string(ports[i]), "--cluster", cluster},
          ports[i]);
    };
    start(0);
    start(1);
    const std::string uri =
        "http://127.0.0.1:" + std::to_string(ports[0]) + ",http://127.0.0.1:" + std::to_string(ports[1]);
    onEtcd = pairsPerSecond(uri, clients, std::chrono::seconds(5), error);
    std::vector<double> failover;
    for (int round = 0; round < 5; ++round) {
      size_t leader = serves(ports[0]) ? 0 : 1;
      auto killed = std::chrono::steady_clock::now();
      replicas[leader]->kill9();
      while (!serves(ports[1 - leader]) &&
             std::chrono::steady_clock::now() - killed < std::chrono::seconds(30))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      failover.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
      start(leader);
    }
    std::sort(failover.begin(), failover.end());
    state.SetIterationTime(1);
    state.counters["sqlite_pairs_per_s"] = sqlite;
    state.counters["etcd_pairs_per_s"] = onEtcd;
    state.counters["etcd_to_sqlite"] = onEtcd / sqlite;
    state.counters["failover_median_s"] = failover[2];
    state.counters["failover_worst_s"] = failover[4];
    if (!error.empty()) state.SkipWithError(error.c_str());
  }
  state.SetLabel("16 clients, 1-GPU acquire+release; failover over 5 SIGKILLs, --etcd-ttl 5");
}
BENCHMARK(BM_PooldEtcdAgainstSqlite)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

// HTTPS against plain HTTP in the same run: acquire+release pairs per second through two poolds
// on one state layout, 16 client threads with kept-alive connections, alternating rounds of 4 s
// (plain, TLS, plain, TLS) so that the machine's drift falls on both. The certificate is EC P-256.
void BM_PooldTlsAgainstPlain(benchmark::State& state) {
  const int clients = 16;
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  std::string cluster = (test::sourceDir() / "clusters" / "hgx-h100.toml").string();
  test::TestPki pki;
  const test::CertFiles server = pki.issue("server", "/CN=poold", "DNS:localhost,IP:127.0.0.1");
  test::PooldProcess plain(dir.path() / "plain", tokens, {"--cluster", cluster});
  test::PooldProcess tls(
      dir.path() / "tls", tokens,
      {"--cluster", cluster, "--tls-cert", server.cert.string(), "--tls-key", server.key.string()});
  for (auto _ : state) {
    std::string error;
    double plainRate = 0, tlsRate = 0;
    for (int round = 0; round < 2; ++round) {
      plainRate += pairsPerSecond(plain.uri(), clients, std::chrono::seconds(4), error) / 2;
      tlsRate +=
          pairsPerSecond(tls.uri(), clients, std::chrono::seconds(4), error, pki.caCert().string()) / 2;
    }
    state.SetIterationTime(1);
    state.counters["plain_pairs_per_s"] = plainRate;
    state.counters["tls_pairs_per_s"] = tlsRate;
    state.counters["tls_to_plain"] = tlsRate / plainRate;
    if (!error.empty()) state.SkipWithError(error.c_str());
  }
  state.SetLabel("16 clients, 1-GPU acquire+release, kept-alive connections, 2 x 4 s each");
}
BENCHMARK(BM_PooldTlsAgainstPlain)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

// What poold pays per request for a MUNGE user: one decode through a private munged (a round trip
// on its socket, the credential's MAC and decryption), then the user's name and groups (cached a
// minute). Needs root (munged, as the tests start it); skipped otherwise.
void BM_MungeDecode(benchmark::State& state) {
  std::string why;
  if (!test::MungeDaemon::available(why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  test::MungeDaemon munged;
  std::shared_ptr<Munge> munge = Munge::open(why);
  if (!munge) {
    state.SkipWithError(why.c_str());
    return;
  }
  MungeUsers users(munge, munged.socket(), "");
  std::vector<std::string> credentials;
  for (int i = 0; i < 3000; ++i)
    credentials.push_back(munge->encode(mungePayload("GET", "/v1/status"), munged.socket()));
  size_t next = 0;
  for (auto _ : state) {
    auto who = users.identify(credentials[next++ % credentials.size()], "GET", "/v1/status");
    if (!std::holds_alternative<Caller>(who))
      state.SkipWithError(std::get<MungeRefusal>(who).message.c_str());
  }
}
BENCHMARK(BM_MungeDecode)->Iterations(3000)->Unit(benchmark::kMicrosecond);

// A connection's later requests: its user as remembered from its first (no munged round trip).
void BM_MungeSameConnection(benchmark::State& state) {
  std::string why;
  std::shared_ptr<Munge> munge = Munge::open(why);
  if (!munge || !test::MungeDaemon::available(why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  test::MungeDaemon munged;
  MungeUsers users(munge, munged.socket(), "");
  for (uint64_t c = 1; c <= 1000; ++c)  // a thousand open connections
    users.identify(munge->encode(mungePayload("GET", "/v1/status"), munged.socket()), "GET", "/v1/status", c);
  uint64_t next = 0;
  for (auto _ : state) benchmark::DoNotOptimize(users.ofConnection(1 + next++ % 1000));
}
BENCHMARK(BM_MungeSameConnection)->Unit(benchmark::kMicrosecond);

// A pool's state file: `nodes` nodes of 8 GPUs, 7 of every 8 nodes in two leases of 4 GPUs, all of
// it in the file itself (its log copied in).
void writeStateFile(const std::filesystem::path& file, int nodes) {
  PoolState pool;
  TimePoint now = std::chrono::system_clock::now();
  char spec[64];
  snprintf(spec, sizeof spec, "n[%04d-%04d]/gpu[0-7]", 1, nodes);
  test::addInventory(pool, spec, now);
  Store store(file);
  Dirty all;
  for (const auto& [name, n] : pool.nodeMap()) all.nodes.insert(name);
  store.begin();
  store.write(pool, all);
  store.commit();
  LeaseRequest r = test::parseRequest("4");
  for (int n = 0; n < nodes; ++n)
    if (n % 8 != 7)
      for (int half = 0; half < 2; ++half) pool.submit(r, now);
  store.begin();
  store.write(pool, pool.takeDirty());
  store.commit();
  store.checkpoint(0);
}

std::string describeFile(const std::filesystem::path& file, int nodes) {
  return std::to_string(nodes * 8) + " GPUs, " + std::to_string(std::filesystem::file_size(file) >> 10) +
         " KiB";
}

// Opening the state file as poold (integrity_check, range(1) 1) and the embedded pools
// (quick_check, 0) do, then loading it.
void BM_StoreOpen(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const StartCheck check = state.range(1) == 1 ? StartCheck::kIntegrity : StartCheck::kQuick;
  test::TempDir dir;
  const auto file = dir.path() / "pool.sqlite";
  writeStateFile(file, nodes);
  size_t leases = 0;
  for (auto _ : state) {
    Store store(file, Durability::kNormal, check);
    PoolState loaded;
    store.load(loaded);
    leases = loaded.leaseMap().size();
  }
  state.SetLabel(std::string(check == StartCheck::kIntegrity ? "integrity_check" : "quick_check") + ", " +
                 describeFile(file, nodes) + ", " + std::to_string(leases) + " leases");
}
BENCHMARK(BM_StoreOpen)->ArgsProduct({{16, 1250}, {0, 1}})->Unit(benchmark::kMillisecond);

// The check alone, on a connection of its own (the file's pages in the page cache).
void BM_StoreCheck(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const bool integrity = state.range(1) == 1;
  test::TempDir dir;
  const auto file = dir.path() / "pool.sqlite";
  writeStateFile(file, nodes);
  for (auto _ : state) {
    sqlite3* db = nullptr;
    sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    if (sqlite3_exec(db, integrity ? "PRAGMA integrity_check" : "PRAGMA quick_check", nullptr, nullptr,
                     nullptr) != SQLITE_OK)
      state.SkipWithError(sqlite3_errmsg(db));
    sqlite3_close(db);
  }
  state.SetLabel(std::string(integrity ? "integrity_check" : "quick_check") + ", " +
                 describeFile(file, nodes));
}
BENCHMARK(BM_StoreCheck)->ArgsProduct({{16, 1250}, {0, 1}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace poolrun::pool

BENCHMARK_MAIN();
