#include "tokens.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "poolrun/topo/names.hpp"

namespace poolrun::pool {
namespace {

constexpr off_t kMaxTokenFileBytes = off_t{16} << 20;

bool validToken(const std::string& token) {
  if (token.size() < 8 || token.size() > 512) return false;
  for (unsigned char c : token)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

// The file's text: a regular file of bounded size, never a FIFO or a device that would block or
// never end.
std::string readTokenFile(const std::filesystem::path& file, struct stat& st) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(ErrorCode::kNotFound, file.string() + ": cannot open the token file");
  std::string text;
  bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular && st.st_size <= kMaxTokenFileBytes) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      ssize_t n = read(fd, text.data() + got, text.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    text.resize(got);
  }
  close(fd);
  if (!regular) throw badInput(file.string() + ": the token file is not a regular file");
  if (st.st_size > kMaxTokenFileBytes)
    throw badInput(file.string() + ": the token file is " + std::to_string(st.st_size) +
                   " bytes; token files are at most 16 MiB");
  return text;
}

}  // namespace

std::map<std::string, TokenEntry> parseTokenFile(const std::string& text, const std::string& file,
                                                 std::vector<std::string>* warnings) {
  std::map<std::string, TokenEntry> out;
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
      bad("expected `TOKEN OWNER ROLE` (ROLE user or admin)");
      continue;
    }
    if (!validToken(token)) {
      bad("the token of " + topo::printable(owner) + " must be 8 to 512 printable ASCII characters");
      continue;
    }
    if (std::string problem = topo::ownerProblem(owner); !problem.empty()) {
      bad("owner '" + topo::printable(owner) + "': " + problem);
      continue;
    }
    if (role != "user" && role != "admin") {
      bad("unknown role '" + topo::printable(role) + "' (use user or admin)");
      continue;
    }
    if (out.count(token)) {
      bad("token of " + owner + " appears twice");
      continue;
    }
    out[token] = {owner, role == "admin"};
  }
  return out;
}

TokenStore::TokenStore(std::filesystem::path file, Warn warn)
    : file_(std::move(file)), warn_(std::move(warn)) {
  reload(true);
}

void TokenStore::reload(bool initial) {
  struct stat st {};
  if (!initial) {
    if (stat(file_.c_str(), &st) != 0) return;  // gone for now (being replaced): keep what we have
    if (st.st_size == size_ && st.st_ino == ino_ && st.st_mtim.tv_sec == mtime_.tv_sec &&
        st.st_mtim.tv_nsec == mtime_.tv_nsec)
      return;
  }
  std::string text;
  try {
    text = readTokenFile(file_, st);
  } catch (const Error& e) {
    if (initial) throw;
    warn_(std::string("keeping the previous tokens: ") + e.what());
    return;
  }
  std::vector<std::string> warnings;
  tokens_ = parseTokenFile(text, file_.string(), &warnings);
  for (const std::string& w : warnings) warn_(w);
  size_ = st.st_size;
  ino_ = st.st_ino;
  mtime_ = st.st_mtim;
}

std::optional<TokenEntry> TokenStore::find(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  reload(false);
  auto it = tokens_.find(token);
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

}  // namespace poolrun::pool
