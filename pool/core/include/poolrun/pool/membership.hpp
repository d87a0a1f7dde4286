#pragma once

// Nodes that join (docs/pool.md, "Nodes that join"): the one-time join tokens an administrator
// makes, and the node credentials they are exchanged for. Neither is kept as it is: poold keeps the
// SHA-256 of each (hex), so that the state file, etcd and their backups hold nothing that would let
// a reader pass for a node. Part of PoolState: stored, replicated and restored with it.

#include <chrono>
#include <map>
#include <string>
#include <unordered_map>

#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

struct Dirty;  // state.hpp

struct JoinToken {
  std::string hash;  // the token's SHA-256 (hex): its key
  std::string created_by;
  TimePoint created{};
  TimePoint expires{};
  // Once used: the node that joined with it and the hash of the credential it was exchanged for
  // (the same join again, its reply lost, is answered again; any other is refused).
  std::string node;
  std::string credential;
  TimePoint used{};
  // What `poolctl node-token list` shows of it: never the token, which only its maker saw.
  std::string id() const { return hash.substr(0, 12); }
  bool operator==(const JoinToken&) const = default;
};

struct NodeCredential {
  std::string node;   // its key
  std::string hash;   // the credential's SHA-256 (hex)
  std::string token;  // the id of the join token it was exchanged for
  TimePoint joined{};
  std::string revoked_by;  // empty while it is good
  TimePoint revoked{};
  bool operator==(const NodeCredential&) const = default;
};

class Membership {
 public:
  // Join tokens kept at most (unused ones, and used or expired ones until kTokenMemory past their
  // expiry): an administrator's script gone wrong cannot grow the state without bound.
  static constexpr size_t kMaxJoinTokens = 10'000;
  static constexpr std::chrono::hours kTokenMemory{24};
  static constexpr std::chrono::seconds kMaxTokenLife{30 * 86'400};

  // A new join token, `life` long (1 s to kMaxTokenLife). Drops tokens past kTokenMemory first;
  // throws kBadInput for a life out of range or with kMaxJoinTokens kept, kInternal for a hash
  // already known (the token was not random).
  const JoinToken& addToken(const std::string& hash, const std::string& created_by, TimePoint now,
                            std::chrono::seconds life, Dirty& dirty);

  // Exchanges join token `tokenHash` for `node`'s credential `credentialHash`. True for a new join;
  // false for the same join again (same token, node and credential: its reply was lost). Throws
  // PoolError kForbidden, saying what to do, for a token that is not known, has expired, or was
  // used by another node or credential, and for a node that has a credential not revoked.
  bool join(const std::string& tokenHash, const std::string& node, const std::string& credentialHash,
            TimePoint now, Dirty& dirty);

  // Revokes `node`'s credential: its next request is refused. Throws kNotFound for a node that
  // never joined; a second revocation changes nothing.
  const NodeCredential& revoke(const std::string& node, const std::string& by, TimePoint now, Dirty& dirty);

  // The credential of hash `hash`, revoked or not; nullptr where none.
  const NodeCredential* credentialOf(const std::string& hash) const;
  // `node`'s credential, revoked or not; nullptr where it never joined.
  const NodeCredential* credentialFor(const std::string& node) const;

  const std::map<std::string, JoinToken>& tokens() const { return tokens_; }
  const std::map<std::string, NodeCredential>& credentials() const { return credentials_; }

  // Persistence (stores); load throws kBadInput for a record that is not whole.
  void loadToken(JoinToken token);
  void loadCredential(NodeCredential credential);
  void clear();

 private:
  void forgetOld(TimePoint now, Dirty& dirty);

  std::map<std::string, JoinToken> tokens_;               // by hash
  std::map<std::string, NodeCredential> credentials_;     // by node
  std::unordered_map<std::string, std::string> node_of_;  // credential hash -> node
};

}  // namespace poolrun::pool
