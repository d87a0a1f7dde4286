#pragma once

// Tests with the fake NVML (docs/fake-nvml.md): where the fake libnvidia-ml.so.1 is, the command
// prefix that makes a child process load it, and its JSON file written whole.

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "poolrun/topo/topology.hpp"

namespace poolrun::test {

// The build folder that holds the fake libnvidia-ml.so.1.
std::filesystem::path fakeNvmlDir();

// "env LD_LIBRARY_PATH=DIR POOLRUN_FAKE_NVML=FILE " (quoted), to put in front of a command run by
// runShell or spawnShell: the child loads the fake instead of any real NVML.
std::string fakeNvmlEnv(const std::filesystem::path& file);

// A fake NVML file with one healthy, idle GPU for each GPU of `topology` (its PCI address and model;
// UUID GPU-fake-0000-<index>; 80 GiB, none used; 35 C, 70 W; no ECC error, nothing pending; no
// process, no XID event; no NVLink). Tests change what they test.
nlohmann::json fakeNvmlFor(const topo::NodeTopology& topology);

// NVIDIA's GPU instance profiles of a GPU `model` in MIG mode, "A100 80GB" or "H100 80GB" (throws
// std::invalid_argument for another), as the "profiles" of a GPU's "mig" in the fake's file: their
// indexes (nvml.h's NVML_GPU_INSTANCE_PROFILE_*), ids, names, slices, instance counts, SMs, memory,
// engines and placements, as the driver reports them. Compute instance profiles are the fake's
// defaults, which are NVIDIA's (docs/fake-nvml.md).
nlohmann::json migProfiles(const std::string& model);

// Writes `doc` to `file` under a temporary name and renames it over `file`: a process reading it
// meanwhile sees the old file or the new one, never half of one.
void writeFakeNvml(const std::filesystem::path& file, const nlohmann::json& doc);

// Runs this program again (same arguments) with the fake's folder first on LD_LIBRARY_PATH, unless
// it is there already; returns only then (or where exec fails, after saying so).
void reexecWithFakeNvml(char** argv);

}  // namespace poolrun::test
