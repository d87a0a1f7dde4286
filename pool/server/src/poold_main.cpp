// poold: serves a GPU pool for many nodes over HTTP/JSON. See pool/README.md. The options are read
// by parsePooldOptions (poold_options.cpp); a replica's campaign is ha/etcd_replica.cpp's.

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "ha/etcd_replica.hpp"
#include "poolrun/pool/dashboard_routes.hpp"
#include "poolrun/pool/poold_options.hpp"
#include "poolrun/pool/server.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/version.hpp"

namespace poolrun::pool {
namespace {

// Serves the pool as the options say, until SIGTERM or SIGINT.
int runPoold(PooldOptions o) {
  // SIGTERM and SIGINT are taken by one thread with sigwait, never by a handler, so that stopping
  // the server runs in an ordinary thread.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGTERM);
  sigaddset(&stopSignals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<EtcdReplica> replica;
  if (o.store != "sqlite") replica = std::make_unique<EtcdReplica>(o);
  std::atomic<PoolServer*> running{nullptr};
  std::atomic<bool> stopRequested{false};
  std::thread([&, stopSignals] {
    int sig = 0;
    sigwait(&stopSignals, &sig);
    stopRequested = true;
    if (replica) replica->stop();
    if (PoolServer* s = running.load()) s->stop();
  }).detach();
  if (o.server.tls_cert_file.empty() && o.insecure_http)
    std::cerr << "poold: warning: serving plain HTTP on " << o.server.host << ":" << o.server.port
              << " (--insecure-http): bearer tokens and all the pool's traffic cross the network in clear\n";
  if (replica && !replica->lead(o.server)) {
    std::cerr << "poold: stopped (standby)\n";
    return 0;
  }
  PoolServer server(o.server);
  if (!o.cluster.empty()) server.registerNodes(topo::readClusterFile(o.cluster).nodes);
  if (replica) replica->stopStandby();
  int port = server.bind();
  running = &server;
  if (stopRequested) server.stop();
  std::cout << "poold: listening on " << (o.server.tls_cert_file.empty() ? "http://" : "https://")
            << o.server.host << ":" << port << std::endl;
  server.run();
  std::cerr << "poold: stopped\n";
  return 0;
}

}  // namespace
}  // namespace poolrun::pool

int main(int argc, char** argv) {
  using namespace poolrun;
  try {
    pool::PooldOptions options = pool::parsePooldOptions(std::vector<std::string>(argv + 1, argv + argc));
    if (options.action == pool::PooldOptions::Action::kHelp) {
      std::cout << pool::pooldUsage();
      return 0;
    }
    if (options.action == pool::PooldOptions::Action::kVersion) {
      std::cout << topo::versionText("poold");
      return 0;
    }
    pool::addDashboard(options.server);  // the page and its data, over the server's seam
    return pool::runPoold(options);
  } catch (const Error& e) {
    std::cerr << "poold: error: " << e.what() << "\n";
    if (e.code() == ErrorCode::kBadInput) std::cerr << pool::pooldUsage();
    return e.code() == ErrorCode::kBadInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "poold: error: " << e.what() << "\n";
    return 1;
  }
}
