#pragma once

// Quotas: per group of owners or per owner, a number of GPUs guaranteed and a limit. The quotas
// file has one line per quota (# starts a comment):
//
//   group vision guaranteed=16 limit=64 members=alice,bob
//   owner carol guaranteed=8 limit=32
//   default guaranteed=0 limit=16
//
// An owner's quota is its group's (an owner is in one group at most), else its own line, else the
// `default` line, one quota shared by every owner it covers; without any, the owner has no quota (nothing it
// holds is borrowed, nothing limits it). `limit` is optional (no limit). What a quota's owners hold beyond
// `guaranteed` is borrowed: their youngest leases, which may be preempted (for any priority) when an owner
// within its guarantee needs the GPUs, and by priority like a --preemptible lease. A request that would take
// a quota past its limit waits (and is refused when it alone is over the limit).

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace poolrun::pool {

struct Quota {
  enum class Kind { kGroup, kOwner, kDefault };
  Kind kind = Kind::kOwner;
  std::string name;                  // the group or owner; "default"
  std::vector<std::string> members;  // a group's owners
  int guaranteed = 0;
  std::optional<int> limit;
  bool operator==(const Quota&) const = default;
};

std::string toString(Quota::Kind kind);  // "group", "owner", "default"

struct Quotas {
  std::vector<Quota> entries;  // in the file's order
  // The quota that counts `owner`'s GPUs; null where none does. One lookup: the pool asks for
  // every lease on every scheduling pass.
  const Quota* of(const std::string& owner) const;
  bool empty() const { return entries.empty(); }
  bool operator==(const Quotas&) const = default;
  void index();  // builds what of() looks in, from `entries` (parseQuotas does)

 private:
  std::map<std::string, size_t, std::less<>> by_owner_;  // an owner: its group's entry, else its own
  std::optional<size_t> fallback_;                       // the default entry
};

// The quotas of a file's text; throws poolrun::Error (kBadInput) naming FILE:LINE and what is
// wrong (an unknown word, a number out of range, an owner in two groups, a quota named twice).
Quotas parseQuotas(std::string_view text, const std::string& file);

// What changed from `before` to `after`, one line per quota: "group ml added: guaranteed 64, limit
// 96", "owner bob removed", "group ml: guaranteed 64 -> 96, limit none -> 128, members a,b -> a,b,c".
// Empty where nothing did. For the audit trail (poold's event quotas_changed).
std::vector<std::string> quotaChanges(const Quotas& before, const Quotas& after);
// Reads and parses a quotas file (a regular file of at most 1 MiB).
Quotas readQuotasFile(const std::filesystem::path& file);

// One quota as the pool sees it now (`poolctl quota`, GET /v1/quotas).
struct QuotaUse {
  Quota quota;
  int used = 0;      // GPUs its owners hold
  int borrowed = 0;  // of those, beyond the guarantee
  int waiting = 0;   // GPUs its owners' waiting requests ask for
};

}  // namespace poolrun::pool
