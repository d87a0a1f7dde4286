// The PoolClient contract, written once and run against the embedded pool (sim:) and against a
// poold over loopback HTTP, with its state in SQLite (http) and in a three-member etcd cluster
// (http_etcd).

#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <set>
#include <thread>

#include "poold_process.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "support/etcd_cluster.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;

class Harness {
 public:
  virtual ~Harness() = default;
  // "alice", "bob" (users) or "root" (administrator).
  virtual std::unique_ptr<PoolControl> client(const std::string& who) = 0;
};

class SimHarness : public Harness {
 public:
  std::unique_ptr<PoolControl> client(const std::string& who) override {
    ClientOptions o;
    o.state_dir = dir_.path().string();
    o.owner = who;
    o.role = who == "root" ? "admin" : "user";
    return openPoolControl("sim:" + test::hgxCluster(), o);
  }

 private:
  test::TempDir dir_;
};

// A poold with its state in `store` ("sqlite": its state directory; "etcd": a prefix of the test's
// etcd cluster).
class HttpHarness : public Harness {
 public:
  explicit HttpHarness(const std::string& store, int port = test::freePort())
      : tokens_(dir_.writeSecret("tokens", test::kTokens)),
        poold_(dir_.path() / "state", tokens_, withCluster(test::storeOptions(store, port)), port) {
    EXPECT_TRUE(poold_.waitServing()) << store;
  }
  std::unique_ptr<PoolControl> client(const std::string& who) override {
    ClientOptions o;
    o.token = "tok-" + who + "-0123456789";
    return openPoolControl(poold_.uri(), o);
  }

 private:
  static std::vector<std::string> withCluster(std::vector<std::string> options) {
    options.insert(options.end(), {"--cluster", test::hgxCluster()});
    return options;
  }

  test::TempDir dir_;
  std::filesystem::path tokens_;
  test::PooldProcess poold_;
};

class Contract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sim") {
      harness_ = std::make_unique<SimHarness>();
    } else if (GetParam() == "http") {
      harness_ = std::make_unique<HttpHarness>("sqlite");
    } else {
      POOLRUN_TEST_REQUIRE_ETCD();
      harness_ = std::make_unique<HttpHarness>("etcd");
    }
  }
  std::unique_ptr<Harness> harness_;
};

LeaseRequest request(int gpus, std::optional<seconds> wait = std::nullopt) {
  LeaseRequest r;
  r.gpus = gpus;
  r.wait = wait;
  r.ttl = seconds(60);
  return r;
}

TEST_P(Contract, AcquireRenewRelease) {
  auto alice = harness_->client("alice");
  Lease l = alice->acquire(request(12));
  EXPECT_EQ(l.owner, "alice");
  ASSERT_EQ(l.gpus.size(), 12u);
  EXPECT_EQ(std::set<GpuRef>(l.gpus.begin(), l.gpus.end()).size(), 12u);
  EXPECT_EQ(l.gpus.front().node, "hgx01") << "fewest nodes, pool order";
  EXPECT_GT(l.expires, std::chrono::system_clock::now() + seconds(50));
  Lease r = alice->renew(l.id);
  EXPECT_EQ(r.id, l.id);
  EXPECT_GE(r.expires, l.expires);
  EXPECT_EQ(alice->leases().size(), 1u);
  EXPECT_EQ(alice->status().gpus_leased, 12);
  EXPECT_TRUE(alice->release(l.id));
  EXPECT_FALSE(alice->release(l.id)) << "idempotent: no error, and it says the lease was not held";
  EXPECT_FALSE(alice->release("L0123456789abcdef")) << "never granted";
  EXPECT_TRUE(alice->leases().empty());
  EXPECT_EQ(alice->status().gpus_free, 128);
  try {
    alice->renew(l.id);
    ADD_FAILURE() << "renewed a released lease";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kGone) << e.what();
  }
}

