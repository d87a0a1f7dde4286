#include "poolrun/pool/quotas.hpp"

#include <set>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/limits.hpp"

namespace poolrun::pool {
namespace {

// A quotas file names groups and owners: 1 MiB is some 20,000 lines.
constexpr size_t kQuotasFileLimit = size_t{1} << 20;
constexpr size_t kMaxGroupMembers = 10'000;

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

}  // namespace

std::string toString(Quota::Kind kind) {
  switch (kind) {
    case Quota::Kind::kGroup:
      return "group";
    case Quota::Kind::kOwner:
      return "owner";
    case Quota::Kind::kDefault:
      return "default";
  }
  return "owner";
}

void Quotas::index() {
  by_owner_.clear();
  fallback_.reset();
  for (size_t i = 0; i < entries.size(); ++i) {
    const Quota& q = entries[i];
    if (q.kind == Quota::Kind::kGroup)
      for (const std::string& m : q.members) by_owner_[m] = i;  // a group's member: its group's
    else if (q.kind == Quota::Kind::kDefault)
      fallback_ = i;
  }
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].kind == Quota::Kind::kOwner) by_owner_.emplace(entries[i].name, i);  // unless in a group
}

const Quota* Quotas::of(const std::string& owner) const {
  if (auto it = by_owner_.find(owner); it != by_owner_.end()) return &entries[it->second];
  return fallback_ ? &entries[*fallback_] : nullptr;
}

Quotas parseQuotas(std::string_view text, const std::string& file) {
  Quotas out;
  std::set<std::string> named;                 // "group vision", "owner carol", "default"
  std::map<std::string, std::string> groupOf;  // member: its group
  size_t number = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const std::string where = file + ":" + std::to_string(number);
    auto bad = [&](const std::string& why) -> Error {
      return badInput(where + ": " + why + " (expected `group NAME guaranteed=N [limit=N] members=A,B`, " +
                      "`owner NAME guaranteed=N [limit=N]` or `default guaranteed=N [limit=N]`)");
    };
    std::vector<std::string_view> w = words(line);
    if (w.empty()) {
      if (end == text.size()) break;
      continue;
    }
    Quota q;
    size_t next = 1;
    if (w[0] == "group" || w[0] == "owner") {
      q.kind = w[0] == "group" ? Quota::Kind::kGroup : Quota::Kind::kOwner;
      if (w.size() < 2 || w[1].find('=') != std::string_view::npos)
        throw bad("`" + std::string(w[0]) + "` needs a NAME");
      q.name = std::string(w[1]);
      if (std::string problem = common::ownerProblem(q.name); !problem.empty())
        throw bad("name '" + common::printable(q.name) + "': " + problem);
      next = 2;
    } else if (w[0] == "default") {
      q.kind = Quota::Kind::kDefault;
      q.name = "default";
    } else {
      throw bad("unknown kind '" + common::printable(std::string(w[0])) + "'");
    }
    bool haveGuarantee = false;
    std::set<std::string> keys;
    for (size_t i = next; i < w.size(); ++i) {
      std::string_view word = w[i];
      size_t eq = word.find('=');
      if (eq == std::string_view::npos)
        throw bad("'" + common::printable(std::string(word)) + "' is not KEY=VALUE");
      std::string key(word.substr(0, eq));
      if (!keys.insert(key).second) throw bad(common::printable(key) + "= is given twice");
      std::string_view value = word.substr(eq + 1);
      auto gpus = [&]() {
        try {
          return common::parseOption<int>(key, value, 0, kGpusRange.max);
        } catch (const Error& e) {
          throw badInput(where + ": " + e.what());
        }
      };
      if (key == "guaranteed") {
        q.guaranteed = gpus();
        haveGuarantee = true;
      } else if (key == "limit") {
        q.limit = gpus();
      } else if (key == "members" && q.kind == Quota::Kind::kGroup) {
        size_t p = 0;
        while (p <= value.size()) {
          size_t comma = value.find(',', p);
          if (comma == std::string_view::npos) comma = value.size();
          std::string member(value.substr(p, comma - p));
          p = comma + 1;
          if (std::string problem = common::ownerProblem(member); !problem.empty())
            throw bad("member '" + common::printable(member) + "': " + problem);
          if (auto [it, fresh] = groupOf.emplace(member, q.name); !fresh)
            throw bad("owner " + member + " is in group " + it->second +
                      " already (an owner is in one group at most)");
          q.members.push_back(std::move(member));
          if (q.members.size() > kMaxGroupMembers)
            throw bad("more than " + std::to_string(kMaxGroupMembers) + " members");
          if (comma == value.size()) break;
        }
      } else {
        throw bad("unknown key '" + common::printable(key) + "'");
      }
    }
    if (!haveGuarantee) throw bad("no guaranteed=N");
    if (q.kind == Quota::Kind::kGroup && q.members.empty()) throw bad("group " + q.name + " has no members=");
    if (q.limit && *q.limit < q.guaranteed)
      throw bad("limit=" + std::to_string(*q.limit) + " is below guaranteed=" + std::to_string(q.guaranteed));
    if (!named.insert(toString(q.kind) + " " + q.name).second)
      throw bad(toString(q.kind) + (q.kind == Quota::Kind::kDefault ? "" : " " + q.name) + " is named twice");
    out.entries.push_back(std::move(q));
    if (end == text.size()) break;
  }
  for (const Quota& q : out.entries)
    if (auto g = groupOf.find(q.name); q.kind == Quota::Kind::kOwner && g != groupOf.end())
      throw badInput(file + ": owner " + q.name + " has a line of its own but is in group " + g->second +
                     ", whose quota counts its GPUs; remove one of the two");
  out.index();
  return out;
}

