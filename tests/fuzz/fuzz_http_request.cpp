// libFuzzer target: poold answers any bytes a client sends. The input is parsed as a connection
// parses it (Boost.Beast's parser with poold's limits, then the path's decoding), and a complete
// request goes to the real routes of a PoolServer (its state in a temporary directory, 16 nodes of
// 8 GPUs, an admin and a user token). A reply is always a status from 200 to 599 with a JSON body;
// nothing may crash, hang or throw out of the server.

#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "poolrun/pool/dashboard_routes.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/server.hpp"
#include "poolrun/topo/cluster.hpp"

namespace {

char g_root[] = "/tmp/poolrun-fuzz-http-XXXXXX";  // the server's state and tokens, gone at exit

poolrun::pool::PoolServer& server() {
  static poolrun::pool::PoolServer* s = [] {
    if (mkdtemp(g_root) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(g_root, ec);
    });
    std::filesystem::path root(g_root);
    std::ofstream(root / "tokens") << "tok-root-0123456789 root admin\ntok-alice-0123456789 alice user\n";
    poolrun::pool::ServerOptions o;
    o.state_dir = root / "state";
    o.token_file = root / "tokens";
    o.max_body_bytes = 65536;
    poolrun::pool::addDashboard(o);  // as poold's main does
    auto* created = new poolrun::pool::PoolServer(o);
    created->registerNodes(
        poolrun::topo::readClusterFile(POOLRUN_SOURCE_DIR "/clusters/hgx-h100.toml").nodes);
    return created;
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  poolrun::pool::HttpServerOptions limits;
  limits.max_body_bytes = 65536;
  poolrun::pool::HttpRequest request;
  poolrun::pool::HttpReply reply;
  if (poolrun::pool::parseRequest(bytes, limits, request, reply)) reply = server().handle(request);
  if (reply.status < 200 || reply.status > 599) __builtin_trap();
  if (reply.content_type == "application/json" && !nlohmann::json::accept(reply.body)) __builtin_trap();
  return 0;
}
