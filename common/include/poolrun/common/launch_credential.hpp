#pragma once

// Launch credentials: what lets a node's agent start a job's daemon there (docs/launch.md). poold
// signs one per node of a lease with its Ed25519 key (OpenSSL's, never our own); the agent checks
// it with poold's public key, with no call to poold: the signature, the node, the expiry, and that
// it is used once.
//
//   PRL1.<base64url of the grant's JSON>.<base64url of the signature over "PRL1.<payload>">

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace poolrun::common {

struct LaunchGrant {
  std::string lease;          // the lease's id
  std::string node;           // the node whose agent may start it
  std::string user;           // the lease's owner: the account the daemon runs as
  std::vector<size_t> units;  // the lease's units on that node (GPU index; MIG unit gpus + k)
  int64_t expires = 0;        // Unix seconds
  std::string nonce;          // 32 hex digits, unique per credential (a replay is refused)
  std::string key_id;         // the signing key's id (16 hex digits): LaunchSigner::keyId
};

inline constexpr size_t kMaxLaunchCredentialBytes = 16384;
inline constexpr size_t kMaxLaunchUnits = 1024;

// poold's side. Throws poolrun::Error naming the file and what to do.
class LaunchSigner {
 public:
  // The Ed25519 private key of PEM file `file`; where there is none, one is made and written there
  // (mode 0600, through a temporary file and a rename).
  static LaunchSigner loadOrCreate(const std::filesystem::path& file);
  // A key read from PEM text (a test's, or one kept elsewhere).
  static LaunchSigner fromPem(const std::string& pem, const std::string& what);
  LaunchSigner(LaunchSigner&&) noexcept;
  LaunchSigner& operator=(LaunchSigner&&) noexcept;
  ~LaunchSigner();

  // `grant` signed, its key_id set to this key's and, where empty, a fresh nonce.
  std::string sign(LaunchGrant grant) const;
  std::string publicKeyPem() const;
  std::string keyId() const { return key_id_; }

 private:
  struct Key;
  explicit LaunchSigner(std::unique_ptr<Key> key);
  std::unique_ptr<Key> key_;
  std::string key_id_;
};

// The nonces of the credentials an agent took, each until its credential expires: a second use is
// a replay. Kept apart from the key, so that taking poold's key again forgets none. Not thread-safe.
class SpentNonces {
 public:
  // In memory alone: an agent restarted forgets them.
  SpentNonces() = default;
  // Kept in `journal` too, so that an agent restarted within a credential's life still refuses its
  // replay: the journal's nonces not expired at `now` are read back (a line that is not
  // "EXPIRY NONCE" is skipped), and each nonce spent is appended and synced before spend() returns;
  // the journal is written anew, without the expired, once most of its lines are. Throws
  // poolrun::Error (kIo) naming the file where it cannot be opened or made.
  SpentNonces(std::filesystem::path journal, int64_t now);
  ~SpentNonces();
  SpentNonces(SpentNonces&& other) noexcept;
  SpentNonces& operator=(SpentNonces&& other) noexcept;

  // Throws poolrun::Error: kBadInput where `grant`'s nonce was spent already (a replay); kIo where it
  // cannot be written to the journal (the launch is then refused: its replay could not be told
  // after a restart). Spends it.
  void spend(const LaunchGrant& grant, int64_t now);
  size_t size() const { return spent_.size(); }

 private:
  void rewrite();
  std::map<std::string, int64_t> spent_;  // nonce -> expiry
  std::filesystem::path journal_;         // empty: none
  int fd_ = -1;                           // the journal, open for appending
  size_t lines_ = 0;                      // in the journal
};

// The agent's side: checks credentials against one public key. Not thread-safe: one caller at a time.
class LaunchVerifier {
 public:
  // Throws kBadInput where `pem` is no Ed25519 public key.
  explicit LaunchVerifier(const std::string& pem);
  LaunchVerifier(LaunchVerifier&&) noexcept;
  LaunchVerifier& operator=(LaunchVerifier&&) noexcept;
  ~LaunchVerifier();

  // The grant of `credential` for `node` at Unix time `now`. Throws poolrun::Error (kBadInput)
  // saying why it is refused: malformed, another key, a bad signature, another node, expired.
  LaunchGrant check(const std::string& credential, const std::string& node, int64_t now) const;
  // check(), then its nonce spent in `spent` (a replay refused).
  LaunchGrant take(const std::string& credential, const std::string& node, int64_t now,
                   SpentNonces& spent) const;
  // take() with nonces of this verifier's own.
  LaunchGrant take(const std::string& credential, const std::string& node, int64_t now) {
    return take(credential, node, now, spent_);
  }
  std::string keyId() const { return key_id_; }

 private:
  struct Key;
  std::unique_ptr<Key> key_;
  std::string key_id_;
  SpentNonces spent_;
};

// The 16-hex-digit id of a public key (the start of the SHA-256 of its PEM text).
std::string launchKeyId(const std::string& publicPem);

}  // namespace poolrun::common
