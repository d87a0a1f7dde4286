#pragma once

#include <memory>
#include <string>

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
std::unique_ptr<PoolControl> openHttp(const std::string& uri, const std::string& host, int port,
                                      const ClientOptions& options);

}  // namespace poolrun::pool
