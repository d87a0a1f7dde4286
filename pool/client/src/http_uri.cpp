// The pool URI's of poold: "http://HOST:PORT" or "https://HOST:PORT", or several replicas of one pool.

#include <algorithm>
#include <charconv>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/http_pool.hpp"

namespace poolrun::pool {
namespace {

// A URI of poold's that is not one: the other kinds of pool (open_pool.cpp lists them) are no help to
// a user who meant a poold.
Error badUri(const std::string& uri, const std::string& why) {
  return badInput("bad pool URI '" + common::printable(uri) + "': " + why +
                  " (a poold is http://HOST:PORT or https://HOST:PORT, e.g. https://pool.example:7450)");
}

}  // namespace

bool isPooldUri(const std::string& uri) {
  return uri.starts_with("http://") || uri.starts_with("https://");
}

std::string originOf(const HttpAddress& a) {
  return (a.tls ? "https://" : "http://") + a.host + ":" + std::to_string(a.port);
}

HttpAddress parseHttpUri(const std::string& uri) {
  const bool tls = uri.starts_with("https://");
  std::string rest = uri.substr(tls ? 8 : uri.starts_with("http://") ? 7 : 0);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) throw badUri(uri, "expected http://HOST:PORT");
  std::string host = rest.substr(0, colon);
  std::string portText = rest.substr(colon + 1);
  int port = 0;
  auto [p, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (ec != std::errc() || p != portText.data() + portText.size() || port < 1 || port > 65535)
    throw badUri(uri, "port '" + common::printable(portText) + "' is not a number from 1 to 65535");
  if (host.find('/') != std::string::npos) throw badUri(uri, "a path after HOST:PORT");
  // A host name, an IPv4 address or a bracketed IPv6 one: nothing a resolver would take otherwise.
  auto hostCharacter = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_' || c == ':' || c == '[' || c == ']';
  };
  if (host.size() > 253 || !std::all_of(host.begin(), host.end(), hostCharacter))
    throw badUri(uri, "host '" + common::printable(host) + "' is not a host name or address");
  return {host, port, tls};
}

std::vector<HttpAddress> parseHttpReplicas(const std::string& uri) {
  std::vector<HttpAddress> out;
  for (size_t start = 0; start <= uri.size();) {
    size_t end = std::min(uri.find(',', start), uri.size());
    std::string part = uri.substr(start, end - start);
    if (!isPooldUri(part))
      throw badUri(
          uri,
          "'" + common::printable(part) +
              "' is not http://HOST:PORT or https://HOST:PORT (replicas: https://A:PORT,https://B:PORT)");
    out.push_back(parseHttpUri(part));
    if (out.back().tls != out.front().tls)
      throw badUri(uri,
                   "it mixes http:// and https:// replicas: every replica of a pool serves the same way");
    start = end + 1;
  }
  return out;
}

}  // namespace poolrun::pool
