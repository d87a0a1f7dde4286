#pragma once

// The account tree and the multi-factor priority (docs/fairshare.md): accounts under a root, each
// with shares of its parent and its users, and the weights of the sum that orders the queue. Read
// from a TOML file (poold --accounts, POOLRUN_ACCOUNTS):
//
//   default_account = "guests"    # optional: charged for users of no account
//
//   [priority]                    # the weights of the queue's order
//   priority = 1000000            # per step of a request's --priority
//   fairshare = 10000             # times the fair-share factor (0 to 1)
//   age = 1000                    # times the age factor (0 to 1: max_age waited, or more)
//   size = 0                      # times the request's part of the pool's GPUs
//   max_age = 604800              # seconds
//
//   [accounts.physics]
//   shares = 40                   # of its parent's (the root's) shares; 1 by default
//   users = ["alice", "bob"]
//
//   [accounts.theory]
//   parent = "physics"
//   shares = 10
//   users = ["alice"]
//
//   [users.alice]
//   default = "theory"            # needed where a user is in more than one account
//
// Every user of an account has one share of it, beside the account's sub-accounts. The fair-share
// factor is computed from the tree and each (account, user)'s decayed usage: fairshare.hpp.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace poolrun::pool {

// Weights of the multi-factor priority. The defaults make a step of --priority outweigh every other
// factor (priorities stay tiers, as without an accounts file), fair share order requests of equal
// priority, and age break what fair share leaves close.
struct PriorityWeights {
  double priority = 1'000'000;
  double fairshare = 10'000;
  double age = 1'000;
  double size = 0;
  std::chrono::seconds max_age{7 * 86'400};
  bool operator==(const PriorityWeights&) const = default;
};

struct Account {
  std::string name;
  size_t parent = 0;  // an index into Accounts::list (the root's own is 0)
  int shares = 1;     // of its parent's, beside its siblings (0: only when nobody else waits)
  std::vector<std::string> users;
  std::vector<size_t> children;  // sub-accounts, in name order
  bool operator==(const Account&) const = default;
};

class Accounts {
 public:
  static constexpr size_t kMaxAccounts = 100'000;
  static constexpr int kMaxShares = 1'000'000;
  static constexpr std::string_view kRoot = "root";

  // The root, then every account after its parent (a walk of the tree from the root, siblings in
  // name order).
  const std::vector<Account>& list() const { return list_; }
  const Account* find(std::string_view name) const;
  size_t indexOf(std::string_view name) const;  // list().size() where none
  const PriorityWeights& weights() const { return weights_; }
  const std::string& defaultAccount() const { return default_account_; }
  bool empty() const { return list_.size() <= 1; }  // no file, or one without accounts

  // The account a request of `user` is charged to: `asked` where the user is in it, else the
  // user's default (its only account, its [users] default, else default_account). Throws
  // PoolError (kForbidden) saying what is wrong and what to do.
  std::string accountFor(const std::string& user, const std::string& asked) const;
  // The accounts `user` is in (in list() order).
  std::vector<std::string> accountsOf(std::string_view user) const;

  bool operator==(const Accounts& o) const {
    return list_ == o.list_ && weights_ == o.weights_ && default_account_ == o.default_account_ &&
           defaults_ == o.defaults_;
  }

 private:
  friend Accounts parseAccounts(std::string_view text, const std::string& file);
  void index();

  std::vector<Account> list_{
      Account{.name = std::string(kRoot), .parent = 0, .shares = 1, .users = {}, .children = {}}};
  PriorityWeights weights_;
  std::string default_account_;
  std::map<std::string, std::string, std::less<>> defaults_;  // [users.U] default
  std::unordered_map<std::string, size_t> by_name_;
  std::unordered_map<std::string, std::vector<size_t>> of_user_;
};

// What is wrong with an account's name ("" where nothing): 1 to 64 bytes of letters, digits, '.',
// '_' and '-'.
std::string accountNameProblem(std::string_view name);

// The accounts of a file's text; throws poolrun::Error (kBadInput) naming FILE:LINE and what is
// wrong (TOML's own errors, an unknown key, a parent that is no account or makes a cycle, shares
// that are not a whole number from 0 to 1,000,000, a user in two accounts without a default, more
// than 100,000 accounts).
Accounts parseAccounts(std::string_view text, const std::string& file);
// Reads and parses an accounts file (a regular file of at most 64 MiB).
Accounts readAccountsFile(const std::filesystem::path& file);
// What changed from `before` to `after`, one line per account ("account physics added: shares 40,
// users alice,bob", "account theory: shares 10 -> 20", "weights: fairshare 10000 -> 5000"), for
// poold's event accounts_changed.
std::vector<std::string> accountChanges(const Accounts& before, const Accounts& after);

}  // namespace poolrun::pool
