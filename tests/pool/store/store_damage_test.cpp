// A damaged state file is refused, named with what is wrong and what to do, and left as it was:
// emptied, cut short, garbage over an index page, garbage in the write-ahead log after a kill -9
// (SQLite would replay the log up to the garbage and drop the acknowledged commits after it), a
// missing file beside its generation record, a damaged record. A clean file opens with every
// acknowledged lease, after a clean stop and after a kill -9. Store-level tests (unit) and the
// same through the real poold and poolctl (integration, DamagedStateFile.Poold*).

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "inventory.hpp"
#include "poold_process.hpp"
#include "poolrun/common/hash.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "poolrun/pool/store.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

namespace fs = std::filesystem;

const TimePoint kNow = std::chrono::system_clock::now();

fs::path wal(const fs::path& db) {
  return db.string() + "-wal";
}

// What the refusal must leave as it was: the file, its log and its record (not the -shm, an index
// of the log that SQLite rebuilds). A log that was missing may be there, empty, after.
std::string fingerprint(const fs::path& db) {
  std::string out;
  for (const fs::path& f : {db, wal(db), Store::generationFile(db)}) {
    std::string content = test::slurp(f);
    out += f.filename().string() + (content.empty() ? " empty" : "=" + common::fnv1aHex(content)) + " ";
  }
  return out;
}

void overwrite(const fs::path& file, uint64_t offset, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << file;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << file;
}

void seed(Store& store, PoolState& state) {
  test::addInventory(state, "n[01-04]/gpu[0-7]@leaf1", kNow);
  Dirty all;
  for (const auto& [name, n] : state.nodeMap()) all.nodes.insert(name);
  store.begin();
  store.write(state, all);
  store.commit();
}

// One lease of one GPU, committed: acknowledged once this returns.
std::string acquire(Store& store, PoolState& state) {
  SubmitResult s = state.submit(test::parseRequest("1"), kNow);
  store.begin();
  store.write(state, state.takeDirty());
  store.commit();
  return s.lease->id;
}

struct Acknowledged {
  std::set<std::string> leases;
  uint64_t generation = 0;  // of the last acknowledged commit
};

// A new pool with `n` leases, closed cleanly.
Acknowledged cleanPool(const fs::path& db, int n) {
  Acknowledged a;
  Store store(db);
  PoolState state;
  seed(store, state);
  for (int i = 0; i < n; ++i) a.leases.insert(acquire(store, state));
  a.generation = store.generation();
  return a;
}

// A writer process that commits `n` leases, reports each once its commit returned, and is then
// killed with SIGKILL while it holds the file open.
Acknowledged writerKilledAfter(const fs::path& db, int n) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    try {
      Store store(db);
      PoolState state;
      seed(store, state);
      for (int i = 0; i < n; ++i) {
        std::string line = acquire(store, state);
        line += " " + std::to_string(store.generation()) + "\n";
        if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
      }
    } catch (...) {
      _exit(4);
    }
    for (;;) pause();
  }
  close(fds[1]);
  Acknowledged a;
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::count(text.begin(), text.end(), '\n') < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[512];
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got <= 0) break;
    text.append(buf, static_cast<size_t>(got));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  close(fds[0]);
  std::istringstream lines(text);
  std::string id;
  while (lines >> id >> a.generation) a.leases.insert(id);
  return a;
}

// Garbage over the page of the frame in the middle of the write-ahead log: SQLite's replay stops
// at its checksum, and takes it and every frame after it as never written.
void garbageInTheMiddleOfTheLog(const fs::path& db) {
  std::string log = test::slurp(wal(db));
  ASSERT_GT(log.size(), 32u);
  const uint32_t page = (uint32_t(uint8_t(log[8])) << 24) | (uint32_t(uint8_t(log[9])) << 16) |
                        (uint32_t(uint8_t(log[10])) << 8) | uint8_t(log[11]);
  const uint64_t frame = 24 + page, frames = (log.size() - 32) / frame;
  ASSERT_GE(frames, 10u) << "frames in the log";
  overwrite(wal(db), 32 + frames / 2 * frame + 24 + page / 4, std::string(64, '\xa5'));
}

