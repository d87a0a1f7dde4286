#pragma once

// The usage ledger as JSON (usage.hpp): a row as etcd keeps it and `poolctl job` shows it, and a
// report as GET /v1/usage answers it.
//   row:    {"id": 7, "kind": "lease", "lease": "L...", "job": "J3", "owner": "alice", "account": "ml",
//            "node": "n01", "model": "NVIDIA H100 80GB HBM3", "start_ms": ..., "end_ms": ...,
//            "running": false, "gpus": 8, "allocated_s": 28800, "used_s": 20000, "idle_s": 600,
//            "energy_j": 1.2e7, "ended": "released"}
//   report: {"by": "owner", "since_ms": ..., "until_ms": ..., "rows": [{"name": "alice",
//            "allocated_s", "used_s", "idle_s", "energy_j", "leases"}, ...]}

#include <nlohmann/json.hpp>

#include "poolrun/pool/fairshare.hpp"
#include "poolrun/pool/usage.hpp"

namespace poolrun::pool {

nlohmann::json toJson(const UsageRecord& row);
// A row as the pool wrote it. Throws poolrun::Error (kBadInput) naming the field that is wrong (a
// kind it does not know, a negative or non-finite figure, an end before the start).
UsageRecord usageRecordFromJson(const nlohmann::json& doc);
// Checks a row however it was read (etcd's document, SQLite's columns): throws as usageRecordFromJson.
void checkUsageRecord(const UsageRecord& row);

nlohmann::json toJson(const UsageTotals& totals);
UsageTotals usageTotalsFromJson(const nlohmann::json& doc);

// GET /v1/fairshare's rows: {"account": "physics", "user": "alice" (absent for an account's row),
// "depth": 1, "raw_shares": 10, "norm_shares": 0.2, "raw_usage": 36000 (decayed GPU-seconds),
// "norm_usage": 0.5, "effective_usage": 0.55, "factor": 0.15}
nlohmann::json toJson(const FairShareRow& row);
FairShareRow fairShareRowFromJson(const nlohmann::json& doc);
// GET /v1/fairshare: {"accounts": true, "half_life_s": 604800, "default_account": "",
// "weights": {"priority", "fairshare", "age", "size", "max_age_s"}, "rows": [row, ...]}
nlohmann::json toJson(const FairShareReport& report);
FairShareReport fairShareReportFromJson(const nlohmann::json& doc);

}  // namespace poolrun::pool
