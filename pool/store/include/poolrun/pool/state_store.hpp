#pragma once

// Where a pool keeps its state: the interface poold's group commit (and tests) write through, with
// two implementations: Store (one SQLite file, poolrun/pool/store.hpp; the default and the embedded
// pools') and EtcdStore (keys under a prefix in an etcd cluster, poolrun/pool/etcd_store.hpp; poold
// replicas with one leader).
//
// A change is begin(), write() for each batch of dirty rows, commit(). Nothing is acknowledged to a
// client before commit() returns. A commit that throws may or may not have been applied (etcd: a
// reply lost on the way back); the caller must then stop acknowledging changes and reload.

#include <cstdint>
#include <string>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Replaces `state` with what the store holds. Throws poolrun::Error (kIo) naming the store and
  // what is wrong (unreachable, a damaged record).
  virtual void load(PoolState& state) = 0;
  // Starts a change. SQLite: takes the write lock. etcd: starts collecting one transaction.
  virtual void begin() = 0;
  // Adds the rows `dirty` names, as `state` has them (deleting those it no longer has). A GPU in
  // two leases is refused (here or at commit()).
  virtual void write(const PoolState& state, const Dirty& dirty) = 0;
  // Makes the change durable (SQLite: one transaction; etcd: one txn, fenced on leadership).
  // Throws poolrun::Error (kIo) when it could not; the state in memory is then ahead of the store.
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  // Counts the commits that changed something (SQLite: kept in the file; etcd: the revision of the
  // last commit).
  virtual uint64_t generation() const = 0;
  // Where the state lives, for messages: the file, or the endpoints and prefix.
  virtual std::string where() const = 0;
};

}  // namespace poolrun::pool
