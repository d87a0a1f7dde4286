// Launch credentials (launch_credential.hpp): Ed25519 through OpenSSL's EVP interface.

#include "poolrun/common/launch_credential.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/secret.hpp"

namespace poolrun::common {

// Named, not file-local: the keys' structs of the header's classes hold one.
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

namespace {

using nlohmann::json;
constexpr const char* kPrefix = "PRL1.";

// A nonce as poold makes them: lower-case hex digits (32 of them; at most 64 taken).
bool nonceText(const std::string& nonce) {
  return !nonce.empty() && nonce.size() <= 64 &&
         nonce.find_first_not_of("0123456789abcdef") == std::string::npos;
}

Error refused(const std::string& why) {
  return Error(ErrorCode::kBadInput, "launch credential refused: " + why);
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
std::string base64url(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

// nullopt-like: throws `refused` where `text` is no base64url.
std::string unbase64url(std::string text, const std::string& part) {
  for (char& c : text) {
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
    else if (!std::isalnum(static_cast<unsigned char>(c)))
      throw refused("its " + part + " is not base64url");
  }
  if (text.size() % 4 == 1)
    throw refused("its " + part + " is not base64url (a length of " + std::to_string(text.size()) + ")");
  const size_t pad = (4 - text.size() % 4) % 4;
  text.append(pad, '=');
  std::string out(text.size() / 4 * 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) throw refused("its " + part + " is not base64url");
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr) != 1)
    throw Error(ErrorCode::kInternal, "SHA-256 failed (OpenSSL's EVP_Digest)");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) out += {hex[digest[i] >> 4], hex[digest[i] & 15]};
  return out;
}

Pkey readPrivate(const std::string& pem, const std::string& what) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Pkey key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key || EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
    throw Error(ErrorCode::kBadInput, what +
                                          " holds no Ed25519 private key in PEM: remove it and poold makes "
                                          "a new one (credentials signed with the old key are then refused)");
  return key;
}

std::string publicPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key) != 1)
    throw Error(ErrorCode::kInternal, "cannot write the launch key's public half (OpenSSL)");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

json grantJson(const LaunchGrant& g) {
  return {{"lease", g.lease}, {"node", g.node},   {"user", g.user}, {"units", g.units},
          {"exp", g.expires}, {"nonce", g.nonce}, {"kid", g.key_id}};
}

// The grant of a verified payload; refused where a field is missing or out of range.
LaunchGrant grantOf(const std::string& payload) {
  const json doc = json::parse(payload, nullptr, false);
  if (!doc.is_object()) throw refused("its payload is not a JSON object");
  auto text = [&](const char* field, size_t most) {
    auto it = doc.find(field);
    if (it == doc.end() || !it->is_string() || it->get_ref<const std::string&>().empty() ||
        it->get_ref<const std::string&>().size() > most)
      throw refused(std::string("its field '") + field + "' is missing or not a string of at most " +
                    std::to_string(most) + " bytes");
    return it->get<std::string>();
  };
  LaunchGrant g;
  g.lease = text("lease", 128);
  g.node = text("node", 255);
  g.user = text("user", 255);
  g.nonce = text("nonce", 64);
  if (!nonceText(g.nonce)) throw refused("its field 'nonce' is not lower-case hexadecimal digits");
  g.key_id = text("kid", 64);
  auto exp = doc.find("exp");
  if (exp == doc.end() || !exp->is_number_integer())
    throw refused("its field 'exp' is missing or not an integer");
  g.expires = exp->get<int64_t>();
  auto units = doc.find("units");
  if (units == doc.end() || !units->is_array() || units->size() > kMaxLaunchUnits)
    throw refused("its field 'units' is missing or not an array of at most " +
                  std::to_string(kMaxLaunchUnits));
  for (const json& u : *units) {
    if (!u.is_number_unsigned() || u.get<uint64_t>() >= 1u << 20)
      throw refused("a unit of its field 'units' is no index");
    g.units.push_back(u.get<size_t>());
  }
  return g;
}

}  // namespace

std::string launchKeyId(const std::string& publicPem) {
  return sha256Hex(publicPem).substr(0, 16);
}

struct LaunchSigner::Key {
  Pkey pkey;
};

LaunchSigner::LaunchSigner(std::unique_ptr<Key> key) : key_(std::move(key)) {
  key_id_ = launchKeyId(publicKeyPem());
}
LaunchSigner::LaunchSigner(LaunchSigner&&) noexcept = default;
LaunchSigner& LaunchSigner::operator=(LaunchSigner&&) noexcept = default;
LaunchSigner::~LaunchSigner() = default;