Quotas readQuotasFile(const std::filesystem::path& file) {
  return parseQuotas(common::readRegularFile(file, kQuotasFileLimit, "quotas file"), file.string());
}

namespace {

std::string limitText(const std::optional<int>& limit) {
  return limit ? std::to_string(*limit) : "none";
}

std::string membersText(const std::vector<std::string>& members) {
  std::string out;
  for (const std::string& m : members) out += (out.empty() ? "" : ",") + m;
  return out.empty() ? "none" : out;
}

std::string quotaName(const Quota& q) {
  return q.kind == Quota::Kind::kDefault ? "default" : toString(q.kind) + " " + q.name;
}

}  // namespace

std::vector<std::string> quotaChanges(const Quotas& before, const Quotas& after) {
  std::map<std::string, const Quota*> old, now;
  for (const Quota& q : before.entries) old[quotaName(q)] = &q;
  for (const Quota& q : after.entries) now[quotaName(q)] = &q;
  std::vector<std::string> out;
  for (const auto& [name, q] : now) {
    auto it = old.find(name);
    if (it == old.end()) {
      out.push_back(name + " added: guaranteed " + std::to_string(q->guaranteed) + ", limit " +
                    limitText(q->limit) +
                    (q->kind == Quota::Kind::kGroup ? ", members " + membersText(q->members) : ""));
      continue;
    }
    const Quota& o = *it->second;
    std::string what;
    auto add = [&what](const std::string& field, const std::string& from, const std::string& to) {
      if (from != to) what += (what.empty() ? "" : ", ") + field + " " + from + " -> " + to;
    };
    add("guaranteed", std::to_string(o.guaranteed), std::to_string(q->guaranteed));
    add("limit", limitText(o.limit), limitText(q->limit));
    add("members", membersText(o.members), membersText(q->members));
    if (!what.empty()) out.push_back(name + ": " + what);
  }
  for (const auto& [name, q] : old)
    if (!now.count(name)) out.push_back(name + " removed");
  return out;
}

}  // namespace poolrun::pool
