#include <errno.h>

#include <charconv>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>

#include "embedded.hpp"
#include "poolrun/pool/slurm.hpp"
#include "poolrun/topo/regular_file.hpp"

namespace poolrun::pool {
namespace {

Error badUri(const std::string& uri, const std::string& why) {
  return badInput("bad pool URI '" + uri + "': " + why +
                  " (use local, sim:FILE, http://HOST:PORT, slurm or slurm:PARTITION)");
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
    throw badUri(uri, "port '" + portText + "' is not a number from 1 to 65535");
  if (host.find('/') != std::string::npos) throw badUri(uri, "a path after HOST:PORT");
  return {host, port};
}

std::vector<HttpAddress> parseHttpReplicas(const std::string& uri) {
  std::vector<HttpAddress> out;
  for (size_t start = 0; start <= uri.size();) {
    size_t end = std::min(uri.find(',', start), uri.size());
    std::string part = uri.substr(start, end - start);
    if (!part.starts_with("http://"))
      throw badUri(uri, "'" + part + "' is not http://HOST:PORT (replicas: http://A:PORT,http://B:PORT)");
    out.push_back(parseHttpUri(part));
    start = end + 1;
  }
  return out;
}

std::unique_ptr<PoolControl> openPoolControl(const std::string& uri, const ClientOptions& options) {
  if (uri == "slurm" || uri.starts_with("slurm:"))
    throw badInput(
        "pool URI '" + uri +
        "': Slurm keeps its own queue and nodes, poolctl does not administer them; use squeue, sinfo "
        "and scontrol");
  if (uri.empty() || uri == "local") return openEmbeddedLocal(options);
  if (std::optional<std::string> file = simClusterFile(uri)) {
    if (file->empty()) throw badUri(uri, "no cluster file after 'sim:'");
    return openEmbeddedSim(*file, options);
  }
  if (uri.rfind("http://", 0) == 0) return openHttp(uri, parseHttpReplicas(uri), options);
  if (uri.rfind("https://", 0) == 0) throw badUri(uri, "poold speaks plain HTTP; put TLS in front of it");
  throw badUri(uri, "unknown kind");
}

bool validToken(const std::string& token) {
  if (token.size() < 8 || token.size() > 512) return false;
  for (unsigned char c : token)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

std::string tokenProblem(const std::string& token) {
  return std::to_string(token.size()) + " bytes" +
         (token.size() >= 8 && token.size() <= 512 ? ", with a character outside them" : "");
}

std::string readClientToken(const std::filesystem::path& file, const std::string& what) {
  std::string readable;
  std::istringstream in(topo::readSecretFile(file, topo::kTokenFileLimit, "token files", nullptr, &readable));
  if (!readable.empty()) {
    // Once per file and process: an agent reads its token again at every new connection.
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(file.string()).second)
      std::cerr << program_invocation_short_name << ": warning: " << readable << "\n";
  }
  std::string line;
  while (std::getline(in, line)) {
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string token;
    if (!(words >> token)) continue;
    // Sent as it is in a header: a control character or a byte past ASCII would corrupt the
    // request, and poold knows no token outside these bounds.
    if (!validToken(token))
      throw badInput(file.string() + ": " + what +
                     " must be 8 to 512 printable ASCII characters (its first word " + "is " +
                     tokenProblem(token) + "); put the token poold gave you on its first line");
    return token;
  }
  throw badInput(file.string() + ": no token in the file (put " + what + " on its first line)");
}

std::optional<std::string> simClusterFile(const std::string& uri) {
  if (!uri.starts_with("sim:")) return std::nullopt;
  return uri.substr(4);
}

std::unique_ptr<PoolClient> openPool(const std::string& uri, const ClientOptions& options) {
  if (uri == "slurm" || uri.starts_with("slurm:")) return slurm::openSlurmPool(uri, slurm::realSlurmSystem());
  return openPoolControl(uri, options);
}

}  // namespace poolrun::pool
