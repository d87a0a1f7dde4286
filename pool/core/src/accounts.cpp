// The accounts file (accounts.hpp): the tree, its users and the priority's weights, checked whole
// before anything uses them.

#include "poolrun/pool/accounts.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

namespace {

constexpr size_t kAccountsFileLimit = size_t{64} << 20;  // 100,000 accounts of 20 users: about 40 MiB
constexpr size_t kMaxAccountName = 64;
constexpr size_t kMaxMemberships = 1'000'000;
constexpr double kMaxWeight = 1e12;

// One [accounts.NAME] table as read, before the tree is made.
struct Raw {
  std::string name, parent;
  int shares = 1;
  std::vector<std::string> users;
  int64_t line = 0;
};

class Reader {
 public:
  explicit Reader(const std::string& file) : file_(file) {}

  Error bad(const toml::node* at, const std::string& what) const {
    const int64_t line = at != nullptr ? static_cast<int64_t>(at->source().begin.line) : 0;
    return badInput(file_ + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + what);
  }

  void onlyKeys(const toml::table& t, const std::set<std::string_view>& known, const std::string& where,
                std::string_view list) const {
    for (auto&& [key, value] : t)
      if (!known.contains(key.str()))
        throw bad(&value, "unknown key '" + common::printable(key.str()) + "' in " + where +
                              " (known: " + std::string(list) + ")");
  }

  std::string text(const toml::node& n, const std::string& what) const {
    if (!n.is_string()) throw bad(&n, what + " must be a string");
    return std::string(*n.value<std::string>());
  }

  double weight(const toml::table& t, const char* key, double fallback) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return fallback;
    std::optional<double> v = n->is_integer()
                                  ? std::optional<double>(static_cast<double>(*n->value<int64_t>()))
                                  : n->value<double>();
    if (!n->is_number() || !v || !std::isfinite(*v) || *v < 0 || *v > kMaxWeight)
      throw bad(n, std::string("[priority] ") + key + " must be a number from 0 to 1e12");
    return *v;
  }