// The first page of the index of lease_gpus by lease, once the log is copied into the file (so
// that the page SQLite reads is the one damaged); that copy is what a checkpoint does.
uint64_t indexPageOffset(const fs::path& db) {
  sqlite3* c = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &c, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(c, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr), SQLITE_OK);
  auto number = [c](const char* sql) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(c, sql, -1, &st, nullptr);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return n;
  };
  int64_t root = number("SELECT rootpage FROM sqlite_schema WHERE name = 'lease_gpus_by_lease'");
  int64_t page = number("PRAGMA page_size");
  sqlite3_close(c);
  EXPECT_GT(root, 1);
  return static_cast<uint64_t>((root - 1) * page);
}

// Opening `db` throws poolrun::Error naming it and each of `found`, and changes none of its files.
void expectRefused(const fs::path& db, const std::vector<std::string>& found,
                   StartCheck check = StartCheck::kIntegrity) {
  std::string before = fingerprint(db);
  try {
    Store store(db, Durability::kNormal, check);
    ADD_FAILURE() << db << " opened: " << before;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    for (const std::string& f : found)
      EXPECT_NE(what.find(f), std::string::npos) << "'" << f << "' in: " << what;
    EXPECT_NE(what.find("nothing was written"), std::string::npos) << what;
    EXPECT_NE(what.find("restore"), std::string::npos) << what;
    EXPECT_NE(what.find("move "), std::string::npos) << what;
  }
  EXPECT_EQ(fingerprint(db), before) << "a refused file was changed";
}

std::set<std::string> leasesIn(const fs::path& db) {
  Store store(db);
  PoolState state;
  store.load(state);
  std::set<std::string> out;
  for (const auto& [id, l] : state.leaseMap()) out.insert(id);
  return out;
}

TEST(DamagedStateFile, ACleanFileOpensWithEveryLeaseAfterACleanStop) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  Acknowledged a = cleanPool(db, 30);
  EXPECT_EQ(leasesIn(db), a.leases);
  EXPECT_EQ(leasesIn(db), a.leases) << "opened twice";
  EXPECT_NE(test::slurp(Store::generationFile(db)).find(std::to_string(a.generation) + " "),
            std::string::npos)
      << test::slurp(Store::generationFile(db));
}

// A state file of schema 1 (before nodes.health) opens, gains the column, and keeps every lease.
// A clean pool of 10 leases whose file `sql` turns back into an older schema's, opened again: the
// state as the migrated file loads it, every lease there before and after.
PoolState openedAfterDowngrade(const char* sql) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  Acknowledged a = cleanPool(db, 10);
  sqlite3* c = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &c, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(c, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(c);
  sqlite3_close(c);
  EXPECT_EQ(leasesIn(db), a.leases);
  Store store(db);
  PoolState state;
  store.load(state);
  EXPECT_EQ(state.leaseMap().size(), a.leases.size());
  return state;
}

TEST(DamagedStateFile, ASchema1FileIsMigratedInPlace) {
  PoolState state = openedAfterDowngrade(
      "ALTER TABLE nodes DROP COLUMN health; ALTER TABLE nodes DROP COLUMN levels; PRAGMA user_version=1");
  EXPECT_FALSE(state.nodeMap().empty());
  for (const auto& [name, node] : state.nodeMap()) EXPECT_TRUE(node.agent.empty()) << name;
}

// A file of schema 6 (before nodes' levels) gains the column and keeps its nodes, without levels.
TEST(DamagedStateFile, ASchema6FileGainsLevels) {
  PoolState state = openedAfterDowngrade("ALTER TABLE nodes DROP COLUMN levels; PRAGMA user_version=6");
  ASSERT_FALSE(state.nodeMap().empty());
  for (const auto& [name, node] : state.nodeMap()) {
    EXPECT_TRUE(node.levels.nvlink_domain.empty() && node.levels.block.empty() && node.levels.spine.empty())
        << name;
    EXPECT_FALSE(node.levels.switch_name.empty()) << name << ": its leaf, in its own column, kept";
  }
}

