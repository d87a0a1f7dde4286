#include "poolrun/pool/membership.hpp"

#include "poolrun/common/names.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {
namespace {

// What an administrator does next, said with every refused join.
constexpr const char* kMakeAnother = "; make another with `poolctl node-token create`";

PoolError refused(const std::string& message) {
  return PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput, message);
}

bool isHash(const std::string& h) {
  return h.size() == 64 && h.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

void Membership::forgetOld(TimePoint now, Dirty& dirty) {
  for (auto it = tokens_.begin(); it != tokens_.end();) {
    if (it->second.expires + kTokenMemory < now) {
      dirty.join_tokens.insert(it->first);
      it = tokens_.erase(it);
    } else {
      ++it;
    }
  }
}

const JoinToken& Membership::addToken(const std::string& hash, const std::string& created_by, TimePoint now,
                                      std::chrono::seconds life, Dirty& dirty) {
  if (life < std::chrono::seconds(1) || life > kMaxTokenLife)
    throw badInput("a join token lives 1 s to " + std::to_string(kMaxTokenLife.count() / 86'400) +
                   " days, not " + std::to_string(life.count()) + " s");
  if (!isHash(hash)) throw Error(ErrorCode::kInternal, "a join token's hash must be 64 hex digits");
  forgetOld(now, dirty);
  if (tokens_.size() >= kMaxJoinTokens)
    throw badInput("the pool keeps " + std::to_string(kMaxJoinTokens) +
                   " join tokens already (each until a day past its expiry): make fewer, with shorter "
                   "--expires, or wait for old ones to be forgotten");
  if (tokens_.count(hash)) throw Error(ErrorCode::kInternal, "a new join token's hash is known already");
  JoinToken t;
  t.hash = hash;
  t.created_by = created_by;
  t.created = now;
  t.expires = now + life;
  dirty.join_tokens.insert(hash);
  return tokens_[hash] = std::move(t);
}

bool Membership::join(const std::string& tokenHash, const std::string& node,
                      const std::string& credentialHash, TimePoint now, Dirty& dirty) {
  common::checkNodeName(node);
  if (!isHash(credentialHash)) throw Error(ErrorCode::kInternal, "a credential's hash must be 64 hex digits");
  auto it = tokens_.find(tokenHash);
  if (it == tokens_.end())
    throw refused(std::string("the join token is not one this pool made (mistyped, made by another pool, or "
                              "forgotten a day after it expired)") +
                  kMakeAnother);
  JoinToken& t = it->second;
  if (!t.node.empty()) {
    if (t.node == node && t.credential == credentialHash) {
      // The same join again: its reply was lost. Good while the node's credential still is.
      const NodeCredential* c = credentialFor(node);
      if (c != nullptr && c->hash == credentialHash && c->revoked_by.empty()) return false;
    }
    throw refused("join token " + t.id() + " was used already, by node " + t.node + " at " +
                  common::rfc3339(t.used) + " (a join token joins one node, once)" + kMakeAnother);
  }
  if (now >= t.expires)
    throw refused("join token " + t.id() + " expired at " + common::rfc3339(t.expires) + " (made by " +
                  t.created_by + ")" + kMakeAnother + " (--expires DURATION for longer)");
  if (const NodeCredential* c = credentialFor(node); c != nullptr && c->revoked_by.empty())
    throw refused("node " + node + " joined already, at " + common::rfc3339(c->joined) +
                  ": a node joins once. To join it again (reinstalled, its credential lost), revoke it "
                  "first: `poolctl node-token revoke " +
                  node + "`; or give this one another name (poold-agent --node NAME)");
  if (node_of_.count(credentialHash))
    throw refused(
        "this credential is another node's already: let poold-agent make a new one (remove its "
        "--token-file)");
  if (const NodeCredential* old = credentialFor(node)) node_of_.erase(old->hash);
  t.node = node;
  t.credential = credentialHash;
  t.used = now;
  NodeCredential c;
  c.node = node;
  c.hash = credentialHash;
  c.token = t.id();
  c.joined = now;
  credentials_[node] = c;
  node_of_[credentialHash] = node;
  dirty.join_tokens.insert(tokenHash);
  dirty.credentials.insert(node);
  return true;
}

const NodeCredential& Membership::revoke(const std::string& node, const std::string& by, TimePoint now,
                                         Dirty& dirty) {
  auto it = credentials_.find(node);
  if (it == credentials_.end())
    throw Error(ErrorCode::kNotFound, "node " + common::printable(node) +
                                          " never joined with a join token (a node whose token is a line "
                                          "of poold's token file is cut off by removing that line)");
  if (it->second.revoked_by.empty()) {
    it->second.revoked_by = by;
    it->second.revoked = now;
    dirty.credentials.insert(node);
  }
  return it->second;
}

const NodeCredential* Membership::credentialOf(const std::string& hash) const {
  auto it = node_of_.find(hash);
  return it == node_of_.end() ? nullptr : credentialFor(it->second);
}

const NodeCredential* Membership::credentialFor(const std::string& node) const {
  auto it = credentials_.find(node);
  return it == credentials_.end() ? nullptr : &it->second;
}

void Membership::loadToken(JoinToken token) {
  if (!isHash(token.hash)) throw badInput("a join token's hash must be 64 hex digits");
  if (!token.node.empty()) common::checkNodeName(token.node);
  tokens_[token.hash] = std::move(token);
}

void Membership::loadCredential(NodeCredential credential) {
  common::checkNodeName(credential.node);
  if (!isHash(credential.hash))
    throw badInput("node " + credential.node + ": its credential's hash must be 64 hex digits");
  if (auto other = node_of_.find(credential.hash);
      other != node_of_.end() && other->second != credential.node)
    throw badInput("nodes " + other->second + " and " + credential.node + " have the same credential");
  if (const NodeCredential* old = credentialFor(credential.node)) node_of_.erase(old->hash);
  node_of_[credential.hash] = credential.node;
  credentials_[credential.node] = std::move(credential);
}

void Membership::clear() {
  tokens_.clear();
  credentials_.clear();
  node_of_.clear();
}

}  // namespace poolrun::pool
