#pragma once

// Leader election among poold replicas through etcd: the leader key PREFIX/leader, created only
// where absent (a transaction) and bound to an etcd lease that the leader keeps alive. A standby
// polls the key and campaigns again when it vanishes (the leader stopped, or its lease expired
// TTL seconds after its last renewal). The key's create revision fences the leader's writes
// (EtcdStore).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "poolrun/pool/etcd_store.hpp"

namespace poolrun::pool {

class EtcdClient;

class EtcdLeadership {
 public:
  // `advertise`: the URL clients reach this replica at (written in the leader key).
  EtcdLeadership(std::shared_ptr<EtcdClient> client, std::string prefix, std::string advertise,
                 std::chrono::seconds ttl);
  // Stops the renewals and, while leading, revokes the lease: the key goes at once, and a standby
  // takes over without waiting for the TTL.
  ~EtcdLeadership();
  EtcdLeadership(const EtcdLeadership&) = delete;
  EtcdLeadership& operator=(const EtcdLeadership&) = delete;

  // Campaigns until this replica leads (its fence) or stop() (nullopt). `seen(url)` is called when
  // the leader this replica sees changes ("" while there is none) and when etcd answers again after
  // `unreachable(why)`, called when etcd does not answer (the campaign goes on). Once leading, the lease is
  // renewed every TTL/4 in a thread, and `lost(why)` is called once when a renewal finds the lease gone or
  // none succeeded for a TTL.
  std::optional<EtcdFence> campaign(const std::function<void(const std::string&)>& seen,
                                    const std::function<void(const std::string&)>& unreachable,
                                    std::function<void(const std::string&)> lost);
  // Whether this replica may answer as the leader now: it leads and its last renewal started less
  // than TTL minus a margin ago (a replica stopped past its lease, SIGSTOP, answers nothing).
  bool leading() const;
  void stop();

  // Counts this replica's election in PREFIX/elections (while it leads: fenced on the leader key);
  // the count of elections of the pool so far. Throws kIo where etcd cannot be asked.
  int64_t countElection(const EtcdFence& fence);

  // The advertised URLs of the replicas alive now (each registers under PREFIX/replicas/ with its
  // own etcd lease), sorted; throws kIo where etcd cannot be asked.
  std::vector<std::string> replicas();

  // The leader's advertised URL as etcd has it now ("" where none); throws kIo where etcd cannot
  // be asked.
  std::string leader();
  const std::string& key() const { return key_; }

 private:
  void renewals(std::function<void(const std::string&)> lost);

  std::shared_ptr<EtcdClient> client_;
  std::string key_;
  std::string advertise_;
  std::chrono::seconds ttl_;
  int64_t lease_ = 0;
  std::atomic<bool> leading_{false};
  std::atomic<int64_t> valid_until_ns_{0};  // steady clock
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread renewer_;
};

}  // namespace poolrun::pool
