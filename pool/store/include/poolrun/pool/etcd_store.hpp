#pragma once

// The pool's state in etcd (v3 API, through its JSON gateway): the StateStore of poold replicas, of
// which one leads and writes. Under the prefix P (default /poolrun):
//   P/nodes/NAME          a node:
//   {"name","order","nvlink_domain","block","switch","rail_group","spine","fabric","labels","state",
//                         "failed","topology":HASH,"health"}
//   P/topologies/HASH     a node topology (poolrun.topology/1), shared by the nodes that have it
//   P/leases/ID           a lease (toJson(Lease): its GPUs included)
//   P/queue/TICKET        a queue entry (20 digits, so that keys sort by ticket)
//   P/counters            {"leases_granted","next_ticket"}
//   P/generation          {"generation": N}: raised by every commit
//   P/leader              the leader's {"advertise","host","pid"}, bound to its etcd lease
//   P/replicas/URL, P/elections   each live replica, the count of elections (src/etcd_leader.cpp)
//
// Each commit is one etcd transaction whose compare holds only while this replica leads (the
// leader key's create revision is the one it created: a deposed leader's late writes change
// nothing) and while nobody else wrote (P/generation's mod revision is the one this store last
// saw). A GPU in two leases is refused by write() (the store keeps which lease holds each GPU), and
// by load() (PoolState::loadLease).
//
// etcd refuses a transaction of more than its --max-txn-ops operations (128 by default): a commit
// takes one per changed node, lease, queue entry and new topology, and one more. A change larger
// than `max_txn_ops` (a cluster file of 200 new nodes) is written in several transactions in a row,
// each fenced: a leader that dies between them leaves part of a change no client was told about
// (docs/ha.md). etcd with a larger --max-txn-ops, and poold told so, keeps every change whole.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "poolrun/pool/state_store.hpp"

namespace poolrun::pool {

class EtcdClient;
struct EtcdKeyValue;
struct EtcdOp;

// What makes this replica's writes valid: the leader key as this replica created it. An empty key
// fences nothing (a single writer, in tests).
struct EtcdFence {
  std::string key;
  int64_t create_revision = 0;
};

class EtcdStore final : public StateStore {
 public:
  // `prefix` without a trailing '/' ("/poolrun"). Nothing is read before load().
  EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix, EtcdFence fence,
            size_t max_txn_ops = kEtcdDefaultMaxTxnOps);
  static constexpr size_t kEtcdDefaultMaxTxnOps = 128;  // etcd's own default
  ~EtcdStore() override;

  // Reads every key under the prefix at one revision. A damaged value throws poolrun::Error
  // (kIo) naming the key and what to do; nothing is changed.
  void load(PoolState& state) override;
  void begin() override;
  void write(const PoolState& state, const Dirty& dirty) override;
  // One transaction; kIo when it failed, saying why: leadership lost (and who leads now), another
  // writer, etcd unreachable or without quorum ("outcome unknown" where the reply was lost).
  void commit() override;
  void rollback() noexcept override;
  uint64_t generation() const override { return generation_; }
  std::string where() const override;

  int64_t revision() const { return revision_; }  // etcd's revision after the last load or commit

 private:
  std::string topologyHash(const std::shared_ptr<const topo::NodeTopology>& topology);
  // load()'s refusal of a key whose document is damaged, saying what to do.
  Error damaged(const std::string& key, const std::string& why) const;
  // A node's key as load() reads it, its topology found among `topologies` (hash: document) and
  // parsed once into `parsed`; throws std::exception for a document that is not a node's.
  PoolNode nodeFromKey(const EtcdKeyValue& kv, const std::map<std::string, std::string>& topologies,
                       std::map<std::string, std::shared_ptr<const topo::NodeTopology>>& parsed);
  std::string nodeKey(const std::string& name) const { return prefix_ + "/nodes/" + name; }
  std::string leaseKey(const std::string& id) const { return prefix_ + "/leases/" + id; }
  std::string queueKey(int64_t ticket) const;
  void loadMembership(PoolState& state, const std::vector<const EtcdKeyValue*>& join_tokens,
                      const std::vector<const EtcdKeyValue*>& credentials);
  std::string joinTokenKey(const std::string& hash) const;
  std::string credentialKey(const std::string& node) const;
  std::string requestKey(const std::string& id) const;  // an acquire's "OWNER/REQUEST_ID"
  std::string jobKey(const std::string& id) const;
  void loadJobs(PoolState& state, const std::vector<const EtcdKeyValue*>& jobs);
  std::string reservationKey(const std::string& name) const;
  void loadReservations(PoolState& state, const std::vector<const EtcdKeyValue*>& reservations);
  std::string usageKey(uint64_t id) const;
  void loadUsage(PoolState& state, const std::vector<const EtcdKeyValue*>& rows);
  void loadCounters(PoolState& state, const EtcdKeyValue* counters);  // P/counters, where present
  void commitBatch(std::vector<EtcdOp> success);                      // one transaction, fenced

  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
  EtcdFence fence_;
  size_t max_txn_ops_;
  uint64_t generation_ = 0;
  int64_t generationRevision_ = 0;  // P/generation's mod revision as last seen (0: absent)
  int64_t revision_ = 0;
  // The change being built: key -> value, or nullopt to delete. One operation per key, as etcd
  // wants (a transaction may not name a key twice).
  std::map<std::string, std::optional<std::string>> ops_;
  std::set<std::string> stored_topologies_;            // hashes under P/topologies/
  std::map<std::string, std::string> new_topologies_;  // of this change: hash -> doc
  std::map<GpuRef, std::string> holders_;              // which lease holds each GPU, as committed and written
  std::map<std::string, std::vector<GpuRef>> lease_gpus_;
  bool stale_ = false;  // a change was dropped: holders_ no longer match etcd until load()
  std::map<const topo::NodeTopology*, std::pair<std::shared_ptr<const topo::NodeTopology>, std::string>>
      hashes_;
};

}  // namespace poolrun::pool