TEST(DamagedStateFile, ACleanFileOpensWithEveryLeaseAfterAKill9) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  Acknowledged a = writerKilledAfter(db, 30);
  ASSERT_EQ(a.leases.size(), 30u);
  EXPECT_EQ(leasesIn(db), a.leases);
}

TEST(DamagedStateFile, ADatabaseAheadOfItsRecordIsACrashBetweenCommitAndRecord) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  std::string record;
  Acknowledged a;
  {
    Store store(db);
    PoolState state;
    seed(store, state);
    a.leases.insert(acquire(store, state));
    record = test::slurp(Store::generationFile(db));
    a.leases.insert(acquire(store, state));
    a.generation = store.generation();
  }
  std::ofstream(Store::generationFile(db), std::ios::trunc) << record;  // as if killed before the record
  EXPECT_EQ(leasesIn(db), a.leases);
  EXPECT_NE(test::slurp(Store::generationFile(db)).find(std::to_string(a.generation) + " "),
            std::string::npos)
      << "the record caught up: " << test::slurp(Store::generationFile(db));
}

// A folder where one of the state's files belongs: said as such, not as a missing or damaged
// database (which sent an operator to a needless restore).
TEST(DamagedStateFile, AFolderInPlaceOfAStateFileIsSaidAsSuch) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  Acknowledged a = cleanPool(db, 3);
  for (const fs::path& part : {fs::path(db.string() + "-shm"), Store::generationFile(db)}) {
    SCOPED_TRACE(part.string());
    const fs::path aside = part.string() + ".aside";
    if (fs::exists(part)) fs::rename(part, aside);
    fs::create_directory(part);
    expectRefused(db, {part.string() + ": not a regular file (a folder)"});
    fs::remove(part);
    if (fs::exists(aside)) fs::rename(aside, part);
  }
  EXPECT_EQ(leasesIn(db), a.leases);
  const fs::path empty = dir.path() / "elsewhere" / "pool.sqlite";
  fs::create_directories(empty);
  try {
    Store store(empty);
    ADD_FAILURE() << "a folder opened as the state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(empty.string() + ": not a regular file (a folder)"),
              std::string::npos)
        << e.what();
  }
}

TEST(DamagedStateFile, TruncatedToZeroBytes) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  Acknowledged a = cleanPool(db, 5);
  fs::resize_file(db, 0);
  expectRefused(db, {db.string(), "empty (0 bytes), but pool.sqlite.generation records generation " +
                                      std::to_string(a.generation) + ": every acknowledged commit is gone"});
  // Without its record (as a file of a version before the record): the log the pool keeps
  // between processes tells.
  fs::remove(Store::generationFile(db));
  expectRefused(db, {db.string(), "empty (0 bytes), but its write-ahead log pool.sqlite-wal holds "});
  // Without either, an empty file is a new one (as `touch` makes).
  fs::remove(wal(db));
  EXPECT_TRUE(leasesIn(db).empty());
}

TEST(DamagedStateFile, TruncatedMidPage) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  cleanPool(db, 5);
  indexPageOffset(db);  // everything into the file itself
  uint64_t size = fs::file_size(db);
  ASSERT_GE(size, 3 * 4096u);
  fs::resize_file(db, size - 4096 - 1000);
  expectRefused(db, {db.string(), "cut short: " + std::to_string(size - 4096 - 1000) + " bytes"});
}

TEST(DamagedStateFile, GarbageOverAnIndexPage) {
  for (StartCheck check : {StartCheck::kIntegrity, StartCheck::kQuick}) {
    test::TempDir dir;
    const fs::path db = dir.path() / "pool.sqlite";
    cleanPool(db, 20);
    overwrite(db, indexPageOffset(db) + 8, std::string(200, '\x5a'));
    expectRefused(db, {db.string(), "integrity check: "}, check);
  }
}

