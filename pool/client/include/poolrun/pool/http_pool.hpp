#pragma once

// A pool served by poold, over its HTTP API: what openPool opens for an http:// URI.

#include <memory>
#include <string>
#include <vector>

#include "poolrun/pool/control.hpp"

namespace poolrun::pool {

struct HttpAddress {
  std::string host;
  int port = 0;
};

// The host and port of "http://HOST:PORT"; throws kBadInput naming the URI otherwise.
HttpAddress parseHttpUri(const std::string& uri);
// "http://HOST:PORT", or several replicas of one pool: "http://a:7450,http://b:7450".
std::vector<HttpAddress> parseHttpReplicas(const std::string& uri);

// The pool of the poold at `replicas` (parsed from `uri`, which names it in messages): its client
// follows the leader among them and the replicas the leader lists.
std::unique_ptr<PoolControl> openHttpPool(const std::string& uri, std::vector<HttpAddress> replicas,
                                          const ClientOptions& options);

}  // namespace poolrun::pool