  PriorityWeights weights(const toml::node& n) const {
    const toml::table* t = n.as_table();
    if (t == nullptr) throw bad(&n, "[priority] must be a table");
    onlyKeys(*t, {"priority", "fairshare", "age", "size", "max_age"}, "[priority]",
             "priority, fairshare, age, size, max_age");
    PriorityWeights w;
    w.priority = weight(*t, "priority", w.priority);
    w.fairshare = weight(*t, "fairshare", w.fairshare);
    w.age = weight(*t, "age", w.age);
    w.size = weight(*t, "size", w.size);
    if (const toml::node* a = t->get("max_age")) {
      std::optional<int64_t> s = a->value_exact<int64_t>();
      if (!s || *s < 1 || *s > 10LL * 365 * 86'400)
        throw bad(a, "[priority] max_age must be a whole number of seconds from 1 to 315360000 (10 years)");
      w.max_age = std::chrono::seconds(*s);
    }
    return w;
  }

  Raw account(std::string_view name, const toml::node& n) const {
    const std::string where = "[accounts." + common::printable(name) + "]";
    if (std::string p = accountNameProblem(name); !p.empty())
      throw bad(&n, "account name '" + common::printable(name) + "': " + p);
    if (name == Accounts::kRoot)
      throw bad(&n, "[accounts.root]: the root is the tree's own; give the top accounts no parent instead");
    const toml::table* t = n.as_table();
    if (t == nullptr) throw bad(&n, where + " must be a table");
    onlyKeys(*t, {"parent", "shares", "users"}, where, "parent, shares, users");
    Raw r;
    r.name = std::string(name);
    r.line = static_cast<int64_t>(n.source().begin.line);
    if (const toml::node* p = t->get("parent")) r.parent = text(*p, where + " parent");
    if (const toml::node* s = t->get("shares")) {
      std::optional<int64_t> v = s->value_exact<int64_t>();
      if (!v || *v < 0 || *v > Accounts::kMaxShares)
        throw bad(s, where + " shares must be a whole number from 0 to 1000000 (1 where not given)");
      r.shares = static_cast<int>(*v);
    }
    if (const toml::node* u = t->get("users")) {
      const toml::array* list = u->as_array();
      if (list == nullptr) throw bad(u, where + " users must be a list of user names");
      std::set<std::string, std::less<>> seen;
      for (const toml::node& one : *list) {
        std::string user = text(one, where + " users");
        if (std::string p = common::ownerProblem(user); !p.empty())
          throw bad(&one, where + " user '" + common::printable(user) + "': " + p);
        if (!seen.insert(user).second) throw bad(&one, where + " names user " + user + " twice");
        r.users.push_back(std::move(user));
      }
    }
    return r;
  }

 private:
  const std::string& file_;
};

// The parents, checked: each names an account, and following them from any account reaches the
// root (no cycle). Iterative: a chain of 100,000 accounts is a file, not a stack overflow.
std::vector<size_t> parentsOf(const std::vector<Raw>& raw,
                              const std::unordered_map<std::string, size_t>& index, const std::string& file) {
  constexpr size_t kTop = SIZE_MAX;
  std::vector<size_t> parent(raw.size(), kTop);
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i].parent.empty() || raw[i].parent == Accounts::kRoot) continue;
    auto it = index.find(raw[i].parent);
    if (it == index.end())
      throw badInput(file + ":" + std::to_string(raw[i].line) + ": account " + raw[i].name + "'s parent '" +
                     common::printable(raw[i].parent) + "' is no account of the file (add it, or leave " +
                     "parent out for a top account)");
    parent[i] = it->second;
  }
  std::vector<char> state(raw.size(), 0);  // 0 not seen, 1 on the walk now, 2 reaches the root
  for (size_t i = 0; i < raw.size(); ++i) {
    std::vector<size_t> walk;
    size_t at = i;
    while (at != kTop && state[at] == 0) {
      state[at] = 1;
      walk.push_back(at);
      at = parent[at];
    }
    if (at != kTop && state[at] == 1) {
      std::string cycle = raw[at].name;
      for (size_t p = parent[at];; p = parent[p]) {
        cycle += " -> " + raw[p].name;
        if (p == at || cycle.size() > 400) break;
      }
      throw badInput(file + ":" + std::to_string(raw[at].line) + ": the accounts' parents make a cycle (" +
                     cycle + (cycle.size() > 400 ? " ..." : "") +
                     "): every account must lead up to the root");
    }
    for (size_t w : walk) state[w] = 2;
  }
  return parent;
}

}  // namespace

std::string accountNameProblem(std::string_view name) {
  if (name.empty()) return "empty";
  if (name.size() > kMaxAccountName) return "longer than " + std::to_string(kMaxAccountName) + " bytes";
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return "only letters, digits, '.', '_' and '-' are allowed";
  return "";
}

const Account* Accounts::find(std::string_view name) const {
  const size_t i = indexOf(name);
  return i < list_.size() ? &list_[i] : nullptr;
}

size_t Accounts::indexOf(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? list_.size() : it->second;
}

void Accounts::index() {
  by_name_.clear();
  of_user_.clear();
  for (size_t i = 0; i < list_.size(); ++i) {
    by_name_[list_[i].name] = i;
    for (const std::string& u : list_[i].users) of_user_[u].push_back(i);
  }
}

std::vector<std::string> Accounts::accountsOf(std::string_view user) const {
  std::vector<std::string> out;
  if (auto it = of_user_.find(std::string(user)); it != of_user_.end())
    for (size_t i : it->second) out.push_back(list_[i].name);
  return out;
}

