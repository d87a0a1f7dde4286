#pragma once

// A job's record as JSON (jobs.hpp): what the pool stores (SQLite's jobs table, etcd) and what
// `poolctl job` reads back.
//   {"schema": "poolrun.job/1", "id": "J12_3", "task": 3, "array_limit": 4, "state": "RUNNING",
//    "reason": "", "submitted_ms": ..., "started_ms": ..., "ended_ms": ..., "lease": "L...",
//    "exit_status": 0, "signal": null, "failed_node": "", "failed_rank": null, "cancelled_by": "",
//    "restarts": 0, "spec": {"name", "owner", "uid", "gid", "groups", "command", "cwd", "env",
//    "output", "error", "request": {...}, "dependency": "afterok:J11", "time_limit_s", "requeue"}}

#include <nlohmann/json.hpp>

#include "poolrun/pool/job_book.hpp"
#include "poolrun/pool/jobs.hpp"

namespace poolrun::pool {

// --mem-per-gpu: the most a job may ask per unit (16 TiB).
inline constexpr uint64_t kMaxMemPerGpu = uint64_t{1} << 44;

inline constexpr const char* kJobSchema = "poolrun.job/1";

nlohmann::json toJson(const JobRecord& job);
// A record as the pool wrote it. Throws poolrun::Error (kBadInput) naming the field that is wrong.
JobRecord jobFromJson(const nlohmann::json& doc);

}  // namespace poolrun::pool

namespace poolrun::pool {

// What `poolrun --detach` sends (POST /v1/jobs): the job's spec (its owner is the caller's, whatever
// the body says) and its --array.
//   {"name", "uid", "gid", "groups", "command", "cwd", "env", "output", "error", "umask",
//    "request": {an acquire's fields}, "dependency", "time_limit_s", "requeue", "array": "0-9%2"}
struct JobSubmission {
  JobSpec spec;
  std::optional<JobArray> array;
};
nlohmann::json toJson(const JobSubmission& submission);
// Strict, as every client document: an unknown field, a string holding a NUL, an environment entry
// without '=', more than kMaxJobStrings arguments or variables are refused naming the field.
JobSubmission jobSubmissionFromJson(const nlohmann::json& doc);
inline constexpr size_t kMaxJobStrings = 10'000;

// What the agent of a running job's first node is to do (GET /v1/nodes/NAME/jobs): launchers to
// start, each with the credential it renews its lease with, and cancels' signals to send.
struct JobLaunch {
  std::string id, lease, owner, name;
  std::optional<int> task;
  uint32_t uid = 0, gid = 0;  // as submitted: the node's password database must agree
  std::vector<std::string> command, env;
  std::string cwd, output, error;  // the paths expanded (%j, %a, %u, %x)
  uint32_t umask = 022;
  std::optional<std::chrono::seconds> time_limit;
  std::string credential;
  bool allow_root = false;
  // The lease's units on the launcher's node, as the pool numbers them (GpuRef::index): its GPUs,
  // MIG instances past them. The agent confines the launcher to them.
  std::vector<size_t> gpus = {};
  // The most memory its processes on the node may use (--mem-per-gpu times its units there); 0: no
  // limit.
  uint64_t memory_bytes = 0;
  bool operator==(const JobLaunch&) const = default;
};
struct JobSignal {
  std::string id;
  int signal = 15;
  bool operator==(const JobSignal&) const = default;
};
struct NodeJobWork {
  std::vector<JobLaunch> start;
  std::vector<JobSignal> signal;
  bool operator==(const NodeJobWork&) const = default;
};
nlohmann::json toJson(const NodeJobWork& work);
NodeJobWork nodeJobWorkFromJson(const nlohmann::json& doc);

// What the agent says of a job (POST /v1/nodes/NAME/jobs/ID):
//   {"event": "started"} | {"event": "signalled"} |
//   {"event": "ended", "exit_status": N, "signal": S, "reason": "what stopped it from starting"}
struct JobReport {
  enum class Kind { kStarted, kSignalled, kEnded };
  Kind kind = Kind::kStarted;
  JobExit exit;
};
nlohmann::json toJson(const JobReport& report);
JobReport jobReportFromJson(const nlohmann::json& doc);

}  // namespace poolrun::pool
