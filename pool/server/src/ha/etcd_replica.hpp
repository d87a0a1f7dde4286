#pragma once

// A poold replica of a pool kept in etcd (docs/ha.md): it campaigns until it leads, answering on
// its address meanwhile as a standby (redirects to the leader, its own /metrics), then serves with
// the state fenced on its leadership; a replica that loses the leadership exits (status 75) and its
// supervisor starts it again as a standby.

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/etcd_leader.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/poold_options.hpp"
#include "poolrun/pool/server_metrics.hpp"
#include "poolrun/pool/tokens.hpp"

namespace poolrun::pool {

// What a standby answers: 307 to the leader (the same path), or 503 while there is none; GET
// /healthz 503 too, so that a load balancer sends nothing here. Never the pool's state: a standby's
// would be stale.
HttpReply standbyReply(const HttpRequest& req, const std::string& leader, const std::string& etcdProblem);

class EtcdReplica {
 public:
  // Throws kBadInput where --advertise is missing.
  explicit EtcdReplica(const PooldOptions& options);
  ~EtcdReplica();  // stops the standby's server
  EtcdReplica(const EtcdReplica&) = delete;
  EtcdReplica& operator=(const EtcdReplica&) = delete;

  // Answers as a standby on server.host:port and campaigns until this replica leads; then sets
  // `server` to serve as the leader (port, open_store, serving, replicas, more_metrics) and returns
  // true, the standby still answering. False where stop() came first.
  bool lead(ServerOptions& server);
  // Stops the standby's server, so that the leader's may take its address.
  void stopStandby();
  // From another thread (a signal): ends the campaign.
  void stop() { leadership_->stop(); }

 private:
  void startStandby(ServerOptions& server);
  void serveAsLeader(ServerOptions& server, const EtcdFence& fence);

  PooldOptions options_;
  std::shared_ptr<EtcdClient> client_, metrics_etcd_;
  std::unique_ptr<EtcdLeadership> leadership_;
  const ServerMetrics process_metrics_;  // a standby's start time and version
  std::mutex leader_mu_;
  std::string leader_now_, etcd_problem_;
  std::unique_ptr<TokenStore> tokens_;  // for a standby's /metrics
  std::unique_ptr<MetricsAccess> access_;
  std::unique_ptr<HttpServer> standby_;
  std::thread standby_thread_;
};

}  // namespace poolrun::pool
