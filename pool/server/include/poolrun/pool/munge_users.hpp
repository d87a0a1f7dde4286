#pragma once

// poold's side of MUNGE (munge.hpp): a request whose Authorization is `MUNGE CREDENTIAL` is its
// credential's user, named by the password database of poold's node; an administrator where that
// user is a member of the group poold is told (--admin-group). Each credential is good for the one
// request it was made for, once.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "poolrun/pool/munge.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

// Why a credential was refused: `reason` is a row of the failure table ("unauthorized", or "error"
// where poold's own munged cannot be reached).
struct MungeRefusal {
  std::string reason;
  std::string message;
};

class MungeUsers {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `admin_group` empty: no MUNGE user is an administrator. A connection's user is remembered for
  // `connection_memory` after its last request (poold: its idle timeout and a minute, past which it
  // closes the connection). Throws poolrun::Error (kBadInput) where libmunge cannot be opened or the
  // group does not exist.
  MungeUsers(
      std::shared_ptr<Munge> munge, std::string socket, std::string admin_group,
      std::chrono::milliseconds connection_memory = std::chrono::minutes(10),
      Clock now = [] { return std::chrono::steady_clock::now(); });

  // The caller `credential` (the header's value after "MUNGE ") names, made for `method` `target`;
  // or the refusal, naming what was wrong and what to do.
  // `connection` (HttpRequest::connection, 0: none) is remembered as this caller's.
  std::variant<Caller, MungeRefusal> identify(const std::string& credential, const std::string& method,
                                              const std::string& target, uint64_t connection = 0);

  // The user and administrator status of `uid` as the password and group databases say now (cached
  // for a minute); nullopt for a UID with no name.
  struct User {
    std::string name;
    bool admin = false;
  };
  std::optional<User> user(uid_t uid, gid_t gid);

  // A connection's later requests (kMungeSameConnection): the caller its first request's credential
  // named, remembered again for connection_memory from now; nullopt where it sent none, or was
  // not used for longer than that (the client then opens a new connection).
  std::optional<Caller> ofConnection(uint64_t connection);

 private:
  std::shared_ptr<Munge> munge_;
  std::string socket_, admin_group_;
  std::chrono::milliseconds connection_memory_;
  Clock now_;
  std::mutex mu_;
  struct Cached {
    std::optional<User> user;
    std::chrono::steady_clock::time_point until;
  };
  std::map<uid_t, Cached> cache_;
  struct Remembered {
    Caller who;
    std::chrono::steady_clock::time_point until;
  };
  std::map<uint64_t, Remembered> connections_;
  void remember(uint64_t connection, const Caller& who);
};

}  // namespace poolrun::pool
