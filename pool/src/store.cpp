#include "poolrun/pool/store.hpp"
#include "poolrun/topo/hash.hpp"

#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include "poolrun/pool/json.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

// Stored in the file's user_version once kSchema has been applied; raise it with every change.
constexpr int64_t kSchemaVersion = 1;
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS topologies(hash TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(name TEXT PRIMARY KEY, ord INTEGER NOT NULL, switch TEXT NOT NULL,
  rail_group TEXT NOT NULL, fabric TEXT, labels TEXT NOT NULL, state TEXT NOT NULL,
  failed TEXT NOT NULL, topology TEXT NOT NULL, topology_file TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases(id TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lease_gpus(node TEXT NOT NULL, idx INTEGER NOT NULL, lease TEXT NOT NULL,
  PRIMARY KEY(node, idx));
CREATE INDEX IF NOT EXISTS lease_gpus_by_lease ON lease_gpus(lease);
CREATE TABLE IF NOT EXISTS queue(ticket INTEGER PRIMARY KEY, doc TEXT NOT NULL);
)sql";

std::string text(sqlite3_stmt* st, int col) {
  const unsigned char* p = sqlite3_column_text(st, col);
  return p ? reinterpret_cast<const char*>(p) : "";
}

// Binds and steps one statement to completion, then resets it.
class Step {
 public:
  explicit Step(sqlite3* db, sqlite3_stmt* st) : db_(db), st_(st) {}
  ~Step() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  Step& bind(const std::string& v) {
    sqlite3_bind_text(st_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Step& bind(int64_t v) {
    sqlite3_bind_int64(st_, ++n_, v);
    return *this;
  }
  Step& bindNull() {
    sqlite3_bind_null(st_, ++n_);
    return *this;
  }
  bool row() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(ErrorCode::kIo,
                std::string("pool state: ") + sqlite3_errmsg(db_) + " (" + sqlite3_sql(st_) + ")");
  }
  void run() {
    while (row()) {
    }
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_;
  int n_ = 0;
};

json queueDoc(const QueueEntry& e) {
  const char* status = e.status == QueueEntry::Status::kWaiting   ? "waiting"
                       : e.status == QueueEntry::Status::kGranted ? "granted"
                                                                  : "failed";
  return {{"ticket", e.ticket},
          {"request", toJson(e.request)},
          {"enqueued_ms", toMillis(e.enqueued)},
          {"heartbeat_ms", toMillis(e.heartbeat)},
          {"status", status},
          {"lease", e.lease_id},
          {"reason", e.reason}};
}

QueueEntry queueFromDoc(const json& doc) {
  QueueEntry e;
  e.ticket = doc.at("ticket").get<int64_t>();
  e.request = requestFromJson(doc.at("request"));
  e.enqueued = fromMillis(doc.at("enqueued_ms").get<int64_t>());
  e.heartbeat = fromMillis(doc.at("heartbeat_ms").get<int64_t>());
  std::string status = doc.at("status").get<std::string>();
  e.status = status == "waiting"   ? QueueEntry::Status::kWaiting
             : status == "granted" ? QueueEntry::Status::kGranted
                                   : QueueEntry::Status::kFailed;
  e.lease_id = doc.value("lease", "");
  e.reason = doc.value("reason", "");
  return e;
}

}  // namespace

Store::Store(const std::filesystem::path& file, Durability durability) : file_(file) {
  if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(ErrorCode::kIo, file.string() + ": cannot open the pool state (" + why +
                                    "); check the state directory's permissions");
  }
  sqlite3_busy_timeout(db_, 30000);
  // Short-lived clients (every poolrun) open and close the file once each: keeping the WAL file
  // and leaving checkpoints to SQLite's automatic ones spares each of them a checkpoint, two
  // fsyncs and re-creating the WAL (milliseconds per launch). Commits are as durable as before.
  int one = 1;
  sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &one);
  sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  try {
    exec("PRAGMA journal_mode=WAL");
    // SQLite's automatic checkpoint, with the log's length kept for checkpoint().
    sqlite3_wal_hook(
        db_,
        [](void* self, sqlite3* db, const char* name, int frames) {
          static_cast<Store*>(self)->walFrames_ = frames;
          if (frames >= kAutoCheckpointFrames)
            sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
          return SQLITE_OK;
        },
        this);
    exec(durability == Durability::kFull ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
    exec("PRAGMA foreign_keys=OFF");
    begin();
    // The schema's statements are parsed only when the file does not have them yet.
    sqlite3_stmt* version = prepare("PRAGMA user_version");
    bool current = false;
    {
      Step s(db_, version);
      current = s.row() && sqlite3_column_int64(version, 0) == kSchemaVersion;
    }
    if (!current) {
      exec(kSchema);
      exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    }
    commit();
  } catch (...) {
    // The statements prepared so far first: SQLite keeps a connection open while any is left.
    for (auto& [sql, st] : statements_) sqlite3_finalize(st);
    statements_.clear();
    sqlite3_close(db_);
    db_ = nullptr;
    try {
      throw;
    } catch (const Error& e) {
      throw Error(e.code(), std::string(e.what()) +
                                "; if the file is damaged, move it (and its -wal and -shm files) away: a new "
                                "one is started, without the leases this one recorded");
    }
  }
}

Store::~Store() {
  for (auto& [sql, st] : statements_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

void Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw Error(ErrorCode::kIo, file_.string() + ": " + why);
  }
}

sqlite3_stmt* Store::prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) != SQLITE_OK)
    throw Error(ErrorCode::kIo, file_.string() + ": " + sqlite3_errmsg(db_));
  statements_[sql] = st;
  return st;
}

