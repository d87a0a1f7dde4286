#pragma once

// A job's record as JSON (jobs.hpp): what the pool stores (SQLite's jobs table, etcd) and what
// `poolctl job` reads back.
//   {"schema": "poolrun.job/1", "id": "J12_3", "task": 3, "array_limit": 4, "state": "RUNNING",
//    "reason": "", "submitted_ms": ..., "started_ms": ..., "ended_ms": ..., "lease": "L...",
//    "exit_status": 0, "signal": null, "failed_node": "", "failed_rank": null, "cancelled_by": "",
//    "restarts": 0, "spec": {"name", "owner", "uid", "gid", "groups", "command", "cwd", "env",
//    "output", "error", "request": {...}, "dependency": "afterok:J11", "time_limit_s", "requeue"}}

#include <nlohmann/json.hpp>

#include "poolrun/pool/jobs.hpp"

namespace poolrun::pool {

inline constexpr const char* kJobSchema = "poolrun.job/1";

nlohmann::json toJson(const JobRecord& job);
// A record as the pool wrote it. Throws poolrun::Error (kBadInput) naming the field that is wrong.
JobRecord jobFromJson(const nlohmann::json& doc);

}  // namespace poolrun::pool
