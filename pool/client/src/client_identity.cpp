// Who a client is: its user name, and its token file (--token-file).

#include <errno.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>

#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/client.hpp"

namespace poolrun::pool {

std::string currentUser() {
  if (const char* u = std::getenv("USER"); u && *u) return u;
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_name;
  return "uid" + std::to_string(getuid());
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
  std::istringstream in(
      common::readSecretFile(file, common::kTokenFileLimit, "token files", nullptr, &readable));
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

}  // namespace poolrun::pool