TEST(DamagedStateFile, GarbageInTheMiddleOfTheLogAfterAKill9) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  Acknowledged a = writerKilledAfter(db, 30);
  ASSERT_EQ(a.leases.size(), 30u);
  garbageInTheMiddleOfTheLog(db);
  expectRefused(
      db, {db.string(), " in the database, " + std::to_string(a.generation) +
                            " acknowledged (pool.sqlite.generation): the write-ahead log lost its last "});
  // What the refusal spared: without its record, the file opens without the leases after the garbage.
  fs::remove(Store::generationFile(db));
  std::set<std::string> left = leasesIn(db);
  EXPECT_LT(left.size(), a.leases.size());
}

TEST(DamagedStateFile, AMissingDatabaseBesideItsRecord) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  Acknowledged a = cleanPool(db, 5);
  fs::remove(db);
  fs::remove(wal(db));
  fs::remove(db.string() + "-shm");
  expectRefused(db, {db.string(), "missing, but pool.sqlite.generation records generation " +
                                      std::to_string(a.generation) + ": every acknowledged commit is gone"});
  EXPECT_FALSE(fs::exists(db)) << "the refusal created the file";
  // Another SQLite file in its place.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(other, "CREATE TABLE t(x); INSERT INTO t VALUES(1)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(other);
  expectRefused(
      db, {db.string(), "no generation in the database, but pool.sqlite.generation records generation " +
                            std::to_string(a.generation)});
}

TEST(DamagedStateFile, ADamagedRecord) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  const fs::path record = Store::generationFile(db);
  cleanPool(db, 5);
  std::string good = test::slurp(record);
  std::string bad = good;
  bad[bad.find_first_not_of("0", 21)] ^= 1;  // a digit of the generation
  std::ofstream(record, std::ios::trunc) << bad;
  expectRefused(db, {record.string() + ": damaged (its checksum", "known good, delete " + record.string()});
  std::ofstream(record, std::ios::trunc) << "";
  expectRefused(db, {record.string() + ": damaged (0 bytes, not " + std::to_string(good.size()) + ")"});
  // The advice for a file known good.
  fs::remove(record);
  EXPECT_EQ(leasesIn(db).size(), 5u);
  EXPECT_EQ(test::slurp(record), good);
}

