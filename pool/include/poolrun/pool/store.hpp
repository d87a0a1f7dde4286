#pragma once

// The pool's persistent state: one SQLite file in WAL mode. Every change a pool acknowledges is
// written by write() and committed before the reply. Several processes may open one file (the
// embedded pool): a writer takes the write lock with begin(), reloads when another process
// committed since its last look (dataVersion()), changes, writes and commits.

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "poolrun/pool/state.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace poolrun::pool {

enum class Durability {
  kNormal,  // synchronous=NORMAL: a commit survives a crash of the process, not a power loss
  kFull,    // synchronous=FULL: a commit is on disk (fsync) before it returns
};

class Store {
 public:
  // Opens (creating) the file. Throws poolrun::Error (kIo) naming the file when SQLite cannot.
  Store(const std::filesystem::path& file, Durability durability = Durability::kNormal);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& file() const { return file_; }

  void begin();  // BEGIN IMMEDIATE (waits for other writers, up to 30 s)
  void commit();
  void rollback() noexcept;
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
  void load(PoolState& state);
  // Writes the rows `dirty` names as `state` has them (deleting those it no longer has).
  // Inside begin()/commit(). A GPU stored in two leases violates a UNIQUE constraint and throws.
  void write(const PoolState& state, const Dirty& dirty);

 private:
  sqlite3_stmt* prepare(const char* sql);
  void exec(const char* sql);
  std::string topologyHash(const std::shared_ptr<const topo::NodeTopology>& topology);

  std::filesystem::path file_;
  sqlite3* db_ = nullptr;
  int walFrames_ = 0;  // pages in the write-ahead log after this connection's last commit
  std::map<std::string, sqlite3_stmt*> statements_;
  std::map<std::string, std::shared_ptr<const topo::NodeTopology>> topologies_;  // by hash
  std::map<const topo::NodeTopology*, std::pair<std::shared_ptr<const topo::NodeTopology>, std::string>>
      hashes_;
};

}  // namespace poolrun::pool
