#include "poolrun/common/secret.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "poolrun/common/error.hpp"

namespace poolrun::common {

std::string randomSecret(std::string_view prefix, size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::kIo, std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(prefix);
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

}  // namespace poolrun::common
