// libFuzzer target: launch credentials (poolrun/common/launch_credential.hpp) as an agent takes
// them from a hostile client: whatever the bytes, take() returns a grant or throws poolrun::Error;
// and a grant made of the input's bytes, signed, is taken back whole (or refused, never garbled).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "poolrun/common/error.hpp"
#include "poolrun/common/launch_credential.hpp"

namespace {

using poolrun::common::LaunchGrant;
using poolrun::common::LaunchSigner;
using poolrun::common::LaunchVerifier;

constexpr int64_t kNow = 1'800'000'000;

LaunchSigner& signer() {
  static LaunchSigner s = [] {
    const std::filesystem::path file =
        std::filesystem::temp_directory_path() / ("fuzz-launch-key-" + std::to_string(getpid()) + ".pem");
    LaunchSigner made = LaunchSigner::loadOrCreate(file);
    std::filesystem::remove(file);
    return made;
  }();
  return s;
}

bool utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static LaunchVerifier verifier(signer().publicKeyPem());
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    verifier.take(text, "n02", kNow);
  } catch (const poolrun::Error&) {
  }
  LaunchGrant g;
  g.lease = text.substr(0, 40);
  g.node = "n02";
  g.user = text.size() > 40 ? text.substr(40, 40) : "u";
  g.expires = kNow + 60;
  for (size_t i = 80; i < size && g.units.size() < 8; ++i) g.units.push_back(data[i]);
  try {
    const LaunchGrant back = verifier.take(signer().sign(g), "n02", kNow);
    // A field that is not UTF-8 is signed with U+FFFD in its place; any other comes back as it was.
    if ((back.lease != g.lease && utf8(g.lease)) || (back.user != g.user && utf8(g.user)) ||
        back.units != g.units)
      __builtin_trap();
  } catch (const poolrun::Error&) {
  }
  return 0;
}