void Store::begin() {
  exec("BEGIN IMMEDIATE");
}
void Store::commit() {
  exec("COMMIT");
}
void Store::rollback() noexcept {
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

int64_t Store::dataVersion() {
  sqlite3_stmt* st = prepare("PRAGMA data_version");
  Step s(db_, st);
  return s.row() ? sqlite3_column_int64(st, 0) : 0;
}

void Store::checkpoint(int frames) {
  if (walFrames_ < frames) return;
  int log = 0, copied = 0;
  // PASSIVE: neither waits for nor blocks other connections; a reader still on old pages leaves
  // the rest for the next checkpoint.
  if (sqlite3_wal_checkpoint_v2(db_, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &copied) == SQLITE_OK &&
      log == copied)
    walFrames_ = 0;
}

std::string Store::topologyHash(const std::shared_ptr<const topo::NodeTopology>& topology) {
  auto it = hashes_.find(topology.get());
  if (it != hashes_.end()) return it->second.second;
  std::string doc = topo::toJson(*topology).dump();
  std::string hash = topo::fnv1aHex(doc);
  Step(db_, prepare("INSERT OR IGNORE INTO topologies(hash, doc) VALUES(?, ?)")).bind(hash).bind(doc).run();
  hashes_[topology.get()] = {topology, hash};
  topologies_[hash] = topology;
  return hash;
}

void Store::load(PoolState& state) {
  state.clear();
  {
    Step s(db_, prepare("SELECT name, ord, switch, rail_group, fabric, labels, state, failed, topology, "
                        "topology_file FROM nodes"));
    sqlite3_stmt* st = prepare(
        "SELECT name, ord, switch, rail_group, fabric, labels, state, failed, topology, "
        "topology_file FROM nodes");
    while (s.row()) {
      PoolNode n;
      n.name = text(st, 0);
      n.order = sqlite3_column_int64(st, 1);
      n.switch_name = text(st, 2);
      n.rail_group = text(st, 3);
      if (sqlite3_column_type(st, 4) != SQLITE_NULL) n.fabric = topo::fabricFromString(text(st, 4));
      n.labels = json::parse(text(st, 5)).get<std::map<std::string, std::string>>();
      n.state = nodeStateFromString(text(st, 6));
      for (int i : json::parse(text(st, 7))) n.failed.insert(i);
      std::string hash = text(st, 8);
      auto t = topologies_.find(hash);
      if (t == topologies_.end()) {
        Step q(db_, prepare("SELECT doc FROM topologies WHERE hash = ?"));
        q.bind(hash);
        if (!q.row())
          throw Error(ErrorCode::kIo, file_.string() + ": node " + n.name + " names a missing topology");
        auto topology = std::make_shared<const topo::NodeTopology>(topo::fromJson(
            json::parse(text(prepare("SELECT doc FROM topologies WHERE hash = ?"), 0)), n.name));
        t = topologies_.emplace(hash, topology).first;
        hashes_[topology.get()] = {topology, hash};
      }
      n.topology = t->second;
      state.loadNode(std::move(n));
    }
  }
  {
    sqlite3_stmt* st = prepare("SELECT doc FROM leases");
    Step s(db_, st);
    while (s.row()) state.loadLease(leaseFromJson(json::parse(text(st, 0))));
  }
  {
    sqlite3_stmt* st = prepare("SELECT doc FROM queue");
    Step s(db_, st);
    while (s.row()) state.loadQueueEntry(queueFromDoc(json::parse(text(st, 0))));
  }
  uint64_t granted = 0;
  int64_t next = 1;
  {
    sqlite3_stmt* st = prepare("SELECT key, value FROM meta");
    Step s(db_, st);
    while (s.row()) {
      std::string key = text(st, 0);
      if (key == "leases_granted") granted = static_cast<uint64_t>(sqlite3_column_int64(st, 1));
      if (key == "next_ticket") next = sqlite3_column_int64(st, 1);
    }
  }
  state.loadCounters(granted, next);
  state.takeDirty();
}

void Store::write(const PoolState& state, const Dirty& dirty) {
  for (const std::string& name : dirty.nodes) {
    auto it = state.nodeMap().find(name);
    if (it == state.nodeMap().end()) {
      Step(db_, prepare("DELETE FROM nodes WHERE name = ?")).bind(name).run();
      continue;
    }
    const PoolNode& n = it->second;
    Step s(db_, prepare("INSERT OR REPLACE INTO nodes(name, ord, switch, rail_group, fabric, labels, state, "
                        "failed, topology, topology_file) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    s.bind(n.name).bind(n.order).bind(n.switch_name).bind(n.rail_group);
    if (n.fabric)
      s.bind(topo::toString(*n.fabric));
    else
      s.bindNull();
    s.bind(json(n.labels).dump())
        .bind(toString(n.state))
        .bind(json(n.failed).dump())
        .bind(topologyHash(n.topology));
    s.bind(std::string());
    s.run();
  }
  // Deletions first, so that GPUs a batch moves from one lease to another are free when inserted.
  for (const std::string& id : dirty.leases) {
    if (state.leaseMap().count(id)) continue;
    Step(db_, prepare("DELETE FROM leases WHERE id = ?")).bind(id).run();
    Step(db_, prepare("DELETE FROM lease_gpus WHERE lease = ?")).bind(id).run();
  }
  for (const std::string& id : dirty.leases) {
    auto it = state.leaseMap().find(id);
    if (it == state.leaseMap().end()) continue;
    Step(db_, prepare("INSERT OR REPLACE INTO leases(id, doc) VALUES(?, ?)"))
        .bind(id)
        .bind(toJson(it->second).dump())
        .run();
    if (dirty.new_leases.count(id))
      for (const GpuRef& g : it->second.gpus)
        Step(db_, prepare("INSERT INTO lease_gpus(node, idx, lease) VALUES(?, ?, ?)"))
            .bind(g.node)
            .bind(g.index)
            .bind(id)
            .run();
  }
  for (int64_t ticket : dirty.queue) {
    auto it = state.queueMap().find(ticket);
    if (it == state.queueMap().end()) {
      Step(db_, prepare("DELETE FROM queue WHERE ticket = ?")).bind(ticket).run();
      continue;
    }
    Step(db_, prepare("INSERT OR REPLACE INTO queue(ticket, doc) VALUES(?, ?)"))
        .bind(ticket)
        .bind(queueDoc(it->second).dump())
        .run();
  }
  if (dirty.counters) {
    Step(db_, prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('leases_granted', ?)"))
        .bind(static_cast<int64_t>(state.leasesGranted()))
        .run();
    Step(db_, prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('next_ticket', ?)"))
        .bind(state.nextTicket())
        .run();
  }
}

}  // namespace poolrun::pool
