#include "poolrun/pool/tokens.hpp"
#include "poolrun/pool/client.hpp"

#include <sys/stat.h>

#include <sstream>

#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"

namespace poolrun::pool {
namespace {

// poold's token file holds a line per user and, with node agents, per node: 16 MiB is some 200,000
// tokens (a client's token file, one token, is read with common::kTokenFileLimit).
constexpr size_t kPooldTokenFileLimit = size_t{16} << 20;

}  // namespace

std::map<std::string, Caller> parseTokenFile(const std::string& text, const std::string& file,
                                             std::vector<std::string>* warnings) {
  std::map<std::string, Caller> out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  auto bad = [&](const std::string& why) {
    std::string message = file + ":" + std::to_string(number) + ": " + why;
    if (warnings == nullptr) throw badInput(message);
    warnings->push_back(message + "; line skipped");
  };
  while (std::getline(in, line)) {
    ++number;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string token, owner, role, extra;
    if (!(words >> token)) continue;
    if (!(words >> owner >> role) || (words >> extra)) {
      bad("expected `TOKEN OWNER ROLE` (ROLE user, admin or node)");
      continue;
    }
    if (!validToken(token)) {
      bad("the token of " + common::printable(owner) + " must be 8 to 512 printable ASCII characters");
      continue;
    }
    if (role != "user" && role != "admin" && role != "node") {
      bad("unknown role '" + common::printable(role) + "' (use user, admin or node)");
      continue;
    }
    std::string problem = role == "node" ? common::nodeNameProblem(owner) : common::ownerProblem(owner);
    if (!problem.empty()) {
      bad((role == "node" ? "node '" : "owner '") + common::printable(owner) + "': " + problem);
      continue;
    }
    if (out.count(token)) {
      bad("token of " + owner + " appears twice");
      continue;
    }
    out[token] = {owner, role == "admin", role == "node"};
  }
  return out;
}

TokenStore::TokenStore(std::filesystem::path file, Warn warn)
    : file_(std::move(file)), warn_(std::move(warn)) {
  reload(true);
}

void TokenStore::reload(bool initial) {
  std::optional<std::string> text;
  std::string readable;  // a warning where others may read the file
  if (initial) {
    common::FileIdentity identity;
    text = common::readSecretFile(file_, kPooldTokenFileLimit, "poold's token files", &identity, &readable);
    watch_ = common::FileWatch(identity);
  } else {
    // Looked at once per kLookEvery, not at every request (a stat each: 2,500 heartbeats a second).
    const auto now = std::chrono::steady_clock::now();
    if (now - looked_ < kLookEvery) return;
    looked_ = now;
    try {
      text = watch_.readIfChanged(file_, [this, &readable] {
        return common::readSecretFile(file_, kPooldTokenFileLimit, "poold's token files", nullptr, &readable);
      });
    } catch (const Error& e) {
      warn_(std::string("keeping the previous tokens: ") + e.what());
      return;
    }
    if (!text) return;  // unchanged, being written, or gone for now: keep what we have
  }
  // Said once for as long as the file stays readable by others, not at every change.
  if (!readable.empty() && !warned_readable_) warn_(readable);
  warned_readable_ = !readable.empty();
  std::vector<std::string> warnings;
  tokens_ = parseTokenFile(*text, file_.string(), &warnings);
  for (const std::string& w : warnings) warn_(w);
}

std::optional<Caller> TokenStore::find(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  reload(false);
  auto it = tokens_.find(token);
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

bool TokenStore::namesNode(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  reload(false);
  for (const auto& [token, who] : tokens_)
    if (who.node && who.owner == node) return true;
  return false;
}

}  // namespace poolrun::pool