// Runs `sql` on `db` with SQLite itself, as an editor of the file would (the pages stay whole: the
// integrity check passes); column 0 of its first row.
std::string edit(const fs::path& db, const std::string& sql) {
  sqlite3* c = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &c, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(c, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(c);
  const int rc = sqlite3_step(st);
  EXPECT_TRUE(rc == SQLITE_ROW || rc == SQLITE_DONE) << sqlite3_errmsg(c);
  std::string out = rc == SQLITE_ROW && sqlite3_column_text(st, 0)
                        ? reinterpret_cast<const char*>(sqlite3_column_text(st, 0))
                        : "";
  sqlite3_finalize(st);
  sqlite3_close(c);
  return out;
}

// Loading `db` throws poolrun::Error naming it and each of `found`, and changes none of its files.
void expectLoadRefused(const fs::path& db, const std::vector<std::string>& found) {
  std::string before = fingerprint(db);
  try {
    Store store(db);
    PoolState state;
    store.load(state);
    ADD_FAILURE() << db << " loaded";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_EQ(what.rfind(db.string() + ": ", 0), 0u) << what;
    for (const std::string& f : found)
      EXPECT_NE(what.find(f), std::string::npos) << "'" << f << "' in: " << what;
    EXPECT_NE(what.find("nothing was written"), std::string::npos) << what;
    EXPECT_NE(what.find("restore"), std::string::npos) << what;
  }
  EXPECT_EQ(fingerprint(db), before) << "a refused file was changed";
}

// One byte changed inside a lease's document (the node of its GPU) leaves every page whole: the
// document is checked against the lease's lease_gpus rows, or the GPU it really holds would look
// free (and the one it names held).
TEST(DamagedStateFile, ALeaseDocumentThatDisagreesWithItsRowsIsRefusedNamingBoth) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  cleanPool(db, 5);
  const std::string id = edit(db, "SELECT id FROM leases ORDER BY id LIMIT 1");
  const std::string index = edit(db, "SELECT idx FROM lease_gpus WHERE lease = '" + id + "'");
  ASSERT_EQ(edit(db, "SELECT node FROM lease_gpus WHERE lease = '" + id + "'"), "n01");
  edit(db, "UPDATE leases SET doc = replace(doc, '\"n01\"', '\"n03\"') WHERE id = '" + id + "'");
  expectLoadRefused(db, {"lease " + id + ": its stored document holds GPUs n03:" + index +
                         ", its lease_gpus rows n01:" + index + " (the file was changed outside poold)"});

  // A document cut by a byte is named by its lease, not by the parser alone.
  edit(db, "UPDATE leases SET doc = replace(doc, '\"n03\"', '\"n01\"') WHERE id = '" + id + "'");
  EXPECT_EQ(leasesIn(db).size(), 5u) << "put back, it loads";
  edit(db, "UPDATE leases SET doc = substr(doc, 1, length(doc) - 1) WHERE id = '" + id + "'");
  expectLoadRefused(db, {"lease " + id + ": its stored document is broken ("});

  // Rows of a lease without a document; a document under another lease's key.
  edit(db, "UPDATE leases SET doc = substr(doc, 1) || '}' WHERE id = '" + id + "'");
  edit(db, "INSERT INTO lease_gpus(node, idx, lease) VALUES('n04', 7, 'L00000000000000ff')");
  expectLoadRefused(
      db, {"lease_gpus rows hold GPUs n04:7 for lease L00000000000000ff, which has no stored document"});
  edit(db, "DELETE FROM lease_gpus WHERE lease = 'L00000000000000ff'");
  EXPECT_EQ(leasesIn(db).size(), 5u);
  edit(db, "INSERT INTO queue(ticket, doc) VALUES(7, '{\"ticket\": 8')");
  expectLoadRefused(db, {"queue ticket 7: its stored document is broken ("});
  edit(db, "DELETE FROM queue WHERE ticket = 7");

  // Nodes that join: a join token's record cut short, a credential under another node's key, one
  // whose hash is not a hash. Each named; nothing loaded, nothing written.
  EXPECT_EQ(leasesIn(db).size(), 5u);
  const std::string hash(64, 'a');
  edit(db, "INSERT INTO join_tokens(hash, doc) VALUES('" + hash + "', '{\"hash\": \"" + hash + "\"')");
  expectLoadRefused(db, {"join token aaaaaaaaaaaa: its stored document is broken ("});
  edit(db, "DELETE FROM join_tokens");
  edit(db, "INSERT INTO node_credentials(node, doc) VALUES('n01', '{\"node\": \"n02\", \"hash\": \"" + hash +
               "\", \"token\": \"x\", \"joined_ms\": 1}')");
  expectLoadRefused(db, {"the credential of node n01: its stored document is broken (it names node 'n02')"});
  edit(db, "UPDATE node_credentials SET doc = replace(doc, 'n02', 'n01')");
  edit(db, "UPDATE node_credentials SET doc = replace(doc, 'aaaa', 'zzzz')");
  expectLoadRefused(db, {"the credential of node n01: its stored document is broken (node n01: its "
                         "credential's hash must be 64 hex digits)"});
  edit(db, "DELETE FROM node_credentials");
  EXPECT_EQ(leasesIn(db).size(), 5u) << "put back, it loads";
}

// The usage ledger's rows (docs/accounting.md): a figure below zero, a kind the ledger does not know,
// an end before its start. Each named by its row; nothing loaded, nothing written.
TEST(DamagedStateFile, ABrokenUsageRowIsRefusedNamingIt) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  cleanPool(db, 5);
  const std::string id = edit(db, "SELECT id FROM usage ORDER BY id LIMIT 1");
  ASSERT_FALSE(id.empty()) << "the leases' rows are in the file";
  edit(db, "UPDATE usage SET allocated_s = -1 WHERE id = " + id);
  expectLoadRefused(db, {"usage row " + id + " is broken (usage row: row " + id + ": 'allocated_s' is -1"});
  edit(db, "UPDATE usage SET allocated_s = 0, kind = 'week' WHERE id = " + id);
  expectLoadRefused(db, {"usage row " + id + " is broken (its kind 'week' is none of lease, day, total)"});
  edit(db, "UPDATE usage SET kind = 'lease', end_ms = start_ms - 1 WHERE id = " + id);
  expectLoadRefused(db,
                    {"usage row " + id + " is broken (usage row: row " + id + ": it ends before it starts)"});
  edit(db, "UPDATE usage SET end_ms = start_ms WHERE id = " + id);
  EXPECT_EQ(leasesIn(db).size(), 5u) << "put back, it loads";
}

