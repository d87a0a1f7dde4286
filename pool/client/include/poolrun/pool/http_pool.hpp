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
  bool tls = false;  // https://
};

// The host and port of "http://HOST:PORT" or "https://HOST:PORT" (HOST:PORT alone: http); throws
// kBadInput naming the URI otherwise.
HttpAddress parseHttpUri(const std::string& uri);
// One replica's URI, or several of one pool: "https://a:7450,https://b:7450" (all http or all
// https: a pool is served one way).
std::vector<HttpAddress> parseHttpReplicas(const std::string& uri);
// Whether `uri` names a poold (http:// or https://), rather than another kind of pool.
bool isPooldUri(const std::string& uri);
// "https://HOST:PORT": the origin of `a`, as messages and redirects name it.
std::string originOf(const HttpAddress& a);

// The pool of the poold at `replicas` (parsed from `uri`, which names it in messages): its client
// follows the leader among them and the replicas the leader lists.
std::unique_ptr<PoolControl> openHttpPool(const std::string& uri, std::vector<HttpAddress> replicas,
                                          const ClientOptions& options);

}  // namespace poolrun::pool
