#pragma once

// Fair share by decayed usage (docs/fairshare.md): Slurm's classic fair-share factor over the
// account tree (https://slurm.schedmd.com/classic_fair_share.html), from each (account, user)'s
// allocated GPU-seconds decayed with a half-life (the usage ledger keeps them: usage.hpp).
//
//   S  normalised shares: S_user = (s_user / s_siblings) x (s_account / s_account's siblings) x ...
//      down from the root, where a node's siblings are its parent's sub-accounts and users (each
//      user one share)
//   U  normalised usage: the node's decayed usage (an account's: its subtree's) over the root's
//   UE effective usage: UE = U + (UE_parent - U) x s / s_siblings, the root's UE its U (1, or 0
//      where nobody has used anything)
//   F  = 2^(-UE / S): 1 unused, 0.5 used as much as its shares, towards 0 beyond; 0 with no shares

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "poolrun/pool/accounts.hpp"
#include "poolrun/pool/usage.hpp"

namespace poolrun::pool {

// One line of `poolctl fairshare` (sshare's columns): an account, or a user of one.
struct FairShareRow {
  std::string account;  // the account, or the account a user's row charges
  std::string user;     // "" for an account's row
  int depth = 0;        // the root's children 0
  int raw_shares = 0;
  double norm_shares = 0, raw_usage = 0, norm_usage = 0, effective_usage = 0, factor = 0;
  bool operator==(const FairShareRow&) const = default;
};

// What `poolctl fairshare` shows: the tree's rows as of now, and what orders the queue.
struct FairShareReport {
  bool accounts = false;  // the pool has an accounts file
  std::chrono::seconds half_life{};
  std::string default_account;
  PriorityWeights weights;
  std::vector<FairShareRow> rows;
};

class FairShare {
 public:
  FairShare() = default;
  // `usage` may name users of no account (charged to the default account: they are its users too)
  // and accounts or memberships the file no longer has (not counted). `waiting`: more users of
  // the default account, with no usage yet (their requests wait).
  FairShare(const Accounts& accounts, const DecayedUsage& usage,
            const std::vector<std::pair<std::string, std::string>>& waiting = {});
  // The tree depth first, as sshare shows it: each account, then its users, then its sub-accounts.
  // The root is left out (its usage is every other's sum).
  const std::vector<FairShareRow>& rows() const { return rows_; }
  // A user's factor in an account; nullopt where the user is not in it.
  std::optional<double> factor(std::string_view account, std::string_view user) const;

 private:
  std::vector<FairShareRow> rows_;
  std::unordered_map<std::string, double> factor_;  // "account\0user"
};

}  // namespace poolrun::pool