TEST(DamagedStateFile, ABrokenReservationIsRefusedNamingIt) {
  test::TempDir dir;
  const fs::path db = dir.path() / "pool.sqlite";
  cleanPool(db, 5);
  edit(db, "INSERT INTO reservations(name, doc) VALUES('train', '{\"name\": \"train\", \"nodes\": 3}')");
  expectLoadRefused(db, {"reservation train: its stored document is broken"});
  edit(db, "UPDATE reservations SET doc = '{not json' WHERE name = 'train'");
  expectLoadRefused(db, {"reservation train: its stored document is broken"});
  edit(db, "DELETE FROM reservations");
  EXPECT_EQ(leasesIn(db).size(), 5u) << "removed, it loads";
}

TEST(DamagedStateFile, TheEmbeddedPoolsRefuseToo) {
  test::TempDir dir;
  ClientOptions o;
  o.state_dir = dir.path().string();
  const std::string uri = "sim:" + (test::sourceDir() / "clusters" / "hgx-h100.toml").string();
  {
    auto pool = openPoolControl(uri, o);
    LeaseRequest r;
    r.gpus = 8;
    pool->acquire(r, nullptr);
  }
  fs::path db;
  for (const auto& f : fs::directory_iterator(dir.path()))
    if (f.path().extension() == ".sqlite") db = f.path();
  ASSERT_FALSE(db.empty());
  overwrite(db, indexPageOffset(db) + 8, std::string(200, '\x5a'));
  std::string before = fingerprint(db);
  try {
    openPoolControl(uri, o);
    ADD_FAILURE() << "a damaged pool file was opened";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(db.string() + ": integrity check: "), std::string::npos) << what;
  }
  EXPECT_EQ(fingerprint(db), before);
}

// --- the same through the real poold (integration)

class PooldState {
 public:
  PooldState() : tokens_(dir_.writeSecret("tokens", test::kTokens)) {}
  fs::path db() const { return dir_.path() / "state" / "pool.sqlite"; }
  std::vector<std::string> args() const { return {"--cluster", cluster()}; }
  static std::string cluster() { return (test::sourceDir() / "clusters" / "hgx-h100.toml").string(); }
  const fs::path& tokens() const { return tokens_; }
  fs::path state() const { return dir_.path() / "state"; }

  // `n` leases of one GPU acquired from a poold, which is then stopped (or killed with SIGKILL).
  std::set<std::string> acquire(int n, bool kill9) {
    test::PooldProcess poold(state(), tokens_, args());
    std::set<std::string> ids;
    {
      ClientOptions o;
      o.token = "tok-alice-0123456789";
      auto pool = openPoolControl(poold.uri(), o);
      for (int i = 0; i < n; ++i) {
        LeaseRequest r;
        r.gpus = 1;
        r.ttl = std::chrono::seconds(3600);
        ids.insert(pool->acquire(r, nullptr).id);
      }
    }  // its connection closed: poold waits for open ones before it stops
    if (kill9)
      poold.kill9();
    else
      poold.stop();
    return ids;
  }
  std::set<std::string> leases() {
    test::PooldProcess poold(state(), tokens_, args());
    ClientOptions o;
    o.token = "tok-root-0123456789";
    std::set<std::string> ids;
    for (const Lease& l : openPoolControl(poold.uri(), o)->leases()) ids.insert(l.id);
    return ids;
  }
  // poold refuses to start: exit status 1, `found` on stderr, the files unchanged.
  void expectRefused(const std::vector<std::string>& found) {
    std::string before = fingerprint(db());
    test::ProcessResult r =
        test::runShell("timeout 20 " + std::string(POOLD_BINARY) + " --listen 127.0.0.1:0 --state " +
                       state().string() + " --token-file " + tokens_.string() + " --cluster " + cluster());
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
    EXPECT_EQ(r.err.rfind("poold: error: " + db().string() + ": ", 0), 0u) << r.err;
    for (const std::string& f : found)
      EXPECT_NE(r.err.find(f), std::string::npos) << "'" << f << "' in: " << r.err;
    EXPECT_EQ(fingerprint(db()), before) << "a refused file was changed";
  }

