// The etcd side of the pool: the v3 client over etcd's JSON gateway (URIs, base64, put/range/txn,
// leases, failover across members, the loss of a quorum), and EtcdStore (the pool's state in
// etcd: written and loaded again, fenced against a deposed leader, no GPU in two leases, a
// damaged key named). Against a three-member etcd on 127.0.0.1 that the tests start and stop.

#include <gtest/gtest.h>

#include <thread>

#include "inventory.hpp"
#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/etcd_leader.hpp"
#include "poolrun/pool/etcd_store.hpp"
#include "poolrun/pool/json.hpp"
#include "support/etcd_cluster.hpp"
#include "support/fixtures.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(EtcdUri, ParsesEndpointsAndRefusesBadOnes) {
  auto e = parseEtcdUri("etcd://10.0.0.1:2379,etcd2:2380/");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].host, "10.0.0.1");
  EXPECT_EQ(e[1].port, 2380);
  struct Bad {
    const char* uri;
    const char* says;
  };
  for (const Bad& b : {Bad{"http://a:2379", "does not start with etcd://"}, Bad{"etcd://", "no HOST:PORT"},
                       Bad{"etcd://a:2379,b", "'b' is not HOST:PORT"}, Bad{"etcd://a:99999", "port '99999'"},
                       Bad{"etcd://a:2379,,b:1", "'' is not HOST:PORT"}, Bad{"etcd://u@a:1", "'u@a'"}}) {
    try {
      parseEtcdUri(b.uri);
      ADD_FAILURE() << b.uri << " accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(err.what()).find(b.says), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find(b.uri), std::string::npos) << err.what();
    }
  }
}

TEST(EtcdUri, Base64RoundTripsEveryByteAndRefusesNonsense) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n : {0u, 1u, 2u, 3u, 4u, 255u, 256u})
    EXPECT_EQ(base64Decode(base64Encode(all.substr(0, n))), all.substr(0, n));
  EXPECT_EQ(base64Encode("/t/a"), "L3QvYQ==");
  EXPECT_THROW(base64Decode("!!!!"), Error);
  EXPECT_THROW(base64Decode("abc"), Error);
  EXPECT_THROW(base64Decode("a=bc"), Error);
}

// One cluster for the tests that do not stop members.
test::EtcdCluster& cluster() {
  static std::unique_ptr<test::EtcdCluster> c = std::make_unique<test::EtcdCluster>(3);
  return *c;
}

std::shared_ptr<EtcdClient> clientOf(const test::EtcdCluster& c, milliseconds timeout = milliseconds(5000)) {
  return std::make_shared<EtcdClient>(parseEtcdUri(c.uri()), timeout);
}

std::string uniquePrefix(const std::string& name) {
  return "/test-" + std::to_string(getpid()) + "-" + name;
}

TEST(EtcdClientTest, PutRangeTxnAndLeases) {
  POOLRUN_TEST_REQUIRE_ETCD();
  auto etcd = clientOf(cluster());
  const std::string p = uniquePrefix("client");
  const std::string binary("a\0b\xff", 4);
  int64_t rev = etcd->put(p + "/a", binary);
  EXPECT_GT(rev, 0);
  etcd->put(p + "/b", "2");
  auto kvs = etcd->range(p + "/", EtcdClient::prefixEnd(p + "/"));
  ASSERT_EQ(kvs.size(), 2u);
  EXPECT_EQ(kvs[0].value, binary);
  EXPECT_EQ(kvs[0].mod_revision, rev);
  // A compare-and-swap on the mod revision: the second, with the old revision, changes nothing.
  auto ok = etcd->txn({{p + "/a", EtcdCompare::Target::kMod, EtcdCompare::Result::kEqual, rev, ""}},
                      {{EtcdOp::Kind::kPut, p + "/a", "new", "", 0}});
  EXPECT_TRUE(ok.succeeded);
  auto late = etcd->txn({{p + "/a", EtcdCompare::Target::kMod, EtcdCompare::Result::kEqual, rev, ""}},
                        {{EtcdOp::Kind::kPut, p + "/a", "late", "", 0}},
                        {{EtcdOp::Kind::kRange, p + "/a", "", "", 0}});
  EXPECT_FALSE(late.succeeded);
  ASSERT_EQ(late.ranges.size(), 1u);
  EXPECT_EQ(late.ranges[0].at(0).value, "new");
  // A key bound to a lease goes with it.
  int64_t lease = etcd->grantLease(10);
  etcd->put(p + "/leased", "x", lease);
  EXPECT_GT(etcd->keepAlive(lease), 0);
  etcd->revokeLease(lease);
  EXPECT_TRUE(etcd->range(p + "/leased").empty());
  EXPECT_EQ(etcd->keepAlive(lease), 0) << "a revoked lease";
  EXPECT_EQ(etcd->deleteRange(p + "/", EtcdClient::prefixEnd(p + "/")), 2);
  auto status = etcd->status();
  ASSERT_EQ(status.size(), 3u);
  for (const auto& s : status) {
    EXPECT_TRUE(s.reachable) << s.endpoint << ": " << s.error;
    EXPECT_EQ(s.version, "3.4.23");
    EXPECT_NE(s.leader_id, 0u);
  }
}

