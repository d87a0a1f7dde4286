#include "poolrun/doctor/report.hpp"
#include "poolrun/common/nesting.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "poolrun/common/error.hpp"

namespace poolrun::doctor {

std::string_view toString(Status status) {
  switch (status) {
    case Status::kPass:
      return "PASS";
    case Status::kWarn:
      return "WARN";
    case Status::kFail:
      return "FAIL";
    case Status::kSkip:
      return "SKIP";
  }
  return "?";
}

void Report::append(const Report& other) {
  checks.insert(checks.end(), other.checks.begin(), other.checks.end());
}

int Report::count(Status status) const {
  return static_cast<int>(
      std::count_if(checks.begin(), checks.end(), [&](const Check& c) { return c.status == status; }));
}

std::string toJson(const Report& report) {
  nlohmann::ordered_json doc;
  doc["schema"] = "poolrun.doctor/1";
  nlohmann::ordered_json checks = nlohmann::ordered_json::array();
  for (const Check& c : report.checks) {
    nlohmann::ordered_json j;
    j["id"] = c.id;
    j["status"] = toString(c.status);
    if (!c.node.empty()) j["node"] = c.node;
    j["subject"] = c.subject;
    j["evidence"] = c.evidence;
    j["fix"] = c.fix;
    checks.push_back(std::move(j));
  }
  doc["checks"] = std::move(checks);
  doc["summary"] = {{"pass", report.count(Status::kPass)},
                    {"warn", report.count(Status::kWarn)},
                    {"fail", report.count(Status::kFail)},
                    {"skip", report.count(Status::kSkip)}};
  // Evidence quotes files verbatim; a corrupt one must not make the report unprintable.
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Report reportFromJson(const std::string& text) {
  try {
    if (auto at = common::jsonTooDeepAt(text, common::kMaxJsonDepth))
      throw badInput("the document nests deeper than " + std::to_string(common::kMaxJsonDepth) +
                     " levels (at byte " + std::to_string(*at) + "); it is not a doctor report");
    nlohmann::json doc = nlohmann::json::parse(text);
    if (!doc.is_object() || doc.value("schema", "") != "poolrun.doctor/1" || !doc.contains("checks") ||
        !doc["checks"].is_array())
      throw badInput("not a poolrun.doctor/1 document (no \"schema\": \"poolrun.doctor/1\" with \"checks\")");
    Report report;
    for (const nlohmann::json& c : doc["checks"]) {
      if (!c.is_object()) throw badInput("a doctor check that is not an object: " + c.dump());
      std::string status = c.value("status", "");
      Check check;
      if (status == "PASS")
        check.status = Status::kPass;
      else if (status == "WARN")
        check.status = Status::kWarn;
      else if (status == "FAIL")
        check.status = Status::kFail;
      else if (status == "SKIP")
        check.status = Status::kSkip;
      else
        throw badInput("a doctor check with status '" + status + "' (expected PASS, WARN, FAIL or SKIP)");
      check.id = c.value("id", "");
      check.subject = c.value("subject", "");
      check.evidence = c.value("evidence", "");
      check.fix = c.value("fix", "");
      check.node = c.value("node", "");
      report.add(std::move(check));
    }
    return report;
  } catch (const nlohmann::json::exception& e) {
    throw badInput(std::string("not a doctor report: ") + e.what());
  }
}

std::string toText(const Report& report) {
  bool nodes =
      std::any_of(report.checks.begin(), report.checks.end(), [](const Check& c) { return !c.node.empty(); });
  size_t idWidth = 5, subjectWidth = 7, nodeWidth = 4;
  for (const Check& c : report.checks) {
    idWidth = std::max(idWidth, c.id.size());
    subjectWidth = std::max(subjectWidth, std::min<size_t>(c.subject.size(), 40));
    nodeWidth = std::max(nodeWidth, c.node.size());
  }
  std::string out;
  auto row = [&](std::string_view status, std::string_view node, std::string_view id,
                 std::string_view subject, std::string_view evidence) {
    out += fmt::format("{:<7}", status);
    if (nodes) out += fmt::format("{:<{}}  ", node, nodeWidth);
    out += fmt::format("{:<{}}  {:<{}}  {}\n", id, idWidth, subject, subjectWidth, evidence);
  };
  row("STATUS", "NODE", "CHECK", "SUBJECT", "EVIDENCE");
  for (const Check& c : report.checks) {
    row(toString(c.status), c.node, c.id, c.subject, c.evidence);
    if ((c.status == Status::kWarn || c.status == Status::kFail) && !c.fix.empty()) {
      out += fmt::format("{:<7}{}fix: {}\n", "", nodes ? std::string(nodeWidth + 2, ' ') : "", c.fix);
    }
  }
  out += fmt::format("{} pass, {} warn, {} fail, {} skip\n", report.count(Status::kPass),
                     report.count(Status::kWarn), report.count(Status::kFail), report.count(Status::kSkip));
  return out;
}

}  // namespace poolrun::doctor
