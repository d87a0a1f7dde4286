// The classic fair-share factor over the account tree (fairshare.hpp).

#include "poolrun/pool/fairshare.hpp"

#include <cmath>
#include <optional>

namespace poolrun::pool {

namespace {

std::string key(std::string_view account, std::string_view user) {
  std::string k(account);
  k += '\0';
  k += user;
  return k;
}

// A node of the tree being computed: an account (user empty) or one of its users.
struct Node {
  size_t account = 0;  // index into Accounts::list()
  std::string user;
  double usage = 0;  // decayed GPU-seconds, an account's with its subtree's
  int shares = 1;
};

}  // namespace

FairShare::FairShare(const Accounts& accounts, const DecayedUsage& usage,
                     const std::vector<std::pair<std::string, std::string>>& waiting) {
  const std::vector<Account>& list = accounts.list();
  // Each account's users: the file's, then the default account's implicit ones.
  std::vector<std::vector<Node>> users(list.size());
  // key(account, user) -> the account's index and the user's in users[account]
  std::unordered_map<std::string, std::pair<size_t, size_t>> userNode;
  for (size_t a = 0; a < list.size(); ++a)
    for (const std::string& u : list[a].users) {
      userNode[key(list[a].name, u)] = {a, users[a].size()};
      users[a].push_back(Node{.account = a, .user = u, .usage = 0, .shares = 1});
    }
  const size_t fallback = accounts.indexOf(accounts.defaultAccount());
  auto implicit = [&](const std::string& account, const std::string& user) -> Node* {
    std::string k = key(account, user);
    if (auto it = userNode.find(k); it != userNode.end()) return &users[it->second.first][it->second.second];
    if (fallback >= list.size() || account != list[fallback].name || !accounts.accountsOf(user).empty())
      return nullptr;
    userNode.emplace(std::move(k), std::pair(fallback, users[fallback].size()));
    users[fallback].push_back(Node{.account = fallback, .user = user, .usage = 0, .shares = 1});
    return &users[fallback].back();
  };
  for (const auto& [who, used] : usage)
    if (Node* n = implicit(who.first, who.second)) n->usage += std::max(0.0, used);
  for (const auto& [account, user] : waiting) implicit(account, user);

  // Usage up the tree: `list` has every account after its parent, so a walk backwards sums
  // each subtree before its parent needs it.
  std::vector<double> accountUsage(list.size(), 0);
  for (size_t a = list.size(); a-- > 0;) {
    for (const Node& u : users[a]) accountUsage[a] += u.usage;
    if (a > 0) accountUsage[list[a].parent] += accountUsage[a];
  }
  const double total = accountUsage[0];
  // Down the tree, depth first, in sshare's order: an account's row, its users' rows, then each
  // sub-account's row with what is under it.
  struct Frame {
    size_t account;
    double norm_shares, effective, siblings;  // siblings: the shares among its children
    int depth;
    size_t next = 0;  // the next sub-account to visit
  };
  auto row = [&](const Frame& parent, int shares, double used, const std::string& account,
                 const std::string& user) -> const FairShareRow& {
    FairShareRow r;
    r.account = account;
    r.user = user;
    r.depth = parent.depth + 1;
    r.raw_shares = shares;
    const double part = parent.siblings > 0 ? shares / parent.siblings : 0.0;
    r.norm_shares = parent.norm_shares * part;
    r.raw_usage = used;
    r.norm_usage = total > 0 ? used / total : 0.0;
    r.effective_usage = r.norm_usage + (parent.effective - r.norm_usage) * part;
    r.factor = r.norm_shares > 0 ? std::exp2(-r.effective_usage / r.norm_shares) : 0.0;
    rows_.push_back(std::move(r));
    return rows_.back();
  };
  auto enter = [&](size_t account, double normShares, double effective, int depth) {
    Frame f{account, normShares, effective, 0, depth};
    for (size_t c : list[account].children) f.siblings += list[c].shares;
    f.siblings += static_cast<double>(users[account].size());
    for (const Node& u : users[account])
      factor_[key(list[account].name, u.user)] = row(f, 1, u.usage, list[account].name, u.user).factor;
    return f;
  };
  std::vector<Frame> stack{enter(0, 1.0, total > 0 ? 1.0 : 0.0, -1)};
  while (!stack.empty()) {
    Frame& f = stack.back();
    const std::vector<size_t>& children = list[f.account].children;
    if (f.next == children.size()) {
      stack.pop_back();
      continue;
    }
    const size_t c = children[f.next++];
    const FairShareRow& r = row(f, list[c].shares, accountUsage[c], list[c].name, "");
    const double normShares = r.norm_shares, effective = r.effective_usage;
    const int depth = r.depth;
    stack.push_back(enter(c, normShares, effective, depth));
  }
}

std::optional<double> FairShare::factor(std::string_view account, std::string_view user) const {
  auto it = factor_.find(key(account, user));
  return it == factor_.end() ? std::nullopt : std::optional<double>(it->second);
}

}  // namespace poolrun::pool