// A cluster of its own: one member lost, the client goes on with the others; two lost, every call
// fails within the timeout naming the members and what to check; back, it works again.
TEST(EtcdClientTest, FailsOverAcrossMembersAndSaysWhenThereIsNoQuorum) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::EtcdCluster own(3);
  auto etcd = clientOf(own, milliseconds(3000));
  etcd->put("/k", "1");
  own.kill(0);
  // A read moves to the next member (a put on the lost member's connection would be "outcome
  // unknown": it may have been applied before the member died).
  EXPECT_EQ(etcd->range("/k").at(0).value, "1") << "one member lost: the others answer";
  EXPECT_GT(etcd->put("/k", "2"), 0);
  EXPECT_EQ(etcd->range("/k").at(0).value, "2");
  own.kill(1);
  auto start = std::chrono::steady_clock::now();
  try {
    etcd->range("/k");
    ADD_FAILURE() << "a read without quorum answered";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(own.uri().substr(7)), std::string::npos) << what;
    EXPECT_NE(what.find("majority of its members"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(8));
  own.start(0);
  own.start(1);
  ASSERT_TRUE(own.waitHealthy(seconds(30)));
  EXPECT_EQ(etcd->range("/k").at(0).value, "2") << "nothing acknowledged was lost";
}

std::string grant(PoolState& state, int gpus, const std::string& owner) {
  LeaseRequest r;
  r.gpus = gpus;
  r.owner = owner;
  r.ttl = seconds(60);
  SubmitResult s = state.submit(r, test::t0());
  return s.lease ? s.lease->id : "";
}

// A pool of two nodes with two leases (their ids) and a queued request.
std::pair<std::string, std::string> seed(PoolState& state) {
  test::addInventory(state, "n[01-02]/gpu[0-7]", test::t0());
  std::string a = grant(state, 4, "alice"), b = grant(state, 8, "bob");
  EXPECT_EQ(grant(state, 8, "carol"), "") << "queued: 4 GPUs free";
  EXPECT_EQ(state.queueMap().size(), 1u);
  return {a, b};
}

// What the state changed, and every node (addInventory registered them before its takeDirty()).
Dirty everything(PoolState& state) {
  Dirty d = state.takeDirty();
  for (const auto& [name, node] : state.nodeMap()) d.nodes.insert(name);
  return d;
}

std::string describe(const PoolState& s) {
  std::string out;
  for (const auto& [name, n] : s.nodeMap()) out += name + " " + toString(n.state) + ";";
  for (const auto& [id, l] : s.leaseMap()) out += id + " " + l.owner + " " + test::gpuList(l.gpus) + ";";
  for (const auto& [ticket, q] : s.queueMap())
    out += "q" + std::to_string(ticket) + " " + q.request.owner + ";";
  out += "granted " + std::to_string(s.leasesGranted()) + " next " + std::to_string(s.nextTicket());
  return out;
}

