#pragma once

#include <memory>
#include <string>
#include <vector>

#include "poolrun/pool/control.hpp"

namespace poolrun::pool {

std::unique_ptr<PoolControl> openEmbeddedLocal(const ClientOptions& options);
std::unique_ptr<PoolControl> openEmbeddedSim(const std::string& file, const ClientOptions& options);
struct HttpAddress {
  std::string host;
  int port = 0;
};
// The host and port of "http://HOST:PORT"; throws kBadInput naming the URI otherwise.
HttpAddress parseHttpUri(const std::string& uri);
// "http://HOST:PORT", or several replicas of one pool: "http://a:7450,http://b:7450".
std::vector<HttpAddress> parseHttpReplicas(const std::string& uri);
std::unique_ptr<PoolControl> openHttp(const std::string& uri, std::vector<HttpAddress> replicas,
                                      const ClientOptions& options);

}  // namespace poolrun::pool
