#pragma once

// What the doctor found: one line per check, each with its verdict, the value it read and where,
// and one line on how to fix it.

#include <string>
#include <string_view>
#include <vector>

namespace poolrun::doctor {

enum class Status { kPass, kWarn, kFail, kSkip };
std::string_view toString(Status status);  // PASS WARN FAIL SKIP

struct Check {
  std::string id;  // "rdma.port", "roce.gid", "gdr.acs", ...
  Status status = Status::kSkip;
  std::string subject;   // what was checked: "mlx5_0/1", "0000:17:01.0", "node"
  std::string evidence;  // the value read and where ("state 4: ACTIVE (/sys/.../ports/1/state)")
  std::string fix;       // one line; empty for PASS
  std::string node;      // the node, where a report covers several
};

struct Report {
  std::vector<Check> checks;

  void add(Check check) { checks.push_back(std::move(check)); }
  void append(const Report& other);
  int count(Status status) const;
  bool failed() const { return count(Status::kFail) > 0; }
};

// {"schema": "poolrun.doctor/1", "checks": [{"id", "status", "subject", "evidence", "fix"}]}
// ("node" is added where set).
std::string toJson(const Report& report);
// The report of a "poolrun.doctor/1" document (another node's `poolrun doctor --json`). Throws
// poolrun::Error (kBadInput) saying what is wrong with `text`.
Report reportFromJson(const std::string& text);
// A table for people: status, check, subject, evidence, the fix under each WARN and FAIL, and a
// summary line.
std::string toText(const Report& report);

}  // namespace poolrun::doctor