TEST(EtcdStoreTest, WritesThePoolAndLoadsItBack) {
  POOLRUN_TEST_REQUIRE_ETCD();
  auto etcd = clientOf(cluster());
  const std::string p = uniquePrefix("store");
  PoolState state;
  auto [a, b] = seed(state);
  // Nodes that join: a token used by n01, one unused, n01's credential revoked.
  const std::string ha(64, 'a'), hb(64, 'b'), h1(64, '1');
  state.addJoinToken(ha, "root", test::t0(), std::chrono::hours(1));
  state.addJoinToken(hb, "root", test::t0(), std::chrono::hours(2));
  state.joinNode(ha, "n01", h1, test::t0());
  // Reservations: one kept, one removed after the first write.
  Reservation kept, gone;
  kept.name = "train";
  kept.nodes = {"n02"};
  kept.start = test::t0() + std::chrono::hours(1);
  kept.end = test::t0() + std::chrono::hours(2);
  kept.users = {"bob"};
  gone = kept;
  gone.name = "fix";
  gone.nodes = {"n01"};
  gone.users.clear();
  state.reserve(kept, test::t0());
  state.reserve(gone, test::t0());
  EtcdStore store(etcd, p, {});
  PoolState empty;
  store.load(empty);
  EXPECT_EQ(store.generation(), 0u);
  store.begin();
  store.write(state, everything(state));
  store.commit();
  EXPECT_EQ(store.generation(), 1u);
  ASSERT_TRUE(state.release(a, "alice", false, test::t0()));
  state.revokeNode("n01", "root", test::t0());
  state.unreserve("fix");
  store.begin();
  store.write(state, state.takeDirty());
  store.commit();
  EtcdStore again(etcd, p, {});
  PoolState loaded;
  again.load(loaded);
  EXPECT_EQ(describe(loaded), describe(state));
  EXPECT_EQ(loaded.membership().tokens(), state.membership().tokens());
  EXPECT_EQ(loaded.membership().credentials(), state.membership().credentials());
  EXPECT_EQ(loaded.membership().credentialFor("n01")->revoked_by, "root");
  EXPECT_EQ(loaded.reservations(), state.reservations());
  EXPECT_EQ(loaded.reservations().size(), 1u);
  EXPECT_EQ(etcd->range(p + "/reservations/fix").size(), 0u) << "a removed reservation's key is deleted";
  EXPECT_EQ(again.generation(), 2u);
  EXPECT_EQ(etcd->range(p + "/leases/" + a).size(), 0u) << "a released lease's key is deleted";
  EXPECT_EQ(etcd->range(p + "/leases/" + b).size(), 1u);
}

// A leader stopped past its lease (SIGSTOP, a partition): a standby took over; its late commit
// changes nothing, and says why.
// A change larger than etcd takes in one transaction (here 8 operations; etcd's default is 128) is
// written in several, each fenced, and reads back whole.
TEST(EtcdStoreTest, AChangeLargerThanOneTransactionIsWrittenInSeveral) {
  POOLRUN_TEST_REQUIRE_ETCD();
  auto etcd = clientOf(cluster());
  const std::string p = uniquePrefix("batches");
  PoolState state;
  test::addInventory(state, "n[01-12]/gpu[0-7]", test::t0());
  for (int i = 0; i < 6; ++i) grant(state, 8, "user" + std::to_string(i));
  EtcdStore store(etcd, p, {}, 8);
  PoolState empty;
  store.load(empty);
  store.begin();
  store.write(state, everything(state));
  store.commit();  // 12 nodes, 1 topology, 6 leases, their 6 usage rows, the counters: 26
                   // operations, 4 transactions of 7 and the generation
  EXPECT_EQ(store.generation(), 4u);
  EtcdStore again(etcd, p, {});
  PoolState loaded;
  again.load(loaded);
  EXPECT_EQ(describe(loaded), describe(state));
}