TEST_P(Contract, NodeAndDescribe) {
  auto alice = harness_->client("alice");
  topo::ClusterNode n = alice->node("hgx09");
  EXPECT_EQ(n.levels.switch_name, "leaf2");
  ASSERT_TRUE(n.topology);
  EXPECT_EQ(n.topology->gpus.size(), 8u);
  EXPECT_EQ(n.labels.at("rack"), "r2");
  EXPECT_THROW(alice->node("nosuch"), Error);
  EXPECT_FALSE(alice->describe().empty());
  EXPECT_EQ(alice->nodes().size(), 16u);
}

TEST_P(Contract, NeverFitsFailsAtOnce) {
  auto alice = harness_->client("alice");
  auto start = std::chrono::steady_clock::now();
  try {
    alice->acquire(request(129));
    ADD_FAILURE() << "129 GPUs from 128";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kNeverFits) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
}

TEST_P(Contract, GangWaitsWholeAndTimesOut) {
  auto alice = harness_->client("alice");
  auto bob = harness_->client("bob");
  Lease big = alice->acquire(request(120));
  int positions = 0;
  try {
    bob->acquire(request(16, seconds(1)), [&](const QueueProgress&) { ++positions; });
    ADD_FAILURE() << "16 GPUs granted with 8 free";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kTimeout) << e.what();
    EXPECT_EQ(e.position(), 1);
    EXPECT_NE(
        std::string(e.what()).find("a request for 16 GPUs did not fit within --wait 1s (it was number 1 in "
                                   "the queue of "),
        std::string::npos)
        << e.what();
    // The reason it waited is kept, by every pool.
    EXPECT_NE(std::string(e.what()).find(": needs 16 GPUs, 8 free); wait longer or ask for fewer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_GE(positions, 1);
  EXPECT_EQ(alice->status().gpus_leased, 120) << "a waiting request holds nothing";
  EXPECT_TRUE(alice->queue().empty()) << "a timed-out request leaves the queue";
  EXPECT_EQ(bob->acquire(request(8, seconds(0))).gpus.size(), 8u) << "what fits now is granted at once";
  alice->release(big.id);
}

TEST_P(Contract, QueuedRequestStartsOnRelease) {
  auto alice = harness_->client("alice");
  Lease all = alice->acquire(request(128));
  std::promise<QueueProgress> first;
  auto waiter = std::async(std::launch::async, [&] {
    auto bob = harness_->client("bob");
    bool told = false;
    return bob->acquire(request(16), [&](const QueueProgress& p) {
      if (!told) first.set_value(p);
      told = true;
    });
  });
  QueueProgress p = first.get_future().get();
  EXPECT_EQ(p.position, 1);
  EXPECT_GT(p.ticket, 0);
  EXPECT_EQ(p.reason, "needs 16 GPUs, 0 free") << "the reason comes with the first report";
  EXPECT_FALSE(p.planned_start) << "the lease it waits for has no end";
  ASSERT_EQ(alice->queue().size(), 1u);
  EXPECT_EQ(alice->queue()[0].owner, "bob");
  EXPECT_EQ(alice->queue()[0].ticket, p.ticket);
  EXPECT_EQ(alice->queue()[0].reason, "needs 16 GPUs, 0 free");
  alice->release(all.id);
  Lease got = waiter.get();
  EXPECT_EQ(got.owner, "bob");
  EXPECT_EQ(got.gpus.size(), 16u);
}

// Elastic leases through each client: granted as large as the free GPUs let them, grown when GPUs
// are freed (the release starts a scheduling pass), stored so (poold writes the lease's GPUs
// again), and a shrink without a notice pending is a renewal.
TEST_P(Contract, AnElasticLeaseGrowsWhenGpusAreFreed) {
  auto alice = harness_->client("alice");
  auto bob = harness_->client("bob");
  Lease most = bob->acquire(request(120));
  LeaseRequest r = request(4);
  r.max_gpus = 16;
  r.resize_interval = seconds(0);
  Lease e = alice->acquire(r);
  EXPECT_EQ(e.gpus.size(), 8u) << "all that is free, at least 4";
  ASSERT_TRUE(e.elastic);
  EXPECT_EQ(e.elastic->gpus, 4);
  EXPECT_EQ(e.elastic->max_gpus, 16);
  EXPECT_EQ(e.resizes, 0);
  ASSERT_TRUE(bob->release(most.id));
  Lease grown = alice->renew(e.id);
  EXPECT_EQ(grown.gpus.size(), 16u);
  EXPECT_EQ(grown.resizes, 1);
  EXPECT_EQ(std::set<GpuRef>(grown.gpus.begin(), grown.gpus.end()).size(), 16u);
  EXPECT_EQ(alice->status().gpus_leased, 16);
  Lease same = alice->shrink(e.id);
  EXPECT_EQ(same.gpus.size(), 16u) << "no shrink notice: nothing to give back";
  try {
    bob->shrink(e.id);
    ADD_FAILURE() << "bob shrank alice's lease";
  } catch (const PoolError& err) {
    EXPECT_EQ(err.failure(), PoolFailure::kForbidden) << err.what();
  }
  LeaseRequest bad = request(8);
  bad.max_gpus = 4;
  EXPECT_THROW(alice->acquire(bad), Error) << "MAX below MIN";
  EXPECT_TRUE(alice->release(e.id));
  EXPECT_EQ(alice->status().gpus_free, 128);
}

TEST_P(Contract, OnlyTheOwnerOrAnAdministratorReleases) {
  auto alice = harness_->client("alice");
  auto bob = harness_->client("bob");
  auto root = harness_->client("root");
  Lease l = alice->acquire(request(4));
  for (auto op : {0, 1}) {
    try {
      op == 0 ? static_cast<void>(bob->release(l.id)) : static_cast<void>(bob->renew(l.id));
      ADD_FAILURE() << "bob changed alice's lease";
    } catch (const PoolError& e) {
      EXPECT_EQ(e.failure(), PoolFailure::kForbidden) << e.what();
      EXPECT_NE(std::string(e.what()).find("bob"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(alice->leases().size(), 1u);
  EXPECT_THROW(bob->drain("hgx01"), PoolError);
  root->release(l.id);
  EXPECT_TRUE(alice->leases().empty());
}

TEST_P(Contract, UnrenewedLeaseExpires) {
  auto alice = harness_->client("alice");
  LeaseRequest r = request(8);
  r.ttl = seconds(1);
  Lease l = alice->acquire(r);
  auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (!alice->leases().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(alice->leases().empty());
  EXPECT_EQ(alice->status().gpus_free, 128);
  EXPECT_THROW(alice->renew(l.id), PoolError);
}

TEST_P(Contract, DrainAndFailKeepNewLeasesAway) {
  auto root = harness_->client("root");
  auto alice = harness_->client("alice");
  Lease running = alice->acquire(request(8));
  ASSERT_EQ(running.gpus.front().node, "hgx01");
  root->drain("hgx01");
  root->drain("hgx02");
  root->failGpu("hgx03", 0);
  EXPECT_EQ(alice->leases().size(), 1u) << "existing leases run on";
  Lease l = alice->acquire(request(8));
  for (const GpuRef& g : l.gpus)
    EXPECT_EQ(g.node, "hgx04") << "not drained hgx01-02, not hgx03 with a failed GPU";
  PoolStatus s = alice->status();
  EXPECT_EQ(s.nodes_draining, 2);
  EXPECT_EQ(s.gpus_failed, 1);
  root->resume("hgx02");
  Lease m = alice->acquire(request(8));
  EXPECT_EQ(m.gpus.front().node, "hgx02");
  bool sawFailed = false;
  for (const NodeInfo& n : alice->nodes())
    for (const GpuInfo& g : n.gpus)
      sawFailed |= n.name == "hgx03" && g.index == 0 && g.state == GpuState::kFailed;
  EXPECT_TRUE(sawFailed);
}

TEST_P(Contract, ProgressTellsThePlannedStart) {
  auto alice = harness_->client("alice");
  LeaseRequest all = request(128);
  all.max_duration = seconds(600);
  Lease l = alice->acquire(all);
  auto bob = harness_->client("bob");
  std::optional<QueueProgress> told;
  try {
    bob->acquire(request(16, seconds(1)), [&](const QueueProgress& p) { told = p; });
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kTimeout) << e.what();
  }
  ASSERT_TRUE(told);
  ASSERT_TRUE(told->planned_start);
  using std::chrono::floor;
  using std::chrono::milliseconds;
  EXPECT_EQ(floor<milliseconds>(*told->planned_start), floor<milliseconds>(*l.max_end))
      << "when alice's lease ends at the latest (pools keep times in milliseconds)";
  alice->release(l.id);
}

// A signal while queued (here raised by the test, as a QueueInterruption is in scope) withdraws
// the request; a lease granted just before it is released. Nobody holds the GPUs afterwards.
TEST_P(Contract, InterruptedWhileQueuedWithdrawsAndReleasesARacingGrant) {
  auto alice = harness_->client("alice");
  auto bob = harness_->client("bob");
  Lease all = alice->acquire(request(128));
  QueueInterruption interruption;
  try {
    bob->acquire(request(16), [&](const QueueProgress&) {
      // The pool grants bob's request as alice's lease goes; the signal comes before bob has
      // collected the grant.
      alice->release(all.id);
      raise(SIGINT);
    });
    ADD_FAILURE() << "acquire returned after the signal";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kInterrupted) << e.what();
    EXPECT_EQ(e.signal(), SIGINT);
    EXPECT_NE(std::string(e.what()).find("withdrew the queued request (ticket "), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(alice->queue().empty());
  EXPECT_TRUE(alice->leases().empty()) << "no lease granted to the interrupted client";
  EXPECT_EQ(alice->status().gpus_free, 128);
}

TEST_P(Contract, InterruptedAsTheLeaseIsGrantedReleasesIt) {
  auto bob = harness_->client("bob");
  QueueInterruption interruption;
  raise(SIGTERM);  // before the request is even sent: it is granted at once, and given back
  try {
    bob->acquire(request(16));
    ADD_FAILURE() << "acquire returned after the signal";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kInterrupted) << e.what();
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_NE(std::string(e.what()).find("released lease L"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(bob->leases().empty());
  EXPECT_EQ(bob->status().gpus_free, 128);
}

// A shell that starts a command in the background (`poolrun ... &` in a script) starts it with
// SIGINT ignored: the queued request is withdrawn on SIGINT all the same. SIGHUP ignored as nohup
// leaves it stays ignored: the request waits on, here until its --wait runs out.
TEST_P(Contract, InterruptedWhileQueuedWhateverTheInheritedDisposition) {
  auto alice = harness_->client("alice");
  auto bob = harness_->client("bob");
  Lease all = alice->acquire(request(128));
  struct sigaction ignore {
  }, oldInt{}, oldHup{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &oldInt);
  sigaction(SIGHUP, &ignore, &oldHup);
  LeaseRequest r = request(16);
  r.wait = std::chrono::seconds(3);  // without the handler, the request would wait this long, not hang
  std::string what;
  {
    QueueInterruption interruption;
    try {
      bob->acquire(r, [&](const QueueProgress&) { raise(SIGINT); });
      ADD_FAILURE() << "acquire returned after the signal";
    } catch (const PoolError& e) {
      EXPECT_EQ(e.failure(), PoolFailure::kInterrupted) << e.what();
      EXPECT_EQ(e.signal(), SIGINT);
      what = e.what();
    }
  }
  EXPECT_NE(what.find("withdrew the queued request (ticket "), std::string::npos) << what;
  EXPECT_TRUE(alice->queue().empty());
  {
    QueueInterruption interruption;
    bool raised = false;
    r.wait = std::chrono::seconds(1);
    try {
      bob->acquire(r, [&](const QueueProgress&) {
        if (!raised) raise(SIGHUP);
        raised = true;
      });
      ADD_FAILURE() << "acquire returned with alice holding every GPU";
    } catch (const PoolError& e) {
      EXPECT_NE(e.failure(), PoolFailure::kInterrupted) << "SIGHUP under nohup withdrew it: " << e.what();
    } catch (const Error&) {  // the wait ran out
    }
    EXPECT_TRUE(raised);
  }
  struct sigaction now {};
  sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_IGN) << "the inherited disposition comes back";
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGHUP, &oldHup, nullptr);
  alice->release(all.id);
}

INSTANTIATE_TEST_SUITE_P(Pool, Contract, ::testing::Values("sim", "http", "http_etcd"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace poolrun::pool