 private:
  test::TempDir dir_;
  fs::path tokens_;
};

TEST(DamagedStateFile, PooldStartsWithEveryLeaseAfterACleanStopAndAKill9) {
  PooldState s;
  std::set<std::string> ids = s.acquire(10, false);
  EXPECT_EQ(s.leases(), ids);
  std::set<std::string> more = s.acquire(10, true);
  ids.insert(more.begin(), more.end());
  EXPECT_EQ(s.leases(), ids);
}

TEST(DamagedStateFile, PooldRefusesAFileTruncatedToZeroBytes) {
  PooldState s;
  s.acquire(3, false);
  fs::resize_file(s.db(), 0);
  s.expectRefused({"empty (0 bytes), but pool.sqlite.generation records generation"});
}

TEST(DamagedStateFile, PooldRefusesAFileCutShort) {
  PooldState s;
  s.acquire(3, false);
  indexPageOffset(s.db());
  fs::resize_file(s.db(), fs::file_size(s.db()) - 100);
  s.expectRefused({"cut short"});
}

TEST(DamagedStateFile, PooldRefusesGarbageOverAnIndexPage) {
  PooldState s;
  s.acquire(20, false);
  overwrite(s.db(), indexPageOffset(s.db()) + 8, std::string(200, '\x5a'));
  s.expectRefused({"integrity check: "});
}

TEST(DamagedStateFile, PooldRefusesGarbageInTheMiddleOfTheLogAfterAKill9) {
  PooldState s;
  std::set<std::string> ids = s.acquire(30, true);
  garbageInTheMiddleOfTheLog(s.db());
  s.expectRefused({" acknowledged (pool.sqlite.generation): the write-ahead log lost its last "});
}

TEST(DamagedStateFile, PooldRefusesAMissingFileBesideItsRecord) {
  PooldState s;
  s.acquire(3, false);
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(s.db().string() + suffix);
  s.expectRefused({"missing, but pool.sqlite.generation records generation"});
  EXPECT_FALSE(fs::exists(s.db()));
}

TEST(DamagedStateFile, PooldRefusesADamagedRecord) {
  PooldState s;
  s.acquire(3, false);
  std::ofstream(Store::generationFile(s.db()), std::ios::app) << "x";
  std::string before = fingerprint(s.db());
  test::ProcessResult r =
      test::runShell("timeout 20 " + std::string(POOLD_BINARY) + " --listen 127.0.0.1:0 --state " +
                     s.state().string() + " --token-file " + s.tokens().string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("poold: error: " + Store::generationFile(s.db()).string() + ": damaged ("),
            std::string::npos)
      << r.err;
  EXPECT_EQ(fingerprint(s.db()), before);
}

TEST(DamagedStateFile, PoolctlRefusesADamagedEmbeddedPool) {
  test::TempDir dir;
  const std::string cluster = PooldState::cluster();
  const std::string env =
      "env POOLRUN_STATE_DIR=" + dir.path().string() + " " + POOLCTL_BINARY + " --pool sim:" + cluster;
  ASSERT_EQ(test::runShell(env + " status").status, 0);
  fs::path db;
  for (const auto& f : fs::directory_iterator(dir.path()))
    if (f.path().extension() == ".sqlite") db = f.path();
  ASSERT_FALSE(db.empty());
  fs::resize_file(db, 0);
  std::string before = fingerprint(db);
  test::ProcessResult r = test::runShell("timeout 20 " + env + " status");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find(db.string() + ": empty (0 bytes)"), std::string::npos) << r.err;
  EXPECT_EQ(fingerprint(db), before);
}

}  // namespace
}  // namespace poolrun::pool
