#pragma once

// Secrets poolrun makes (join tokens, node credentials): random bytes from the kernel's generator
// (getrandom(2)), never from a generator of our own.

#include <cstddef>
#include <string>
#include <string_view>

namespace poolrun::common {

// `prefix` and `bytes` random bytes in lower-case hex. Throws kIo where the kernel gives none.
std::string randomSecret(std::string_view prefix, size_t bytes = 32);

}  // namespace poolrun::common
