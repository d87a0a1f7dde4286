#pragma once

// The NCCL tuner configuration a launch hands its ranks: the plan's hardware as the tuner's
// cost model reads it (nccl_tuner/include/poolrun/tuner/config.hpp, docs/tuner.md).

#include <nlohmann/json.hpp>

#include "poolrun/launcher/plan.hpp"

namespace poolrun::launcher {

// The tuner configuration ("poolrun.tuner/1") for the job's hardware: its first node's GPUs, links
// and NICs.
nlohmann::ordered_json tunerConfig(const JobPlan& plan);

}  // namespace poolrun::launcher
