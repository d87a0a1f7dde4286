#include "poolrun/pool/munge_users.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"

namespace poolrun::pool {
namespace {

constexpr std::chrono::seconds kCacheFor{60};

std::optional<gid_t> groupId(const std::string& name) {
  std::vector<char> buf(16 * 1024);
  group g{};
  group* found = nullptr;
  if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || found == nullptr)
    return std::nullopt;
  return g.gr_gid;
}

}  // namespace

MungeUsers::MungeUsers(std::shared_ptr<Munge> munge, std::string socket, std::string admin_group,
                       std::chrono::milliseconds connection_memory, Clock now)
    : munge_(std::move(munge)),
      socket_(std::move(socket)),
      admin_group_(std::move(admin_group)),
      connection_memory_(connection_memory),
      now_(std::move(now)) {
  if (!munge_) throw badInput("--munge: libmunge is not there");
  if (!admin_group_.empty() && !groupId(admin_group_))
    throw badInput("--admin-group " + common::printable(admin_group_) +
                   ": no such group in this node's group database (getent group " +
                   common::printable(admin_group_) + "); create it (groupadd) or name another");
}

std::optional<MungeUsers::User> MungeUsers::user(uid_t uid, gid_t gid) {
  const auto now = now_();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(uid);
    if (it != cache_.end() && it->second.until > now) return it->second.user;
  }
  std::optional<User> out;
  std::vector<char> buf(16 * 1024);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    out = User{pw.pw_name, false};
    if (const std::optional<gid_t> admins = admin_group_.empty() ? std::nullopt : groupId(admin_group_)) {
      int n = 64;
      std::vector<gid_t> groups(static_cast<size_t>(n));
      if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) {
        groups.resize(static_cast<size_t>(n));
        getgrouplist(pw.pw_name, gid, groups.data(), &n);
      }
      groups.resize(static_cast<size_t>(std::max(n, 0)));
      for (gid_t g : groups) out->admin = out->admin || g == *admins;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  cache_[uid] = {out, now + kCacheFor};
  return out;
}

void MungeUsers::remember(uint64_t connection, const Caller& who) {
  if (connection == 0) return;
  const auto now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  // Connections that closed are forgotten at their time, in passing: at most one entry per open
  // connection (poold --max-connections) and those closed within connection_memory.
  if (connections_.size() >= 4096)
    std::erase_if(connections_, [&](const auto& entry) { return entry.second.until <= now; });
  connections_[connection] = {who, now + connection_memory_};
}

std::optional<Caller> MungeUsers::ofConnection(uint64_t connection) {
  const auto now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(connection);
  if (connection == 0 || it == connections_.end() || it->second.until <= now) return std::nullopt;
  it->second.until = now + connection_memory_;  // a connection in use stays its user's
  return it->second.who;
}

std::variant<Caller, MungeRefusal> MungeUsers::identify(const std::string& credential,
                                                        const std::string& method, const std::string& target,
                                                        uint64_t connection) {
  // A credential is base64 text of a few hundred bytes: anything else is no credential, and never
  // reaches munged.
  if (credential.empty() || credential.size() > 4096 ||
      credential.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=:") !=
          std::string::npos)
    return MungeRefusal{"unauthorized", "the MUNGE credential is malformed (not a credential munge makes)"};
  const MungeIdentity id = munge_->decode(credential, socket_);
  using S = MungeIdentity::Status;
  switch (id.status) {
    case S::kOk:
      break;
    case S::kReplayed:
      return MungeRefusal{"unauthorized",
                          "the MUNGE credential was used before (replayed): each request needs a new one"};
    case S::kExpired:
      return MungeRefusal{
          "unauthorized",
          "the MUNGE credential has expired: it was made more than its TTL ago, or this node's "
          "clock and poold's differ (check NTP)"};
    case S::kRewound:
      return MungeRefusal{
          "unauthorized",
          "the MUNGE credential was made in the future: this node's clock and poold's differ (check NTP)"};
    case S::kInvalid:
      return MungeRefusal{
          "unauthorized",
          "poold's munged cannot read the MUNGE credential (" + id.message +
              "): it was made with another key; this node and poold's must share /etc/munge/munge.key"};
    case S::kNoDaemon:
      return MungeRefusal{"error", "poold cannot reach its munged (" + id.message +
                                       "): an administrator must start munged on poold's node"};
    case S::kOther:
      return MungeRefusal{"unauthorized", "the MUNGE credential was refused: " + id.message};
  }
  if (id.payload != mungePayload(method, target))
    return MungeRefusal{"unauthorized", "the MUNGE credential was made for another request ('" +
                                            common::printable(id.payload.substr(0, 200)) + "'), not for " +
                                            method + " " + common::printable(target.substr(0, 200))};
  const std::optional<User> u = user(id.uid, id.gid);
  if (!u)
    return MungeRefusal{"unauthorized",
                        "uid " + std::to_string(id.uid) +
                            " (of the MUNGE credential) has no name in poold's password database "
                            "(getent passwd " +
                            std::to_string(id.uid) + " on poold's node): add the user there"};
  Caller who;
  who.owner = u->name;
  who.admin = u->admin;
  who.via = "munge";
  remember(connection, who);
  return who;
}

}  // namespace poolrun::pool