std::string Accounts::accountFor(const std::string& user, const std::string& asked) const {
  const std::vector<std::string> mine = accountsOf(user);
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 20; ++i) out += (out.empty() ? "" : ",") + names[i];
    return out + (names.size() > 20 ? ",..." : "");
  };
  if (!asked.empty()) {
    if (find(asked) == nullptr || asked == kRoot)
      throw PoolError(PoolFailure::kOther, ErrorCode::kBadInput,
                      "account '" + common::printable(asked) +
                          "' is no account of the pool's accounts file; `poolctl fairshare` lists them");
    if (std::find(mine.begin(), mine.end(), asked) != mine.end() ||
        (mine.empty() && asked == default_account_))
      return asked;
    throw PoolError(
        PoolFailure::kForbidden, ErrorCode::kBadInput,
        "user " + user + " may not charge account " + asked +
            (mine.empty() ? std::string(" (it is in no account)") : " (its accounts: " + list(mine) + ")") +
            "; ask with --account for one of its own, or ask an administrator to add it");
  }
  if (auto d = defaults_.find(user); d != defaults_.end()) return d->second;
  if (mine.size() == 1) return mine.front();
  if (mine.empty() && !default_account_.empty()) return default_account_;
  throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                  "user " + user +
                      " is in no account of the pool's accounts file, which names no default_account; "
                      "ask an administrator to add " +
                      user + " to an account");
}