LaunchSigner LaunchSigner::fromPem(const std::string& pem, const std::string& what) {
  return LaunchSigner(std::make_unique<Key>(Key{readPrivate(pem, what)}));
}

LaunchSigner LaunchSigner::loadOrCreate(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (in) {
    // The key signs who may start what as whom on every node: a file others may read is refused.
    struct stat st {};
    if (stat(file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
      throw Error(ErrorCode::kBadInput,
                  "launch key file " + file.string() + " may be read by others (mode " + mode +
                      "): chmod 600 it (and remove it for a new key where others read it)");
    }
    std::stringstream text;
    text << in.rdbuf();
    return fromPem(text.str(), "launch key file " + file.string());
  }
  if (errno != ENOENT)
    throw Error(ErrorCode::kIo, "cannot read launch key file " + file.string() + ": " + std::strerror(errno));
  Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) throw Error(ErrorCode::kInternal, "cannot make an Ed25519 key (OpenSSL's EVP_PKEY_Q_keygen)");
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
    throw Error(ErrorCode::kInternal, "cannot write the launch key (OpenSSL)");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);  // before `data` is read
  const std::string pem(data, static_cast<size_t>(size));
  const std::filesystem::path tmp = file.string() + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const bool written =
      fd >= 0 && write(fd, pem.data(), pem.size()) == static_cast<ssize_t>(pem.size()) && fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) close(fd);
  if (!written || rename(tmp.c_str(), file.c_str()) != 0) {
    unlink(tmp.c_str());
    throw Error(ErrorCode::kIo, "cannot write launch key file " + file.string() + ": " +
                                    std::strerror(written ? errno : err) + " (poold --launch-key FILE)");
  }
  return LaunchSigner(std::make_unique<Key>(Key{std::move(key)}));
}

std::string LaunchSigner::publicKeyPem() const {
  return publicPem(key_->pkey.get());
}

std::string LaunchSigner::sign(LaunchGrant grant) const {
  grant.key_id = key_id_;
  if (grant.nonce.empty()) grant.nonce = randomSecret("", 16);
  // A field that is not UTF-8 (never one poold checked) is signed with U+FFFD in its place.
  const std::string signedPart =
      kPrefix + base64url(grantJson(grant).dump(-1, ' ', false, json::error_handler_t::replace));
  std::unique_ptr<EVP_MD_CTX, MdFree> ctx(EVP_MD_CTX_new());
  std::string sig(64, '\0');
  size_t size = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &size,
                     reinterpret_cast<const unsigned char*>(signedPart.data()), signedPart.size()) != 1)
    throw Error(ErrorCode::kInternal, "cannot sign a launch credential (OpenSSL's EVP_DigestSign)");
  sig.resize(size);
  return signedPart + "." + base64url(sig);
}

struct LaunchVerifier::Key {
  Pkey pkey;
};

LaunchVerifier::LaunchVerifier(const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Pkey key(bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key || EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
    throw Error(ErrorCode::kBadInput, "poold's launch key is no Ed25519 public key in PEM (" +
                                          std::to_string(pem.size()) + " bytes)");
  key_ = std::make_unique<Key>(Key{std::move(key)});
  key_id_ = launchKeyId(pem);
}
LaunchVerifier::LaunchVerifier(LaunchVerifier&&) noexcept = default;
LaunchVerifier& LaunchVerifier::operator=(LaunchVerifier&&) noexcept = default;
LaunchVerifier::~LaunchVerifier() = default;

namespace {

Error journalError(const std::filesystem::path& file, const std::string& what) {
  return Error(ErrorCode::kIo, "launch nonces' journal " + file.string() + ": " + what + ": " +
                                   strerror(errno) + " (check the agent's --job-dir)");
}

int openJournal(const std::filesystem::path& file) {
  const int fd = open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw journalError(file, "cannot open it");
  return fd;
}

}  // namespace

SpentNonces::SpentNonces(std::filesystem::path journal, int64_t now) : journal_(std::move(journal)) {
  std::error_code ec;
  std::filesystem::create_directories(journal_.parent_path(), ec);
  const auto status = std::filesystem::symlink_status(journal_, ec);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    errno = EINVAL;
    throw journalError(journal_, "it is not a regular file (move it away)");
  }
  {
    std::ifstream in(journal_);
    for (std::string line; std::getline(in, line);) {
      ++lines_;
      std::istringstream words(line);
      long long expires = 0;
      std::string nonce, rest;
      if (words >> expires >> nonce && !(words >> rest) && nonceText(nonce) && expires > now)
        spent_.emplace(nonce, expires);
    }
  }
  fd_ = openJournal(journal_);
  if (lines_ > spent_.size()) rewrite();
}

