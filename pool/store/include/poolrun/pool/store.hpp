#pragma once

// The pool's persistent state: one SQLite file in WAL mode. Every change a pool acknowledges is
// written by write() and committed before the reply. Several processes may open one file (the
// embedded pool): a writer takes the write lock with begin(), reloads when another process
// committed since its last look (dataVersion()), changes, writes and commits.
//
// Every commit that changes something also raises a generation counter kept in the file, and
// then records it beside the file, in FILE.generation (one fixed-size line with a checksum,
// rewritten in place). SQLite replays its write-ahead log only up to the first damaged frame and
// takes the rest as never written; the record is how a log that lost acknowledged commits, or a
// file that was emptied, is noticed at the next start. The record is not synced to disk: after a
// power loss it may be behind the file (a loss then goes unnoticed), and ahead of it only where
// the file itself lost commits (synchronous=NORMAL).

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "poolrun/pool/state.hpp"
#include "poolrun/pool/state_store.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace poolrun::pool {

enum class Durability {
  kNormal,  // synchronous=NORMAL: a commit survives a crash of the process, not a power loss
  kFull,    // synchronous=FULL: a commit is on disk (fsync) before it returns
};

// What the constructor checks an existing file with before anything is written to it.
enum class StartCheck {
  kIntegrity,  // PRAGMA integrity_check: every page, and every index against its table
  kQuick,      // PRAGMA quick_check: every page, not whether the indexes match their tables
};

// The SQLite implementation of StateStore (the interface's contracts hold; this adds the file's).
class Store final : public StateStore {
 public:
  // Opens the file, creating it where neither it nor its generation record exists. An existing
  // file is checked before anything is written to it (not even a checkpoint of its log): the
  // SQLite check `check`, the size of its pages, and its generation against FILE.generation (a
  // file behind its record lost acknowledged commits; ahead is a process that died between its
  // commit and the record). A damaged, emptied or missing file, or a damaged record, is refused:
  // poolrun::Error (kIo) saying what was found and what to do, the files left as they were.
  // Also kIo, naming the file, when SQLite cannot open it. Costs `check` (pool/README.md).
  Store(const std::filesystem::path& file, Durability durability = Durability::kNormal,
        StartCheck check = StartCheck::kIntegrity);
  ~Store() override;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& file() const { return file_; }

  void begin() override;  // BEGIN IMMEDIATE (waits for other writers, up to 30 s)
  // COMMIT; when the transaction changed anything, raises the generation first and records it
  // in FILE.generation after (a record that cannot be written is a warning on stderr, once).
  void commit() override;
  // The generation of this connection's last commit (or of the file as opened).
  uint64_t generation() const override { return generation_; }
  std::string where() const override { return file_.string(); }
  static std::filesystem::path generationFile(const std::filesystem::path& file);
  void rollback() noexcept override;
  // Changes when another connection commits (PRAGMA data_version).
  int64_t dataVersion();
  // Copies the write-ahead log into the file when it holds at least `frames` pages (as far as
  // this connection's commits tell), so that the log restarts short. Each process that opens the
  // file first reads the whole log, and a checkpoint waits for the disk (three fdatasyncs, tens of
  // milliseconds on a slow one): a short-lived client calls this where waiting costs nothing, and
  // SQLite's own checkpoint at kAutoCheckpointFrames bounds the log for clients that never do.
  void checkpoint(int frames);
  static constexpr int kAutoCheckpointFrames = 1000;

  // Replaces `state` with what the file holds.
  void load(PoolState& state) override;
  // Writes the rows `dirty` names as `state` has them (deleting those it no longer has).
  // Inside begin()/commit(). A GPU stored in two leases violates a UNIQUE constraint and throws.
  void write(const PoolState& state, const Dirty& dirty) override;

 private:
  sqlite3_stmt* prepare(const char* sql);
  void exec(const char* sql);
  void verify(StartCheck check, uint64_t recorded);
  // The constructor's steps before SQLite opens the file (store.cpp says what each refuses).
  std::optional<uint64_t> readGeneration(const std::filesystem::path& file);
  bool isFresh(const std::filesystem::path& file, std::optional<uint64_t> recorded);
  void record(uint64_t generation);
  std::string topologyHash(const std::shared_ptr<const topo::NodeTopology>& topology);
  // load()'s parts, table by table: each document checked against its row's key before it is taken.
  void loadNodes(PoolState& state);
  void loadLeases(PoolState& state);
  void loadQueue(PoolState& state);
  void loadRequests(PoolState& state);
  void loadMembership(PoolState& state);
  void writeMembership(const PoolState& state, const Dirty& dirty);
  void loadJobs(PoolState& state);
  void writeJobs(const PoolState& state, const Dirty& dirty);
  void loadReservations(PoolState& state);
  void writeReservations(const PoolState& state, const Dirty& dirty);
  void loadUsage(PoolState& state);
  void writeUsage(const PoolState& state, const Dirty& dirty);
  void loadCounters(PoolState& state);

  std::filesystem::path file_;
  // SQLite's handles, each closed by its owner however the constructor or the destructor leaves:
  // statements_ is declared after db_, so the statements are finalized first (SQLite keeps a
  // connection open while a statement of it is left).
  struct CloseConnection {
    void operator()(sqlite3* db) const noexcept;
  };
  struct FinalizeStatement {
    void operator()(sqlite3_stmt* st) const noexcept;
  };
  std::unique_ptr<sqlite3, CloseConnection> db_;
  std::filesystem::path generationFile_;
  int generationFd_ = -1;  // FILE.generation, once it exists
  bool recordWarned_ = false;
  uint64_t generation_ = 0;
  int64_t changesAtBegin_ = 0;
  int walFrames_ = 0;  // pages in the write-ahead log after this connection's last commit
  std::map<std::string, std::unique_ptr<sqlite3_stmt, FinalizeStatement>> statements_;
  std::map<std::string, std::shared_ptr<const topo::NodeTopology>> topologies_;  // by hash
  std::map<const topo::NodeTopology*, std::pair<std::shared_ptr<const topo::NodeTopology>, std::string>>
      hashes_;
};

}  // namespace poolrun::pool
