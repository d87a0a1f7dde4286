// poold: serves a GPU pool for many nodes over HTTP/JSON. See pool/README.md.

#include <pthread.h>

#include <csignal>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "poolrun/pool/server.hpp"
#include "poolrun/topo/cluster.hpp"

namespace {

constexpr const char* kUsage =
    "usage: poold --state DIR --token-file FILE [--listen HOST:PORT] [--cluster FILE]\n"
    "             [--sync normal|full] [--max-body BYTES] [--threads N]\n"
    "  --listen HOST:PORT  where to serve (default 127.0.0.1:7450; port 0 picks a free port and prints it)\n"
    "  --state DIR         the pool's state (DIR/pool.sqlite, WAL); one poold per directory\n"
    "  --token-file FILE   one `TOKEN OWNER ROLE` line per token (ROLE user or admin, # comments);\n"
    "                      re-read when it changes\n"
    "  --cluster FILE      register the nodes of a cluster file at start (keeps their state)\n"
    "  --sync normal|full  SQLite synchronous mode: normal (default) survives a crash of poold,\n"
    "                      full also a power loss (an fsync per group commit)\n"
    "  --max-body BYTES    largest request body (default 1048576); larger ones get 413\n"
    "  --threads N         connections served at once (default 64)\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace poolrun;
  pool::ServerOptions opt;
  std::string cluster;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw badInput(a + " needs a value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (a == "--listen") {
        std::string v = value();
        size_t colon = v.rfind(':');
        if (colon == std::string::npos) throw badInput("--listen '" + v + "': expected HOST:PORT");
        opt.host = v.substr(0, colon);
        try {
          opt.port = std::stoi(v.substr(colon + 1));
        } catch (const std::exception&) {
          throw badInput("--listen '" + v + "': the port is not a number");
        }
        if (opt.port < 0 || opt.port > 65535) throw badInput("--listen '" + v + "': port out of range");
      } else if (a == "--state") {
        opt.state_dir = value();
      } else if (a == "--token-file") {
        opt.token_file = value();
      } else if (a == "--cluster") {
        cluster = value();
      } else if (a == "--sync") {
        std::string v = value();
        if (v == "normal")
          opt.durability = pool::Durability::kNormal;
        else if (v == "full")
          opt.durability = pool::Durability::kFull;
        else
          throw badInput("--sync '" + v + "' (use normal or full)");
      } else if (a == "--max-body") {
        opt.max_body_bytes = std::stoull(value());
      } else if (a == "--threads") {
        opt.threads = std::stoi(value());
      } else {
        throw badInput("unknown option '" + a + "'");
      }
    }
    // SIGTERM and SIGINT are taken by one thread with sigwait, never by a handler, so that
    // stopping the server runs in an ordinary thread.
    sigset_t stopSignals;
    sigemptyset(&stopSignals);
    sigaddset(&stopSignals, SIGTERM);
    sigaddset(&stopSignals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    pool::PoolServer server(opt);
    if (!cluster.empty()) server.registerNodes(topo::readClusterFile(cluster).nodes);
    int port = server.bind();
    std::thread([&server, stopSignals] {
      int sig = 0;
      sigwait(&stopSignals, &sig);
      server.stop();
    }).detach();
    std::cout << "poold: listening on http://" << opt.host << ":" << port << std::endl;
    server.run();
    std::cerr << "poold: stopped\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "poold: error: " << e.what() << "\n";
    if (e.code() == ErrorCode::kBadInput) std::cerr << kUsage;
    return e.code() == ErrorCode::kBadInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "poold: error: " << e.what() << "\n";
    return 1;
  }
}