TEST(EtcdStoreTest, ADeposedLeaderChangesNothing) {
  POOLRUN_TEST_REQUIRE_ETCD();
  auto etcd = clientOf(cluster());
  const std::string p = uniquePrefix("fence");
  auto nothing = [](const std::string&) {};
  EtcdLeadership first(etcd, p, "http://127.0.0.1:1001", seconds(2));
  std::optional<EtcdFence> fence = first.campaign(nothing, nothing, nothing);
  ASSERT_TRUE(fence);
  EXPECT_TRUE(first.leading());
  EtcdStore old(etcd, p, *fence);
  PoolState state;
  old.load(state);
  const std::string b = seed(state).second;
  old.begin();
  old.write(state, everything(state));
  old.commit();
  // The first leader's lease ends (as if its renewals stopped); a second replica takes over.
  first.stop();
  etcd->revokeLease(etcd->range(p + "/leader").at(0).lease);
  EtcdLeadership second(etcd, p, "http://127.0.0.1:1002", seconds(2));
  std::optional<EtcdFence> next = second.campaign(nothing, nothing, nothing);
  ASSERT_TRUE(next);
  EXPECT_EQ(second.leader(), "http://127.0.0.1:1002");
  const int64_t before = etcd->range(p + "/generation").at(0).mod_revision;
  ASSERT_TRUE(state.release(b, "bob", false, test::t0()));
  old.begin();
  old.write(state, state.takeDirty());
  try {
    old.commit();
    ADD_FAILURE() << "a deposed leader committed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no longer leads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nothing of this change was written"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(etcd->range(p + "/generation").at(0).mod_revision, before);
  EXPECT_EQ(etcd->range(p + "/leases/" + b).size(), 1u) << "the deposed leader's release did not land";
  // The new leader's store goes on from what was committed.
  EtcdStore current(etcd, p, *next);
  PoolState now;
  current.load(now);
  EXPECT_EQ(now.leaseMap().count(b), 1u);
  ASSERT_TRUE(now.release(b, "bob", false, test::t0()));
  current.begin();
  current.write(now, now.takeDirty());
  EXPECT_NO_THROW(current.commit());
}

TEST(EtcdStoreTest, AGpuInTwoLeasesIsRefused) {
  POOLRUN_TEST_REQUIRE_ETCD();
  auto etcd = clientOf(cluster());
  const std::string p = uniquePrefix("twice");
  EtcdStore store(etcd, p, {});
  PoolState one, other;
  store.load(one);
  test::addInventory(one, "n01/gpu[0-7]", test::t0());
  const std::string a = grant(one, 4, "alice");
  store.begin();
  store.write(one, one.takeDirty());
  store.commit();
  // Another pool's idea of the same GPUs (a bug, or two writers): refused before etcd sees it.
  test::addInventory(other, "n01/gpu[0-7]", test::t0());
  const std::string b = grant(other, 6, "bob");
  store.begin();
  try {
    store.write(other, other.takeDirty());
    ADD_FAILURE() << "n01:0 in leases " << a << " and " << b;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("would be in leases " + a + " and " + b), std::string::npos)
        << e.what();
  }
  store.rollback();
  EXPECT_EQ(etcd->range(p + "/leases/" + b).size(), 0u);
}

TEST(EtcdStoreTest, ADamagedKeyIsNamedAndNothingIsChanged) {
  POOLRUN_TEST_REQUIRE_ETCD();
  auto etcd = clientOf(cluster());
  const std::string p = uniquePrefix("damaged");
  std::string a;
  {
    EtcdStore store(etcd, p, {});
    PoolState state;
    store.load(state);
    a = seed(state).first;
    store.begin();
    store.write(state, everything(state));
    store.commit();
  }
  const std::string key = p + "/leases/" + a;
  for (const char* damage : {"{\"id\": \"A\"", "{\"schema\":\"poolrun.lease/1\",\"id\":\"Z\"}", "\xff\xfe"}) {
    etcd->put(key, damage);
    const int64_t revision = etcd->range(key).at(0).mod_revision;
    EtcdStore store(etcd, p, {});
    PoolState state;
    try {
      store.load(state);
      ADD_FAILURE() << "loaded a damaged lease: " << damage;
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      EXPECT_NE(what.find("key " + key + " is damaged"), std::string::npos) << what;
      EXPECT_NE(what.find("etcdctl del " + key), std::string::npos) << what;
    }
    EXPECT_EQ(etcd->range(key).at(0).mod_revision, revision) << "nothing was changed";
  }
}

}  // namespace
}  // namespace poolrun::pool
