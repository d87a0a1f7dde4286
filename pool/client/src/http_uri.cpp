// The pool URI's of poold: "http://HOST:PORT", or several replicas of one pool.

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
                  " (a poold is http://HOST:PORT, e.g. http://127.0.0.1:7450)");
}

}  // namespace

HttpAddress parseHttpUri(const std::string& uri) {
  std::string rest = uri.substr(uri.rfind("http://", 0) == 0 ? 7 : 0);
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
  return {host, port};
}

std::vector<HttpAddress> parseHttpReplicas(const std::string& uri) {
  std::vector<HttpAddress> out;
  for (size_t start = 0; start <= uri.size();) {
    size_t end = std::min(uri.find(',', start), uri.size());
    std::string part = uri.substr(start, end - start);
    if (!part.starts_with("http://"))
      throw badUri(uri, "'" + common::printable(part) +
                            "' is not http://HOST:PORT (replicas: http://A:PORT,http://B:PORT)");
    out.push_back(parseHttpUri(part));
    start = end + 1;
  }
  return out;
}

}  // namespace poolrun::pool
