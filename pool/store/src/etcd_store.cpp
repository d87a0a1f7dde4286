#include "poolrun/pool/etcd_store.hpp"

#include <cstdio>

#include "poolrun/common/hash.hpp"
#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/usage_json.hpp"
#include "poolrun/topo/writers.hpp"
#include "stored_docs.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

json nodeDoc(const PoolNode& n, const std::string& topology) {
  json doc = {
      {"name", n.name},     {"order", n.order},     {"labels", n.labels},       {"state", toString(n.state)},
      {"failed", n.failed}, {"topology", topology}, {"health", healthToJson(n)}};
  for (const topo::LevelField& level : topo::kLevelFields) doc[level.key] = n.levels.*level.member;
  if (n.fabric) doc["fabric"] = topo::toString(*n.fabric);
  return doc;
}

}  // namespace

EtcdStore::EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix, EtcdFence fence,
                     size_t max_txn_ops)
    : client_(std::move(client)),
      prefix_(std::move(prefix)),
      fence_(std::move(fence)),
      max_txn_ops_(max_txn_ops) {
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
}

EtcdStore::~EtcdStore() = default;

std::string EtcdStore::where() const {
  return "etcd://" + client_->endpointsText() + " (prefix " + prefix_ + ")";
}

std::string EtcdStore::joinTokenKey(const std::string& hash) const {
  return prefix_ + "/join_tokens/" + hash;
}

std::string EtcdStore::credentialKey(const std::string& node) const {
  return prefix_ + "/credentials/" + node;
}

