// Nodes that join (docs/pool.md, "Nodes that join"): an administrator makes one-time join tokens
// and revokes nodes; a node's agent exchanges a token for the credential it made, once. poold keeps
// the SHA-256 of each (membership.hpp), made here with OpenSSL.

#include <openssl/evp.h>

#include "poolrun/common/names.hpp"
#include "poolrun/common/secret.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/json_read.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {

std::string secretHash(std::string_view secret) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(secret.data(), secret.size(), digest, &size, EVP_sha256(), nullptr) != 1 || size != 32)
    throw Error(ErrorCode::kInternal, "SHA-256 of a secret failed (OpenSSL's EVP_Digest)");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (unsigned int i = 0; i < size; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

namespace {

using nlohmann::json;

// How long a join token lives where its maker does not say.
constexpr std::chrono::seconds kDefaultTokenLife{3600};

json createJoinToken(ServerCore& m, Context& c) {
  const json body = c.req.body.empty() ? json::object() : parseBody(c.req.body);  // the fields refer to it
  const auto f = json_read::clientFields(body, {"expires_s"}, "the join token request");
  const std::chrono::seconds life(
      f.integer<int64_t>("expires_s", 1, Membership::kMaxTokenLife.count(), kDefaultTokenLife.count()));
  const std::string token = common::randomSecret(kJoinTokenPrefix);
  const std::string hash = secretHash(token);
  return m.mutate([&](PoolState& s, TimePoint now) {
    const JoinToken& t = s.addJoinToken(hash, c.who.owner, now, life);
    json fields = {{"token", t.id()}, {"expires", common::rfc3339(t.expires)}};
    fields.update(auditOf(c));
    m.events->record("node_token_created", fields, now);
    return json{{"token", token},
                {"id", t.id()},
                {"expires", common::rfc3339(t.expires)},
                {"expires_s", life.count()}};
  });
}

json listJoinTokens(ServerCore& m, Context&) {
  return m.read([](const PoolState& s) {
    const TimePoint now = std::chrono::system_clock::now();
    json tokens = json::array();
    for (const auto& [hash, t] : s.membership().tokens()) {
      json j = {{"id", t.id()},
                {"created_by", t.created_by},
                {"created", common::rfc3339(t.created)},
                {"expires", common::rfc3339(t.expires)},
                {"state", !t.node.empty()    ? "used"
                          : now >= t.expires ? "expired"
                                             : "unused"}};
      if (!t.node.empty()) {
        j["node"] = t.node;
        j["used"] = common::rfc3339(t.used);
      }
      tokens.push_back(std::move(j));
    }
    json nodes = json::array();
    for (const auto& [node, cr] : s.membership().credentials()) {
      json j = {{"node", node}, {"joined", common::rfc3339(cr.joined)}, {"token", cr.token}};
      if (!cr.revoked_by.empty()) {
        j["revoked_by"] = cr.revoked_by;
        j["revoked"] = common::rfc3339(cr.revoked);
      }
      nodes.push_back(std::move(j));
    }
    return json{{"tokens", std::move(tokens)}, {"nodes", std::move(nodes)}};
  });
}

// No token of the pool's goes with a join: the join token in the body is the authority, so the
// route is open to anyone and checks the replica's lead itself.
json joinNode(ServerCore& m, Context& c) {
  if (m.opt.serving && !m.opt.serving())
    throw HttpError("not_leader",
                    "this poold replica no longer leads the pool (its etcd lease lapsed); retry on another");
  const std::string& node = c.params[0];
  try {
    common::checkNodeName(node);
  } catch (const Error& e) {
    throw badRequest(e.what());
  }
  const json body = parseBody(c.req.body);  // the fields refer to it
  const auto f = json_read::clientFields(body, {"token", "credential"}, "the join request");
  const std::string token = f.string("token");
  const std::string credential = f.string("credential");
  if (!isSecretOf(kJoinTokenPrefix, token))
    throw HttpError("forbidden", "that is not a join token (" + std::string(kJoinTokenPrefix) +
                                     " and 64 hex digits, as `poolctl node-token create` prints it)");
  if (!isSecretOf(kNodeCredentialPrefix, credential))
    throw badRequest("the credential must be " + std::string(kNodeCredentialPrefix) +
                     " and 64 hex digits (poold-agent makes it)");
  if (m.tokens->namesNode(node))
    throw HttpError("forbidden", "node " + node +
                                     " has a token line in poold's token file: it needs no join. Remove "
                                     "that line first to join it, or give this node another name");
  const std::string tokenHash = secretHash(token);
  const std::string credentialHash = secretHash(credential);
  return m.mutate([&](PoolState& s, TimePoint now) {
    const bool first = s.joinNode(tokenHash, node, credentialHash, now);
    if (first)
      m.events->record(
          "node_joined",
          {{"node", node}, {"token", s.membership().credentialFor(node)->token}, {"from", c.req.peer}}, now);
    return json{{"joined", node}, {"again", !first}};
  });
}

json revokeNode(ServerCore& m, Context& c) {
  takesNoFields(c.req.body);
  const std::string& node = c.params[0];
  return m.mutate([&](PoolState& s, TimePoint now) {
    const bool was =
        s.membership().credentialFor(node) && s.membership().credentialFor(node)->revoked_by.empty();
    const NodeCredential& cr = s.revokeNode(node, c.who.owner, now);
    if (was) {
      json fields = {{"node", node}};
      fields.update(auditOf(c));
      m.events->record("node_revoked", fields, now);
    }
    return json{{"node", node}, {"revoked_by", cr.revoked_by}, {"revoked", common::rfc3339(cr.revoked)}};
  });
}

}  // namespace

std::vector<RouteSpec> memberRoutes() {
  return {
      {"POST", "/v1/node-tokens", Role::kAdmin, StateLock::kChange, "make join tokens", createJoinToken},
      {"GET", "/v1/node-tokens", Role::kAdmin, StateLock::kRead, "list join tokens", listJoinTokens},
      {"POST", "/v1/nodes/*/join", Role::kAnyone, StateLock::kChange, "", joinNode},
      {"DELETE", "/v1/nodes/*/credential", Role::kAdmin, StateLock::kChange, "revoke nodes", revokeNode},
  };
}

}  // namespace poolrun::pool
