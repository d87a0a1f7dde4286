#include "poolrun/pool/store.hpp"
#include "poolrun/common/hash.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/topo/writers.hpp"
#include "sqlite_steps.hpp"
#include "stored_docs.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

// Stored in the file's user_version once kSchema has been applied; raise it with every change.
// 2: nodes.health (the agent's version, why GPUs failed, accepted ECC counts).
// 3: join_tokens and node_credentials (nodes that join: membership.hpp).
// 4: jobs (jobs the pool keeps: job_book.hpp), and meta's next_job.
// 5: usage (the usage ledger: usage.hpp), and meta's next_usage.
// 6: reservations (reservations.hpp).
// 7: nodes.levels (the levels above a node other than its leaf and rail group: topo::NodeLevels).
constexpr int64_t kSchemaVersion = 7;
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS topologies(hash TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(name TEXT PRIMARY KEY, ord INTEGER NOT NULL, switch TEXT NOT NULL,
  rail_group TEXT NOT NULL, fabric TEXT, labels TEXT NOT NULL, state TEXT NOT NULL,
  failed TEXT NOT NULL, topology TEXT NOT NULL, topology_file TEXT NOT NULL,
  health TEXT NOT NULL DEFAULT '{}', levels TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS leases(id TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lease_gpus(node TEXT NOT NULL, idx INTEGER NOT NULL, lease TEXT NOT NULL,
  PRIMARY KEY(node, idx));
CREATE INDEX IF NOT EXISTS lease_gpus_by_lease ON lease_gpus(lease);
CREATE TABLE IF NOT EXISTS queue(ticket INTEGER PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests(id TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS join_tokens(hash TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS node_credentials(node TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(id TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reservations(name TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS usage(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, lease TEXT NOT NULL,
  job TEXT NOT NULL, owner TEXT NOT NULL, account TEXT NOT NULL, node TEXT NOT NULL,
  model TEXT NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL, running INTEGER NOT NULL,
  gpus REAL NOT NULL, allocated_s REAL NOT NULL, used_s REAL NOT NULL, idle_s REAL NOT NULL,
  energy_j REAL NOT NULL, ended TEXT NOT NULL);
)sql";

// FILE.generation: one line of fixed length, rewritten in place with one pwrite (which a crash of
// the process cannot tear), so that `cat` shows it:
//   poolrun-generation 1 00000000000000001234 0123456789abcdef
// The last field is FNV-1a of what precedes it.
constexpr std::string_view kRecordPrefix = "poolrun-generation 1 ";
constexpr size_t kRecordSize = kRecordPrefix.size() + 20 + 1 + 16 + 1;

std::string recordLine(uint64_t generation) {
  char digits[21];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(generation));
  std::string body = std::string(kRecordPrefix) + digits;
  return body + " " + common::fnv1aHex(body) + "\n";
}

// The generation a record holds, or what is wrong with it.
std::optional<uint64_t> parseRecord(const std::string& text, std::string& why) {
  if (text.size() != kRecordSize) {
    why = std::to_string(text.size()) + " bytes, not " + std::to_string(kRecordSize);
    return std::nullopt;
  }
  std::string body = text.substr(0, kRecordSize - 18);
  if (body.compare(0, kRecordPrefix.size(), kRecordPrefix) != 0 || text.back() != '\n' ||
      body.find_first_not_of("0123456789", kRecordPrefix.size()) != std::string::npos) {
    why = "not a generation record ('" + std::string(kRecordPrefix) + "' and 20 digits)";
    return std::nullopt;
  }
  if (text.compare(kRecordSize - 17, 16, common::fnv1aHex(body)) != 0) {
    why = "its checksum " + text.substr(kRecordSize - 17, 16) + " does not match its content (" +
          common::fnv1aHex(body) + ")";
    return std::nullopt;
  }
  return std::stoull(body.substr(kRecordPrefix.size()));
}

// The record's file as it is (one byte more than a record, to tell a longer file).
std::string readRecord(int fd, bool& ok) {
  std::string text(kRecordSize + 1, '\0');
  ssize_t n = pread(fd, text.data(), text.size(), 0);
  ok = n >= 0;
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

using sql::refusal;
using sql::restoreOrMove;
using sql::Step;
using sql::text;

// Column 0 of every row `sql` returns, as text; SQLite's error code in `rc`, its message in `why`.
std::vector<std::string> column(sqlite3* db, const char* sql, int& rc, std::string& why) {
  std::vector<std::string> out;
  sqlite3_stmt* prepared = nullptr;
  rc = sqlite3_prepare_v2(db, sql, -1, &prepared, nullptr);
  const std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)> st(prepared, &sqlite3_finalize);
  while (rc == SQLITE_OK) {
    int step = sqlite3_step(st.get());
    if (step == SQLITE_DONE) break;
    if (step != SQLITE_ROW)
      rc = step;
    else
      out.push_back(text(st.get(), 0));
  }
  if (rc != SQLITE_OK) why = sqlite3_errmsg(db);
  return out;
}

// "dgx01:0, dgx01:1" or "none": GPUs as a refusal names them.
std::string gpuText(const std::set<std::pair<std::string, int64_t>>& gpus) {
  std::string out;
  for (const auto& [node, index] : gpus)
    out += (out.empty() ? "" : ", ") + node + ":" + std::to_string(index);
  return out.empty() ? std::string("none") : out;
}

// Each of the state's files, where it exists, is a regular file: a folder or a device in its place is
// said as such, not as a damaged or missing database (which would send an operator to a needless
// restore).
void checkRegularFiles(const std::filesystem::path& file, const std::filesystem::path& generationFile) {
  for (const std::filesystem::path& part : {file, std::filesystem::path(file.string() + "-wal"),
                                            std::filesystem::path(file.string() + "-shm"), generationFile}) {
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(part, ec);
    if (ec || st.type() == std::filesystem::file_type::not_found ||
        st.type() == std::filesystem::file_type::regular)
      continue;
    throw Error(
        ErrorCode::kIo,
        part.string() + ": not a regular file (" +
            (st.type() == std::filesystem::file_type::directory ? "a folder" : "a device, pipe or socket") +
            ") where the pool's state keeps one; nothing was written: move it away " +
            "(and restore the file from a backup, if one belongs there)");
  }
}

bool damage(int rc) {
  return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB;
}

}  // namespace

std::filesystem::path Store::generationFile(const std::filesystem::path& file) {
  return file.string() + ".generation";
}

// The generation record, where it exists; throws where it is damaged.
std::optional<uint64_t> Store::readGeneration(const std::filesystem::path& file) {
  std::optional<uint64_t> recorded;
  generationFd_ = open(generationFile_.c_str(), O_RDWR | O_CLOEXEC);
  if (generationFd_ < 0 && errno != ENOENT)
    throw Error(ErrorCode::kIo, generationFile_.string() +
                                    ": cannot open the pool state's generation record (" +
                                    std::strerror(errno) + "); check the state directory's permissions");
  if (generationFd_ >= 0) {
    flock(generationFd_, LOCK_SH);
    bool ok = false;
    std::string content = readRecord(generationFd_, ok);
    flock(generationFd_, LOCK_UN);
    std::string why = ok ? "" : std::strerror(errno);
    if (ok) recorded = parseRecord(content, why);
    if (!recorded) {
      close(generationFd_);
      throw Error(ErrorCode::kIo,
                  generationFile_.string() + ": damaged (" + why + "): it counts the commits of " +
                      file.string() + ", so whether that file lost some cannot be told; nothing " +
                      "was written to either. If the file is known good, delete " + generationFile_.string() +
                      "; else " + restoreOrMove(file, file.string()));
    }
  }
  return recorded;
}

// Whether the file is new (missing or empty: SQLite creates it); throws where it should not be,
// its record or write-ahead log telling of commits.
bool Store::isFresh(const std::filesystem::path& file, std::optional<uint64_t> recorded) {
  std::error_code ec;
  auto fileSize = std::filesystem::file_size(file, ec);
  const bool fresh = ec || fileSize == 0;  // SQLite creates it (its first page is written with WAL mode)
  if (fresh) {
    std::string found = ec ? "missing" : "empty (0 bytes)";
    auto walSize = std::filesystem::file_size(file.string() + "-wal", ec);
    if (recorded && *recorded > 0) {
      close(generationFd_);
      throw refusal(file, found + ", but " + generationFile_.filename().string() + " records generation " +
                              std::to_string(*recorded) + ": every acknowledged commit is gone");
    }
    if (!ec && walSize > 0) {
      close(generationFd_);
      throw refusal(file, found + ", but its write-ahead log " + file.filename().string() + "-wal holds " +
                              std::to_string(walSize) + " bytes");
    }
  }
  return fresh;
}

Store::Store(const std::filesystem::path& file, Durability durability, StartCheck check)
    : file_(file), generationFile_(generationFile(file)) {
  checkRegularFiles(file, generationFile_);
  // The record first: it is written after each commit, so the database read after it is never
  // behind it unless commits were lost, whatever other processes commit meanwhile.
  const std::optional<uint64_t> recorded = readGeneration(file);
  const bool fresh = isFresh(file, recorded);
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (fresh ? SQLITE_OPEN_CREATE : 0);
  sqlite3* opened = nullptr;
  const int rc = sqlite3_open_v2(file.c_str(), &opened, flags, nullptr);
  db_.reset(opened);  // closed by db_ however the constructor leaves, opened or not
  if (rc != SQLITE_OK) {
    std::string why = db_ ? sqlite3_errmsg(db_.get()) : "out of memory";
    if (generationFd_ >= 0) close(generationFd_);
    throw Error(ErrorCode::kIo, file.string() + ": cannot open the pool state (" + why +
                                    "); check the state directory's permissions");
  }
  sqlite3_busy_timeout(db_.get(), 30000);
  // Short-lived clients (every poolrun) open and close the file once each: keeping the WAL file
  // and leaving checkpoints to SQLite's automatic ones spares each of them a checkpoint, two
  // fsyncs and re-creating the WAL (milliseconds per launch). Commits are as durable as before.
  // Also: closing a file that failed its checks writes nothing to it.
  int one = 1;
  sqlite3_file_control(db_.get(), "main", SQLITE_FCNTL_PERSIST_WAL, &one);
  sqlite3_db_config(db_.get(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  try {
    if (!fresh) verify(check, recorded.value_or(0));
  } catch (...) {
    if (generationFd_ >= 0) close(generationFd_);
    throw;
  }
  try {
    exec("PRAGMA journal_mode=WAL");
    // SQLite's automatic checkpoint, with the log's length kept for checkpoint().
    sqlite3_wal_hook(
        db_.get(),
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
    int64_t found = 0;
    {
      Step s(db_.get(), version);
      if (s.row()) found = sqlite3_column_int64(version, 0);
    }
    if (found != kSchemaVersion) {
      exec(kSchema);
      if (found == 1) exec("ALTER TABLE nodes ADD COLUMN health TEXT NOT NULL DEFAULT '{}'");
      if (found >= 1 && found < 7) exec("ALTER TABLE nodes ADD COLUMN levels TEXT NOT NULL DEFAULT '{}'");
      exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    }
    commit();
    record(generation_);
  } catch (...) {
    // The statements prepared so far and the connection are closed by statements_ and db_.
    if (generationFd_ >= 0) close(generationFd_);
    try {
      throw;
    } catch (const Error& e) {
      throw Error(e.code(),
                  std::string(e.what()) + "; if the file is damaged, restore it from a backup, or move " +
                      file.string() + " (and its -wal, -shm and .generation files) away: a new one is " +
                      "started, without the leases this one recorded");
    }
  }
}

Store::~Store() {
  if (generationFd_ >= 0) close(generationFd_);
}

void Store::CloseConnection::operator()(sqlite3* db) const noexcept {
  sqlite3_close(db);
}

void Store::FinalizeStatement::operator()(sqlite3_stmt* st) const noexcept {
  sqlite3_finalize(st);
}

// Reads only: a write now would start the log again after its last good frame, over the
// evidence of what was lost.
void Store::verify(StartCheck check, uint64_t recorded) {
  int rc = SQLITE_OK;
  std::string why;
  auto unreadable = [&](const std::string& what) {
    if (damage(rc)) return refusal(file_, what + ": " + why);
    return Error(ErrorCode::kIo, file_.string() + ": cannot read the pool state (" + why + ")");
  };
  std::vector<std::string> pageSize = column(db_.get(), "PRAGMA page_size", rc, why);
  if (rc != SQLITE_OK || pageSize.empty())
    throw unreadable("not a pool state file (its first page is damaged?)");
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(file_, ec);
  uint64_t page = std::stoull(pageSize[0]);
  if (!ec && page > 0 && size % page != 0)
    throw refusal(file_, "cut short: " + std::to_string(size) + " bytes, not a whole number of its " +
                             std::to_string(page) + "-byte pages");
  // Three problems say enough; the check stops at the fourth.
  std::vector<std::string> rows = column(
      db_.get(), check == StartCheck::kIntegrity ? "PRAGMA integrity_check(4)" : "PRAGMA quick_check(4)", rc,
      why);
  if (rc != SQLITE_OK) throw unreadable("integrity check");
  if (rows.size() != 1 || rows[0] != "ok") {
    std::vector<std::string> problems;
    for (const std::string& row : rows) {
      std::istringstream lines(row);
      for (std::string line; std::getline(lines, line);)
        if (!line.empty() && line.rfind("***", 0) != 0) problems.push_back(line);
    }
    std::string list;
    for (size_t i = 0; i < problems.size() && i < 3; ++i) list += (i ? "; " : "") + problems[i];
    throw refusal(file_, "integrity check: " + list + (problems.size() > 3 ? "; and more" : ""));
  }
  std::vector<std::string> meta =
      column(db_.get(), "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta'", rc, why);
  if (rc != SQLITE_OK) throw unreadable("its schema");
  std::vector<std::string> g;
  if (!meta.empty() && meta[0] != "0") {
    g = column(db_.get(), "SELECT value FROM meta WHERE key = 'generation'", rc, why);
    if (rc != SQLITE_OK) throw unreadable("its generation");
    generation_ = g.empty() ? 0 : std::stoull(g[0]);
  }
  const std::string record = generationFile_.filename().string();
  if (g.empty() && recorded > 0)
    throw refusal(file_, "no generation in the database, but " + record + " records generation " +
                             std::to_string(recorded) + ": this is not the file those commits went to");
  const uint64_t lost = recorded - generation_;
  if (generation_ < recorded)
    throw refusal(file_, "generation " + std::to_string(generation_) + " in the database, " +
                             std::to_string(recorded) + " acknowledged (" + record +
                             "): the write-ahead log lost its last " +
                             (lost == 1 ? "commit" : std::to_string(lost) + " commits"));
}

// Raises the record to `generation` unless another process recorded a later one. A record that
// cannot be written costs only the detection of a loss, not the commit: a warning, once.
void Store::record(uint64_t generation) {
  std::string failed;
  if (generationFd_ < 0) {
    // Created whole under another name and linked into place, so that it never exists half
    // written and a process that lost the race to create it keeps the winner's.
    std::string temp = generationFile_.string() + "." + std::to_string(getpid()) + ".tmp";
    std::string line = recordLine(generation);
    int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
              fsync(fd) == 0;
    if (!ok) failed = std::strerror(errno);
    if (fd >= 0) close(fd);
    if (ok && link(temp.c_str(), generationFile_.c_str()) != 0 && errno != EEXIST)
      failed = std::strerror(errno);
    unlink(temp.c_str());
    if (failed.empty()) {
      generationFd_ = open(generationFile_.c_str(), O_RDWR | O_CLOEXEC);
      if (generationFd_ < 0) failed = std::strerror(errno);
    }
  }
  if (generationFd_ >= 0) {
    flock(generationFd_, LOCK_EX);
    bool ok = false;
    std::string why;
    std::string content = readRecord(generationFd_, ok);
    std::optional<uint64_t> current = parseRecord(content, why);
    if (!ok) failed = std::strerror(errno);
    if (ok && (!current || *current < generation)) {
      std::string line = recordLine(generation);
      if (pwrite(generationFd_, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()) ||
          (content.size() > line.size() && ftruncate(generationFd_, static_cast<off_t>(line.size())) != 0))
        failed = std::strerror(errno);
    }
    flock(generationFd_, LOCK_UN);
  }
  if (!failed.empty() && !recordWarned_) {
    recordWarned_ = true;
    std::cerr << "poolrun: warning: " << generationFile_.string() << ": cannot record generation "
              << generation << " (" << failed
              << "); a write-ahead log that loses commits will not be noticed\n";
  }
}

void Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : sqlite3_errmsg(db_.get());
    sqlite3_free(err);
    throw Error(ErrorCode::kIo, file_.string() + ": " + why);
  }
}

sqlite3_stmt* Store::prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second.get();
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) != SQLITE_OK)
    throw Error(ErrorCode::kIo, file_.string() + ": " + sqlite3_errmsg(db_.get()));
  statements_[sql].reset(st);
  return st;
}

void Store::begin() {
  exec("BEGIN IMMEDIATE");
  changesAtBegin_ = sqlite3_total_changes64(db_.get());
}

void Store::commit() {
  uint64_t next = 0;
  if (sqlite3_total_changes64(db_.get()) != changesAtBegin_) {
    sqlite3_stmt* st = prepare(
        "INSERT INTO meta(key, value) VALUES('generation', 1) "
        "ON CONFLICT(key) DO UPDATE SET value = value + 1 RETURNING value");
    Step s(db_.get(), st);
    if (s.row()) next = static_cast<uint64_t>(sqlite3_column_int64(st, 0));
    s.run();
  }
  exec("COMMIT");
  if (next == 0) return;
  generation_ = next;
  record(next);
}
void Store::rollback() noexcept {
  if (!sqlite3_get_autocommit(db_.get())) sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

int64_t Store::dataVersion() {
  sqlite3_stmt* st = prepare("PRAGMA data_version");
  Step s(db_.get(), st);
  return s.row() ? sqlite3_column_int64(st, 0) : 0;
}

void Store::checkpoint(int frames) {
  if (walFrames_ < frames) return;
  int log = 0, copied = 0;
  // PASSIVE: neither waits for nor blocks other connections; a reader still on old pages leaves
  // the rest for the next checkpoint.
  if (sqlite3_wal_checkpoint_v2(db_.get(), "main", SQLITE_CHECKPOINT_PASSIVE, &log, &copied) == SQLITE_OK &&
      log == copied)
    walFrames_ = 0;
}

std::string Store::topologyHash(const std::shared_ptr<const topo::NodeTopology>& topology) {
  auto it = hashes_.find(topology.get());
  if (it != hashes_.end()) return it->second.second;
  std::string doc = topo::toJson(*topology).dump();
  std::string hash = common::fnv1aHex(doc);
  Step(db_.get(), prepare("INSERT OR IGNORE INTO topologies(hash, doc) VALUES(?, ?)"))
      .bind(hash)
      .bind(doc)
      .run();
  hashes_[topology.get()] = {topology, hash};
  topologies_[hash] = topology;
  return hash;
}

void Store::load(PoolState& state) {
  state.clear();
  loadNodes(state);
  loadLeases(state);
  loadQueue(state);
  loadRequests(state);
  loadMembership(state);
  loadJobs(state);
  loadReservations(state);
  loadUsage(state);
  loadCounters(state);
  state.takeDirty();
}

void Store::loadNodes(PoolState& state) {
  const char* select =
      "SELECT name, ord, switch, rail_group, fabric, labels, state, failed, topology, topology_file, "
      "health, levels FROM nodes";
  Step s(db_.get(), prepare(select));
  sqlite3_stmt* st = prepare(select);
  while (s.row()) {
    PoolNode n;
    n.name = text(st, 0);
    n.order = sqlite3_column_int64(st, 1);
    n.levels = levelsFromJson(json::parse(text(st, 11)));
    n.levels.switch_name = text(st, 2);
    n.levels.rail_group = text(st, 3);
    if (sqlite3_column_type(st, 4) != SQLITE_NULL) n.fabric = topo::fabricFromString(text(st, 4));
    n.labels = json::parse(text(st, 5)).get<std::map<std::string, std::string>>();
    n.state = nodeStateFromString(text(st, 6));
    for (int i : json::parse(text(st, 7))) n.failed.insert(i);
    healthFromJson(json::parse(text(st, 10)), n);
    std::string hash = text(st, 8);
    auto t = topologies_.find(hash);
    if (t == topologies_.end()) {
      Step q(db_.get(), prepare("SELECT doc FROM topologies WHERE hash = ?"));
      q.bind(hash);
      if (!q.row())
        throw Error(ErrorCode::kIo, file_.string() + ": node " + n.name + " names a missing topology");
      auto topology = std::make_shared<const topo::NodeTopology>(
          topo::fromJson(json::parse(text(prepare("SELECT doc FROM topologies WHERE hash = ?"), 0)), n.name));
      t = topologies_.emplace(hash, topology).first;
      hashes_[topology.get()] = {topology, hash};
    }
    n.topology = t->second;
    state.loadNode(std::move(n));
  }
}

// A change made inside a document passes SQLite's integrity check (the page is whole): each
// document is checked against its row's key, and a lease's GPUs against its lease_gpus rows (the
// table whose key keeps a GPU in one lease), before anything of it is taken. A GPU the two
// disagree on would be free in one and held in the other.
void Store::loadLeases(PoolState& state) {
  std::map<std::string, std::set<std::pair<std::string, int64_t>>> rows;  // lease_gpus, per lease
  {
    sqlite3_stmt* st = prepare("SELECT node, idx, lease FROM lease_gpus");
    Step s(db_.get(), st);
    while (s.row()) rows[text(st, 2)].emplace(text(st, 0), sqlite3_column_int64(st, 1));
  }
  sqlite3_stmt* st = prepare("SELECT id, doc FROM leases");
  Step s(db_.get(), st);
  while (s.row()) {
    const std::string id = text(st, 0);
    const std::string what = "lease " + common::printable(id);
    Lease lease;
    try {
      lease = leaseFromJson(json::parse(text(st, 1)));
    } catch (const std::exception& e) {
      throw refusal(file_, what + ": its stored document is broken (" + e.what() + ")");
    }
    if (lease.id != id)
      throw refusal(file_, what + ": its stored document names lease '" + common::printable(lease.id) + "'");
    std::set<std::pair<std::string, int64_t>> held;
    for (const GpuRef& g : lease.gpus)
      if (!g.share) held.emplace(g.node, static_cast<int64_t>(g.index));
    auto row = rows.find(id);
    const std::set<std::pair<std::string, int64_t>> listed =
        row == rows.end() ? decltype(held){} : row->second;
    if (held != listed)
      throw refusal(file_, what + ": its stored document holds GPUs " + gpuText(held) +
                               ", its lease_gpus rows " + gpuText(listed) +
                               " (the file was changed outside poold)");
    if (row != rows.end()) rows.erase(row);
    state.loadLease(std::move(lease));
  }
  if (!rows.empty())
    throw refusal(file_, "lease_gpus rows hold GPUs " + gpuText(rows.begin()->second) + " for lease " +
                             common::printable(rows.begin()->first) +
                             ", which has no stored document (the file was changed outside poold)");
}

void Store::loadQueue(PoolState& state) {
  sqlite3_stmt* st = prepare("SELECT ticket, doc FROM queue");
  Step s(db_.get(), st);
  while (s.row()) {
    const int64_t ticket = sqlite3_column_int64(st, 0);
    const std::string what = "queue ticket " + std::to_string(ticket);
    QueueEntry entry;
    try {
      entry = queueFromDoc(json::parse(text(st, 1)));
    } catch (const std::exception& e) {
      throw refusal(file_, what + ": its stored document is broken (" + e.what() + ")");
    }
    if (entry.ticket != ticket)
      throw refusal(file_, what + ": its stored document names ticket " + std::to_string(entry.ticket));
    state.loadQueueEntry(std::move(entry));
  }
}

void Store::loadRequests(PoolState& state) {
  sqlite3_stmt* st = prepare("SELECT id, doc FROM requests");
  Step s(db_.get(), st);
  while (s.row()) {
    const std::string id = text(st, 0);
    RememberedRequest request;
    try {
      request = requestFromDoc(json::parse(text(st, 1)));
    } catch (const std::exception& e) {
      throw refusal(file_, "acquire request " + common::printable(id) + ": its stored document is broken (" +
                               e.what() + ")");
    }
    state.loadRequest(id, std::move(request));
  }
}

void Store::loadMembership(PoolState& state) {
  {
    sqlite3_stmt* st = prepare("SELECT hash, doc FROM join_tokens");
    Step s(db_.get(), st);
    while (s.row()) {
      const std::string hash = text(st, 0);
      try {
        JoinToken t = joinTokenFromDoc(json::parse(text(st, 1)));
        if (t.hash != hash) throw std::runtime_error("it names another hash");
        state.loadJoinToken(std::move(t));
      } catch (const std::exception& e) {
        throw refusal(file_, "join token " + common::printable(hash.substr(0, 12)) +
                                 ": its stored document is broken (" + e.what() + ")");
      }
    }
  }
  sqlite3_stmt* st = prepare("SELECT node, doc FROM node_credentials");
  Step s(db_.get(), st);
  while (s.row()) {
    const std::string node = text(st, 0);
    try {
      NodeCredential c = credentialFromDoc(json::parse(text(st, 1)));
      if (c.node != node) throw std::runtime_error("it names node '" + common::printable(c.node) + "'");
      state.loadCredential(std::move(c));
    } catch (const std::exception& e) {
      throw refusal(file_, "the credential of node " + common::printable(node) +
                               ": its stored document is broken (" + e.what() + ")");
    }
  }
}

void Store::loadCounters(PoolState& state) {
  uint64_t granted = 0;
  int64_t next = 1;
  {
    sqlite3_stmt* st = prepare("SELECT key, value FROM meta");
    Step s(db_.get(), st);
    while (s.row()) {
      std::string key = text(st, 0);
      if (key == "leases_granted") granted = static_cast<uint64_t>(sqlite3_column_int64(st, 1));
      if (key == "next_ticket") next = sqlite3_column_int64(st, 1);
      if (key == "next_job") state.loadNextJob(sqlite3_column_int64(st, 1));
      if (key == "next_usage") state.loadNextUsage(static_cast<uint64_t>(sqlite3_column_int64(st, 1)));
    }
  }
  state.loadCounters(granted, next);
}

void Store::writeMembership(const PoolState& state, const Dirty& dirty) {
  const Membership& members = state.membership();
  for (const std::string& hash : dirty.join_tokens) {
    auto it = members.tokens().find(hash);
    if (it == members.tokens().end())
      Step(db_.get(), prepare("DELETE FROM join_tokens WHERE hash = ?")).bind(hash).run();
    else
      Step(db_.get(), prepare("INSERT OR REPLACE INTO join_tokens(hash, doc) VALUES(?, ?)"))
          .bind(hash)
          .bind(joinTokenDoc(it->second).dump())
          .run();
  }
  for (const std::string& node : dirty.credentials) {
    const NodeCredential* c = members.credentialFor(node);
    if (c == nullptr)
      Step(db_.get(), prepare("DELETE FROM node_credentials WHERE node = ?")).bind(node).run();
    else
      Step(db_.get(), prepare("INSERT OR REPLACE INTO node_credentials(node, doc) VALUES(?, ?)"))
          .bind(node)
          .bind(credentialDoc(*c).dump())
          .run();
  }
}

void Store::write(const PoolState& state, const Dirty& dirty) {
  for (const std::string& name : dirty.nodes) {
    auto it = state.nodeMap().find(name);
    if (it == state.nodeMap().end()) {
      Step(db_.get(), prepare("DELETE FROM nodes WHERE name = ?")).bind(name).run();
      continue;
    }
    const PoolNode& n = it->second;
    Step s(
        db_.get(),
        prepare(
            "INSERT OR REPLACE INTO nodes(name, ord, switch, rail_group, fabric, labels, state, "
            "failed, topology, topology_file, health, levels) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    s.bind(n.name).bind(n.order).bind(n.levels.switch_name).bind(n.levels.rail_group);
    if (n.fabric)
      s.bind(topo::toString(*n.fabric));
    else
      s.bindNull();
    s.bind(json(n.labels).dump())
        .bind(toString(n.state))
        .bind(json(n.failed).dump())
        .bind(topologyHash(n.topology));
    s.bind(std::string());
    s.bind(healthToJson(n).dump());
    s.bind(levelsDoc(n.levels).dump());
    s.run();
  }
  // Deletions first, so that GPUs a batch moves from one lease to another are free when inserted;
  // a resized lease's GPUs are written again.
  for (const std::string& id : dirty.leases) {
    const bool gone = !state.leaseMap().count(id);
    if (gone) Step(db_.get(), prepare("DELETE FROM leases WHERE id = ?")).bind(id).run();
    if (gone || dirty.resized.count(id))
      Step(db_.get(), prepare("DELETE FROM lease_gpus WHERE lease = ?")).bind(id).run();
  }
  for (const std::string& id : dirty.leases) {
    auto it = state.leaseMap().find(id);
    if (it == state.leaseMap().end()) continue;
    Step(db_.get(), prepare("INSERT OR REPLACE INTO leases(id, doc) VALUES(?, ?)"))
        .bind(id)
        .bind(toJson(it->second).dump())
        .run();
    // A GPU in one lease at most (the table's key); MPS shares of a GPU are many, kept in the
    // lease's document only (PoolState::loadLease checks them).
    if (dirty.new_leases.count(id) || dirty.resized.count(id))
      for (const GpuRef& g : it->second.gpus)
        if (!g.share)
          Step(db_.get(), prepare("INSERT INTO lease_gpus(node, idx, lease) VALUES(?, ?, ?)"))
              .bind(g.node)
              .bind(g.index)
              .bind(id)
              .run();
  }
  for (int64_t ticket : dirty.queue) {
    auto it = state.queueMap().find(ticket);
    if (it == state.queueMap().end()) {
      Step(db_.get(), prepare("DELETE FROM queue WHERE ticket = ?")).bind(ticket).run();
      continue;
    }
    Step(db_.get(), prepare("INSERT OR REPLACE INTO queue(ticket, doc) VALUES(?, ?)"))
        .bind(ticket)
        .bind(queueDoc(it->second).dump())
        .run();
  }
  for (const std::string& id : dirty.requests) {
    const RememberedRequest* r = state.rememberedRequest(id);
    if (r == nullptr) {
      Step(db_.get(), prepare("DELETE FROM requests WHERE id = ?")).bind(id).run();
      continue;
    }
    Step(db_.get(), prepare("INSERT OR REPLACE INTO requests(id, doc) VALUES(?, ?)"))
        .bind(id)
        .bind(requestDoc(*r).dump())
        .run();
  }
  writeMembership(state, dirty);
  writeJobs(state, dirty);
  writeReservations(state, dirty);
  writeUsage(state, dirty);
  if (dirty.counters) {
    Step(db_.get(), prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('next_usage', ?)"))
        .bind(static_cast<int64_t>(state.usage().nextId()))
        .run();
    Step(db_.get(), prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('next_job', ?)"))
        .bind(state.jobs().nextNumber())
        .run();
    Step(db_.get(), prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('leases_granted', ?)"))
        .bind(static_cast<int64_t>(state.leasesGranted()))
        .run();
    Step(db_.get(), prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('next_ticket', ?)"))
        .bind(state.nextTicket())
        .run();
  }
}

}  // namespace poolrun::pool