SpentNonces::~SpentNonces() {
  if (fd_ >= 0) close(fd_);
}

SpentNonces::SpentNonces(SpentNonces&& other) noexcept
    : spent_(std::move(other.spent_)),
      journal_(std::move(other.journal_)),
      fd_(std::exchange(other.fd_, -1)),
      lines_(other.lines_) {}

SpentNonces& SpentNonces::operator=(SpentNonces&& other) noexcept {
  if (this == &other) return *this;
  if (fd_ >= 0) close(fd_);
  spent_ = std::move(other.spent_);
  journal_ = std::move(other.journal_);
  fd_ = std::exchange(other.fd_, -1);
  lines_ = other.lines_;
  return *this;
}

// The journal written anew with the nonces kept, under a temporary name synced and renamed over it.
void SpentNonces::rewrite() {
  const std::filesystem::path tmp = journal_.string() + ".tmp";
  std::string text;
  for (const auto& [nonce, expires] : spent_) text += std::to_string(expires) + " " + nonce + "\n";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw journalError(tmp, "cannot write it");
  const bool written =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  close(fd);
  if (!written || rename(tmp.c_str(), journal_.c_str()) != 0) {
    unlink(tmp.c_str());
    throw journalError(journal_, "cannot write it anew");
  }
  close(fd_);
  fd_ = openJournal(journal_);
  lines_ = spent_.size();
}

void SpentNonces::spend(const LaunchGrant& grant, int64_t now) {
  for (auto it = spent_.begin(); it != spent_.end();)
    it = it->second <= now ? spent_.erase(it) : std::next(it);
  if (spent_.count(grant.nonce)) throw refused("it was used already (a replay)");
  if (fd_ >= 0) {
    const std::string line = std::to_string(grant.expires) + " " + grant.nonce + "\n";
    if (write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || fdatasync(fd_) != 0)
      throw journalError(journal_,
                         "cannot record the credential's nonce (the launch is refused: its replay "
                         "could not be told after a restart)");
    ++lines_;
  }
  spent_.emplace(grant.nonce, grant.expires);
  if (fd_ >= 0 && lines_ > 2 * spent_.size() + 64) rewrite();
}

LaunchGrant LaunchVerifier::take(const std::string& credential, const std::string& node, int64_t now,
                                 SpentNonces& spent) const {
  LaunchGrant g = check(credential, node, now);
  spent.spend(g, now);
  return g;
}

LaunchGrant LaunchVerifier::check(const std::string& credential, const std::string& node, int64_t now) const {
  if (credential.size() > kMaxLaunchCredentialBytes)
    throw refused("it is " + std::to_string(credential.size()) + " bytes, more than " +
                  std::to_string(kMaxLaunchCredentialBytes));
  if (!credential.starts_with(kPrefix)) throw refused("it does not start with " + std::string(kPrefix));
  const size_t dot = credential.rfind('.');
  if (dot < std::strlen(kPrefix)) throw refused("it has no signature");
  const std::string signedPart = credential.substr(0, dot);
  const std::string sig = unbase64url(credential.substr(dot + 1), "signature");
  const std::string payload = unbase64url(signedPart.substr(std::strlen(kPrefix)), "payload");
  std::unique_ptr<EVP_MD_CTX, MdFree> ctx(EVP_MD_CTX_new());
  const bool good =
      ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(signedPart.data()), signedPart.size()) == 1;
  if (!good) {
    // Which key it claims says whether poold's key changed (the agent then asks for it again).
    const json doc = json::parse(payload, nullptr, false);
    const std::string kid =
        doc.is_object() && doc.contains("kid") && doc["kid"].is_string() ? doc["kid"].get<std::string>() : "";
    if (!kid.empty() && kid != key_id_)
      throw refused("it is signed with key " + printable(kid) + ", not poold's key " + key_id_ +
                    " that this agent holds");
    throw refused("its signature is not poold's");
  }
  LaunchGrant g = grantOf(payload);
  if (g.node != node) throw refused("it is for node " + printable(g.node) + ", not " + node);
  if (g.expires <= now)
    throw refused("it expired " + std::to_string(now - g.expires) + " s ago (ask poold for a new one)");
  return g;
}

}  // namespace poolrun::common