void EtcdStore::loadJobs(PoolState& state, const std::vector<const EtcdKeyValue*>& jobs) {
  for (const EtcdKeyValue* kv : jobs) {
    try {
      JobRecord job = jobFromJson(json::parse(kv->value));
      if (kv->key != jobKey(job.id))
        throw std::runtime_error("it holds job '" + common::printable(job.id) + "'");
      state.loadJob(std::move(job));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
}

void EtcdStore::loadReservations(PoolState& state, const std::vector<const EtcdKeyValue*>& reservations) {
  for (const EtcdKeyValue* kv : reservations) {
    try {
      Reservation r = reservationFromJson(json::parse(kv->value));
      if (kv->key != reservationKey(r.name))
        throw std::runtime_error("it holds reservation '" + common::printable(r.name) + "'");
      state.loadReservation(std::move(r));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
}

std::string EtcdStore::reservationKey(const std::string& name) const {
  return prefix_ + "/reservations/" + name;
}

std::string EtcdStore::jobKey(const std::string& id) const {
  return prefix_ + "/jobs/" + id;
}

std::string EtcdStore::usageKey(uint64_t id) const {
  return prefix_ + "/usage/" + std::to_string(id);
}

void EtcdStore::loadUsage(PoolState& state, const std::vector<const EtcdKeyValue*>& rows) {
  for (const EtcdKeyValue* kv : rows) {
    try {
      UsageRecord r = usageRecordFromJson(json::parse(kv->value));
      if (kv->key != usageKey(r.id)) throw std::runtime_error("it holds usage row " + std::to_string(r.id));
      state.loadUsage(std::move(r));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
  state.finishUsageLoad();
}

std::string EtcdStore::requestKey(const std::string& id) const {
  return prefix_ + "/requests/" + id;
}

std::string EtcdStore::queueKey(int64_t ticket) const {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020lld", static_cast<long long>(ticket));
  return prefix_ + "/queue/" + digits;
}

std::string EtcdStore::topologyHash(const std::shared_ptr<const topo::NodeTopology>& topology) {
  auto it = hashes_.find(topology.get());
  if (it != hashes_.end()) return it->second.second;
  std::string doc = topo::toJson(*topology).dump();
  std::string hash = common::fnv1aHex(doc);
  if (!stored_topologies_.count(hash)) new_topologies_[hash] = doc;
  hashes_[topology.get()] = {topology, hash};
  return hash;
}

Error EtcdStore::damaged(const std::string& key, const std::string& why) const {
  return Error(ErrorCode::kIo, where() + ": key " + key + " is damaged (" + why +
                                   "); nothing was changed. Put it back from a backup (etcdctl put), or " +
                                   "remove it (etcdctl del " + key +
                                   ": a node registers again, a lease removed is lost to its job), then " +
                                   "start poold again");
}

PoolNode EtcdStore::nodeFromKey(const EtcdKeyValue& kv, const std::map<std::string, std::string>& topologies,
                                std::map<std::string, std::shared_ptr<const topo::NodeTopology>>& parsed) {
  const std::string dir = prefix_ + "/";
  json doc = json::parse(kv.value);
  PoolNode n;
  n.name = doc.at("name").get<std::string>();
  if (kv.key != nodeKey(n.name)) throw std::runtime_error("it names node '" + n.name + "'");
  n.order = doc.at("order").get<int64_t>();
  for (const topo::LevelField& level : topo::kLevelFields)
    n.levels.*level.member =
        doc.value(level.key, std::string());  // written before levels: switch, rail_group
  if (doc.contains("fabric")) n.fabric = topo::fabricFromString(doc["fabric"].get<std::string>());
  n.labels = doc.at("labels").get<std::map<std::string, std::string>>();
  n.state = nodeStateFromString(doc.at("state").get<std::string>());
  for (size_t i : doc.at("failed")) n.failed.insert(i);
  healthFromJson(doc.value("health", json::object()), n);
  std::string hash = doc.at("topology").get<std::string>();
  auto t = parsed.find(hash);
  if (t == parsed.end()) {
    auto found = topologies.find(hash);
    if (found == topologies.end())
      throw std::runtime_error("its topology " + hash + " is missing (no key " + dir + "topologies/" + hash +
                               ")");
    auto topology =
        std::make_shared<const topo::NodeTopology>(topo::fromJson(json::parse(found->second), n.name));
    t = parsed.emplace(hash, topology).first;
    hashes_[topology.get()] = {topology, hash};
  }
  n.topology = t->second;
  return n;
}

void EtcdStore::loadMembership(PoolState& state, const std::vector<const EtcdKeyValue*>& join_tokens,
                               const std::vector<const EtcdKeyValue*>& credentials) {
  for (const EtcdKeyValue* kv : join_tokens) {
    try {
      JoinToken t = joinTokenFromDoc(json::parse(kv->value));
      if (kv->key != joinTokenKey(t.hash)) throw std::runtime_error("it holds another token's hash");
      state.loadJoinToken(std::move(t));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
  for (const EtcdKeyValue* kv : credentials) {
    try {
      NodeCredential c = credentialFromDoc(json::parse(kv->value));
      if (kv->key != credentialKey(c.node)) throw std::runtime_error("it holds another node's credential");
      state.loadCredential(std::move(c));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
}

void EtcdStore::loadCounters(PoolState& state, const EtcdKeyValue* counters) {
  uint64_t granted = 0;
  int64_t next = 1;
  if (counters) {
    try {
      json doc = json::parse(counters->value);
      granted = doc.at("leases_granted").get<uint64_t>();
      next = doc.at("next_ticket").get<int64_t>();
      if (doc.contains("next_job")) state.loadNextJob(doc.at("next_job").get<int64_t>());
      if (doc.contains("next_usage")) state.loadNextUsage(doc.at("next_usage").get<uint64_t>());
    } catch (const std::exception& e) {
      throw damaged(counters->key, e.what());
    }
  }
  state.loadCounters(granted, next);
}

void EtcdStore::load(PoolState& state) {
  const std::string dir = prefix_ + "/";
  int64_t revision = 0;
  std::vector<EtcdKeyValue> kvs = client_->range(dir, EtcdClient::prefixEnd(dir), &revision);
  std::map<std::string, std::string> topologies;  // hash -> doc
  std::vector<const EtcdKeyValue*> nodes, leases, queue, requests, join_tokens, credentials, jobs, usage,
      reservations;
  const EtcdKeyValue* counters = nullptr;
  const EtcdKeyValue* generation = nullptr;
  for (const EtcdKeyValue& kv : kvs) {
    std::string rel = kv.key.substr(dir.size());
    if (rel.starts_with("topologies/"))
      topologies[rel.substr(11)] = kv.value;
    else if (rel.starts_with("nodes/"))
      nodes.push_back(&kv);
    else if (rel.starts_with("leases/"))
      leases.push_back(&kv);
    else if (rel.starts_with("queue/"))
      queue.push_back(&kv);
    else if (rel.starts_with("requests/"))
      requests.push_back(&kv);
    else if (rel.starts_with("join_tokens/"))
      join_tokens.push_back(&kv);
    else if (rel.starts_with("credentials/"))
      credentials.push_back(&kv);
    else if (rel.starts_with("jobs/"))
      jobs.push_back(&kv);
    else if (rel.starts_with("reservations/"))
      reservations.push_back(&kv);
    else if (rel.starts_with("usage/"))
      usage.push_back(&kv);
    else if (rel == "counters")
      counters = &kv;
    else if (rel == "generation")
      generation = &kv;
  }
  state.clear();
  holders_.clear();
  lease_gpus_.clear();
  std::map<std::string, std::shared_ptr<const topo::NodeTopology>> parsed;
  for (const EtcdKeyValue* kv : nodes) {
    try {
      state.loadNode(nodeFromKey(*kv, topologies, parsed));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
  for (const EtcdKeyValue* kv : leases) {
    try {
      Lease l = leaseFromJson(json::parse(kv->value));
      if (kv->key != leaseKey(l.id)) throw std::runtime_error("it holds lease '" + l.id + "'");
      for (const GpuRef& g : l.gpus)
        if (!g.share) holders_[g] = l.id;
      lease_gpus_[l.id] = l.gpus;
      state.loadLease(std::move(l));  // a GPU already held: kInternal
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
  for (const EtcdKeyValue* kv : queue) {
    try {
      state.loadQueueEntry(queueFromDoc(json::parse(kv->value)));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
  for (const EtcdKeyValue* kv : requests) {
    try {
      state.loadRequest(kv->key.substr(requestKey("").size()), requestFromDoc(json::parse(kv->value)));
    } catch (const std::exception& e) {
      throw damaged(kv->key, e.what());
    }
  }
  loadMembership(state, join_tokens, credentials);
  loadJobs(state, jobs);
  loadReservations(state, reservations);
  loadUsage(state, usage);
  loadCounters(state, counters);
  generation_ = 0;
  generationRevision_ = 0;
  if (generation) {
    try {
      generation_ = json::parse(generation->value).at("generation").get<uint64_t>();
    } catch (const std::exception& e) {
      throw damaged(generation->key, e.what());
    }
    generationRevision_ = generation->mod_revision;
  }
  for (const auto& [hash, doc] : topologies) stored_topologies_.insert(hash);
  revision_ = revision;
  stale_ = false;
  state.takeDirty();
}

void EtcdStore::begin() {
  ops_.clear();
  new_topologies_.clear();
}

void EtcdStore::write(const PoolState& state, const Dirty& dirty) {
  if (stale_)
    throw Error(ErrorCode::kInternal,
                where() + ": a change was dropped since the last load(); load again first");
  for (const std::string& name : dirty.nodes) {
    auto it = state.nodeMap().find(name);
    if (it == state.nodeMap().end())
      ops_[nodeKey(name)] = std::nullopt;
    else
      ops_[nodeKey(name)] = nodeDoc(it->second, topologyHash(it->second.topology)).dump();
  }
  // GPUs of leases that ended or changed size are free before the new ones are taken.
  for (const std::string& id : dirty.leases) {
    const bool gone = !state.leaseMap().count(id);
    if (gone) ops_[leaseKey(id)] = std::nullopt;
    if (gone || dirty.resized.count(id)) {
      for (const GpuRef& g : lease_gpus_[id])
        if (auto h = holders_.find(g); h != holders_.end() && h->second == id) holders_.erase(h);
      lease_gpus_.erase(id);
    }
  }
  for (const std::string& id : dirty.leases) {
    auto it = state.leaseMap().find(id);
    if (it == state.leaseMap().end()) continue;
    ops_[leaseKey(id)] = toJson(it->second).dump();
    if (!dirty.new_leases.count(id) && !dirty.resized.count(id)) continue;
    for (const GpuRef& g : it->second.gpus) {
      if (g.share) continue;  // many leases share a GPU through MPS
      auto [h, inserted] = holders_.emplace(g, id);
      if (!inserted && h->second != id) {
        stale_ = true;
        throw Error(ErrorCode::kInternal, where() + ": GPU " + g.node + ":" + std::to_string(g.index) +
                                              " would be in leases " + h->second + " and " + id +
                                              "; nothing was written");
      }
    }
    lease_gpus_[id] = it->second.gpus;
  }
  for (int64_t ticket : dirty.queue) {
    auto it = state.queueMap().find(ticket);
    if (it == state.queueMap().end())
      ops_[queueKey(ticket)] = std::nullopt;
    else
      ops_[queueKey(ticket)] = queueDoc(it->second).dump();
  }
  for (const std::string& id : dirty.requests) {
    const RememberedRequest* r = state.rememberedRequest(id);
    ops_[requestKey(id)] = r ? std::optional<std::string>(requestDoc(*r).dump()) : std::nullopt;
  }
  for (const std::string& hash : dirty.join_tokens) {
    auto it = state.membership().tokens().find(hash);
    ops_[joinTokenKey(hash)] = it == state.membership().tokens().end()
                                   ? std::nullopt
                                   : std::optional<std::string>(joinTokenDoc(it->second).dump());
  }
  for (const std::string& node : dirty.credentials) {
    const NodeCredential* c = state.membership().credentialFor(node);
    ops_[credentialKey(node)] = c ? std::optional<std::string>(credentialDoc(*c).dump()) : std::nullopt;
  }
  for (const std::string& id : dirty.jobs) {
    const JobRecord* job = state.jobs().find(id);
    ops_[jobKey(id)] =
        job ? std::optional<std::string>(toJson(*job).dump(-1, ' ', false, json::error_handler_t::replace))
            : std::nullopt;
  }
  for (const std::string& name : dirty.reservations) {
    auto it = state.reservations().find(name);
    ops_[reservationKey(name)] =
        it == state.reservations().end()
            ? std::nullopt
            : std::optional<std::string>(
                  toJson(it->second).dump(-1, ' ', false, json::error_handler_t::replace));
  }
  for (uint64_t id : dirty.usage) {
    const std::optional<UsageRecord> r = state.usage().find(id);
    ops_[usageKey(id)] =
        r ? std::optional<std::string>(toJson(*r).dump(-1, ' ', false, json::error_handler_t::replace))
          : std::nullopt;
  }
  if (dirty.counters)
    ops_[prefix_ + "/counters"] = json{
        {"leases_granted", state.leasesGranted()},
        {"next_ticket", state.nextTicket()},
        {"next_job", state.jobs().nextNumber()},
        {"next_usage",
         state.usage().nextId()}}.dump();
}

void EtcdStore::commit() {
  if (ops_.empty() && new_topologies_.empty()) return;
  std::vector<EtcdOp> ops;
  for (const auto& [hash, doc] : new_topologies_)
    ops.push_back({EtcdOp::Kind::kPut, prefix_ + "/topologies/" + hash, doc, "", 0});
  for (const auto& [key, value] : ops_) {
    if (value)
      ops.push_back({EtcdOp::Kind::kPut, key, *value, "", 0});
    else
      ops.push_back({EtcdOp::Kind::kDelete, key, "", "", 0});
  }
  // One transaction, or where the change is larger than etcd takes in one, several in a row, each
  // fenced and raising the generation (the topologies first: the nodes name them).
  const size_t per = std::max<size_t>(max_txn_ops_, 2) - 1;
  for (size_t start = 0; start < ops.size(); start += per)
    commitBatch(
        std::vector<EtcdOp>(ops.begin() + static_cast<std::ptrdiff_t>(start),
                            ops.begin() + static_cast<std::ptrdiff_t>(std::min(ops.size(), start + per))));
  for (const auto& [hash, doc] : new_topologies_) stored_topologies_.insert(hash);
  ops_.clear();
  new_topologies_.clear();
}

void EtcdStore::commitBatch(std::vector<EtcdOp> success) {
  const std::string generationKey = prefix_ + "/generation";
  success.push_back({EtcdOp::Kind::kPut, generationKey, json{{"generation", generation_ + 1}}.dump(), "", 0});
  std::vector<EtcdCompare> compare;
  std::vector<EtcdOp> failure;
  if (!fence_.key.empty()) {
    compare.push_back(
        {fence_.key, EtcdCompare::Target::kCreate, EtcdCompare::Result::kEqual, fence_.create_revision, ""});
    failure.push_back({EtcdOp::Kind::kRange, fence_.key, "", "", 0});
  }
  compare.push_back(
      {generationKey, EtcdCompare::Target::kMod, EtcdCompare::Result::kEqual, generationRevision_, ""});
  failure.push_back({EtcdOp::Kind::kRange, generationKey, "", "", 0});
  EtcdTxnResult r;
  try {
    try {
      r = client_->txn(compare, success, failure);
    } catch (const EtcdOutcomeUnknown& e) {
      // The member that had it died, or the reply was lost: whether it landed shows in
      // P/generation (only this store writes it while the fence holds). Not landed: send it again.
      std::vector<EtcdKeyValue> g = client_->range(generationKey);
      const bool landed = !g.empty() && g[0].mod_revision != generationRevision_ &&
                          g[0].value == json{{"generation", generation_ + 1}}.dump();
      if (landed) {
        r.succeeded = true;
        r.revision = g[0].mod_revision;
      } else {
        r = client_->txn(compare, success, failure);
      }
    }
  } catch (const Error& e) {
    stale_ = true;
    std::string what = e.what();
    if (what.find("too many operations") != std::string::npos)
      what += " (a transaction of " + std::to_string(success.size()) +
              " operations: give poold --etcd-max-txn-ops as etcd's --max-txn-ops, " +
              std::to_string(max_txn_ops_) + " now)";
    throw Error(ErrorCode::kIo, "cannot commit the pool state to " + where() + ": " + what);
  }
  if (!r.succeeded) {
    stale_ = true;
    std::string why;
    if (!fence_.key.empty()) {
      const auto& leader = r.ranges.at(0);
      if (leader.empty())
        why = "this replica no longer leads (the leader key " + fence_.key +
              " is gone: its etcd lease expired)";
      else if (leader[0].create_revision != fence_.create_revision)
        why = "this replica no longer leads (" + fence_.key + " is now " + leader[0].value + ")";
    }
    if (why.empty()) {
      const auto& g = r.ranges.back();
      why = "another writer changed " + generationKey + " (mod revision " +
            std::to_string(g.empty() ? 0 : g[0].mod_revision) + ", this store last saw " +
            std::to_string(generationRevision_) + "): two poolds write the same prefix";
    }
    throw Error(ErrorCode::kIo, "cannot commit the pool state to " + where() + ": " + why +
                                    "; nothing of this change was written");
  }
  ++generation_;
  generationRevision_ = r.revision;
  revision_ = r.revision;
}

void EtcdStore::rollback() noexcept {
  if (!ops_.empty()) stale_ = true;
  ops_.clear();
  new_topologies_.clear();
}

}  // namespace poolrun::pool
