#pragma once

// MUNGE credentials (https://dun.github.io/munge/): how a user on a cluster that runs munged is
// known to poold without a token. A client encodes a credential through its node's munged (the
// credential carries its UID and GID, sealed with the cluster's shared key); poold decodes it
// through its own, which refuses one that is replayed, expired or sealed with another key. libmunge
// is opened with dlopen where a credential is first made or read, so that a launch that uses a
// token, or no pool of poold's, does not load it.

#include <sys/types.h>

#include <memory>
#include <string>

namespace poolrun::pool {

inline constexpr const char* kDefaultMungeSocket = "/run/munge/munge.socket.2";

// What a decoded credential says, or why it was refused.
struct MungeIdentity {
  enum class Status {
    kOk,
    kInvalid,   // not sealed with this munged's key (another realm), or damaged
    kExpired,   // older than its TTL (5 minutes): or the clocks of the two nodes differ
    kRewound,   // made in the future: the clocks differ
    kReplayed,  // decoded before: each request needs a new one
    kNoDaemon,  // this side's munged cannot be reached
    kOther,
  };
  Status status = Status::kOther;
  std::string message;  // libmunge's words, where not kOk
  uid_t uid = 0;
  gid_t gid = 0;
  std::string payload;
};

class Munge {
 public:
  // libmunge, or nullptr with `why` saying why it cannot be opened.
  static std::shared_ptr<Munge> open(std::string& why);
  virtual ~Munge() = default;

  // A new credential carrying `payload`, made by the munged at `socket` (empty: the default).
  // Throws poolrun::Error (kIo) naming the socket where munged cannot make one.
  virtual std::string encode(const std::string& payload, const std::string& socket) const = 0;
  // What `credential` says, decoded by the munged at `socket`. Never throws for a bad credential.
  virtual MungeIdentity decode(const std::string& credential, const std::string& socket) const = 0;
};

// The Authorization of a request on a connection whose first request carried a credential: the
// same user (poold remembers a connection's MUNGE user while it is open).
inline constexpr const char* kMungeSameConnection = "MUNGE-CONNECTION";

// What a client's credential for one request carries: the request it was made for, so that one
// seen on the way cannot be spent on another request.
std::string mungePayload(const std::string& method, const std::string& target);

}  // namespace poolrun::pool