Accounts parseAccounts(std::string_view text, const std::string& file) {
  common::checkTomlKeyDepth(text, file, "accounts files nest 2: [accounts.NAME] shares");
  toml::table doc;
  try {
    doc = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    throw badInput(file + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  Reader read(file);
  read.onlyKeys(doc, {"default_account", "priority", "accounts", "users"}, "the file",
                "default_account, [priority], [accounts.NAME], [users.NAME]");
  Accounts out;
  if (const toml::node* p = doc.get("priority")) out.weights_ = read.weights(*p);
  std::vector<Raw> raw;
  std::unordered_map<std::string, size_t> index;
  if (const toml::node* a = doc.get("accounts")) {
    const toml::table* t = a->as_table();
    if (t == nullptr) throw read.bad(a, "accounts must be tables: [accounts.NAME]");
    if (t->size() > Accounts::kMaxAccounts)
      throw read.bad(a, std::to_string(t->size()) + " accounts: at most " +
                            std::to_string(Accounts::kMaxAccounts) + " are taken");
    size_t memberships = 0;
    for (auto&& [key, value] : *t) {
      raw.push_back(read.account(key.str(), value));
      index.emplace(raw.back().name, raw.size() - 1);
      if ((memberships += raw.back().users.size()) > kMaxMemberships)
        throw read.bad(&value, "more than 1000000 users in accounts in all");
    }
  }
  const std::vector<size_t> parent = parentsOf(raw, index, file);
  // The tree from the root: each account after its parent, siblings in name order.
  std::vector<std::vector<size_t>> children(raw.size() + 1);  // [raw.size()]: the root's
  for (size_t i = 0; i < raw.size(); ++i)
    children[parent[i] == SIZE_MAX ? raw.size() : parent[i]].push_back(i);
  std::vector<std::pair<size_t, size_t>> todo;  // raw index, list index of its parent
  for (size_t c : children[raw.size()]) todo.emplace_back(c, 0);
  for (size_t next = 0; next < todo.size(); ++next) {
    const auto [r, up] = todo[next];
    out.list_.push_back(Account{.name = raw[r].name,
                                .parent = up,
                                .shares = raw[r].shares,
                                .users = std::move(raw[r].users),
                                .children = {}});
    out.list_[up].children.push_back(out.list_.size() - 1);
    for (size_t c : children[r]) todo.emplace_back(c, out.list_.size() - 1);
  }
  out.index();
  if (const toml::node* d = doc.get("default_account")) {
    out.default_account_ = read.text(*d, "default_account");
    if (out.find(out.default_account_) == nullptr || out.default_account_ == Accounts::kRoot)
      throw read.bad(
          d, "default_account '" + common::printable(out.default_account_) + "' is no account of the file");
  }
  if (const toml::node* u = doc.get("users")) {
    const toml::table* t = u->as_table();
    if (t == nullptr) throw read.bad(u, "users must be tables: [users.NAME]");
    for (auto&& [key, value] : *t) {
      const std::string user(key.str());
      const std::string where = "[users." + common::printable(user) + "]";
      const toml::table* one = value.as_table();
      if (one == nullptr) throw read.bad(&value, where + " must be a table");
      read.onlyKeys(*one, {"default"}, where, "default");
      const toml::node* d = one->get("default");
      if (d == nullptr) continue;
      std::string account = read.text(*d, where + " default");
      const std::vector<std::string> mine = out.accountsOf(user);
      if (std::find(mine.begin(), mine.end(), account) == mine.end())
        throw read.bad(d, where + " default '" + common::printable(account) + "' is not an account " + user +
                              " is in (add " + user + " to its users)");
      out.defaults_[user] = std::move(account);
    }
  }
  for (const auto& [user, accounts] : out.of_user_)
    if (accounts.size() > 1 && !out.defaults_.count(user)) {
      const Account& first = out.list_[accounts[0]];
      const Account& second = out.list_[accounts[1]];
      throw badInput(file + ": user " + user + " is in accounts " + first.name + " and " + second.name +
                     " and has no default: add [users." + user + "] default = \"" + first.name +
                     "\" (or another)");
    }
  return out;
}

Accounts readAccountsFile(const std::filesystem::path& file) {
  return parseAccounts(common::readRegularFile(file, kAccountsFileLimit, "accounts file"), file.string());
}

std::vector<std::string> accountChanges(const Accounts& before, const Accounts& after) {
  auto users = [](const Account& a) {
    std::string out;
    for (const std::string& u : a.users) out += (out.empty() ? "" : ",") + u;
    return out.empty() ? std::string("none") : out;
  };
  auto parentName = [](const Accounts& in, const Account& a) { return in.list()[a.parent].name; };
  std::vector<std::string> out;
  for (const Account& a : after.list()) {
    if (a.name == Accounts::kRoot) continue;
    const Account* o = before.find(a.name);
    if (o == nullptr) {
      out.push_back("account " + a.name + " added: parent " + parentName(after, a) + ", shares " +
                    std::to_string(a.shares) + ", users " + users(a));
      continue;
    }
    std::string what;
    auto add = [&what](const std::string& field, const std::string& from, const std::string& to) {
      if (from != to) what += (what.empty() ? "" : ", ") + field + " " + from + " -> " + to;
    };
    add("parent", parentName(before, *o), parentName(after, a));
    add("shares", std::to_string(o->shares), std::to_string(a.shares));
    add("users", users(*o), users(a));
    if (!what.empty()) out.push_back("account " + a.name + ": " + what);
  }
  for (const Account& a : before.list())
    if (a.name != Accounts::kRoot && after.find(a.name) == nullptr)
      out.push_back("account " + a.name + " removed");
  const PriorityWeights& w0 = before.weights();
  const PriorityWeights& w1 = after.weights();
  std::string what;
  auto weight = [&what](const char* name, double from, double to) {
    if (from == to) return;
    std::ostringstream f, t;
    f << from;
    t << to;
    what += (what.empty() ? "" : ", ") + std::string(name) + " " + f.str() + " -> " + t.str();
  };
  weight("priority", w0.priority, w1.priority);
  weight("fairshare", w0.fairshare, w1.fairshare);
  weight("age", w0.age, w1.age);
  weight("size", w0.size, w1.size);
  weight("max_age", static_cast<double>(w0.max_age.count()), static_cast<double>(w1.max_age.count()));
  if (!what.empty()) out.push_back("weights: " + what);
  if (before.defaultAccount() != after.defaultAccount())
    out.push_back("default_account " + (before.defaultAccount().empty() ? "none" : before.defaultAccount()) +
                  " -> " + (after.defaultAccount().empty() ? "none" : after.defaultAccount()));
  // One event holds them: at most 100 lines of at most 400 bytes (a line of the event log is at most
  // 1 MiB), then how many more.
  for (std::string& line : out)
    if (line.size() > 400) {
      const size_t cut = line.rfind(',', 396);  // at a comma: never inside a user's name
      line = line.substr(0, cut == std::string::npos ? 396 : cut) + ", ...";
    }
  if (out.size() > 100) {
    const size_t more = out.size() - 99;
    out.resize(99);
    out.push_back("... and " + std::to_string(more) + " more changes");
  }
  return out;
}

}  // namespace poolrun::pool
