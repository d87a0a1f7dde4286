#include "fake_nvml/fake_nvml_file.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace poolrun::test {
namespace {

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::filesystem::path fakeNvmlDir() {
  return POOLRUN_FAKE_NVML_DIR;
}

std::string fakeNvmlEnv(const std::filesystem::path& file) {
  return "env LD_LIBRARY_PATH=" + quoted(fakeNvmlDir().string()) +
         " POOLRUN_FAKE_NVML=" + quoted(file.string()) + " ";
}

nlohmann::json fakeNvmlFor(const topo::NodeTopology& topology) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const topo::Gpu& g : topology.gpus) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fake-0000-%04zu", g.index);
    gpus.push_back(
        {{"pci", g.pci.str()},
         {"name", g.model.empty() ? "NVIDIA H100 80GB HBM3" : g.model},
         {"uuid", uuid},
         {"memory_total_bytes", 80ULL << 30},
         {"memory_used_bytes", 0},
         {"compute_capability", {9, 0}},
         {"utilization", {{"gpu", 0}, {"memory", 0}}},
         {"temperature_c", 35},
         {"power_mw", 70000},
         {"persistence", true},
         {"ecc_uncorrected_volatile", 0},
         {"retired_pages_pending", false},
         {"remapped_rows", {{"corrected", 0}, {"uncorrected", 0}, {"pending", false}, {"failure", false}}},
         {"clocks_event_reasons", 1},
         {"processes", nlohmann::json::array()},
         {"xid_events", nlohmann::json::array()}});
  }
  return {{"gpus", gpus}};
}

nlohmann::json migProfiles(const std::string& model) {
  // One row of `nvidia-smi mig -lgip` (and -lgipp for the placements, in memory slices).
  struct Row {
    unsigned index, id;
    const char* name;
    unsigned slices, instances, sm;
    unsigned long long memory_mb;
    unsigned copy_engines, decoders, jpegs, ofas;
    unsigned placement_size;
    std::vector<unsigned> placements;
  };
  // Sources: NVIDIA's MIG user guide, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/,
  // "Supported MIG Profiles" (the H100 and A100 tables: names, slices, instance counts, engines) and
  // "Getting Started with MIG" (profile ids and placements in its nvidia-smi mig -lgip and -lgipp
  // examples); the ids, SMs, engines and memory checked against nvidia-smi mig -lgip as printed on an
  // H100 80GB HBM3 and an A100 80GB (memory in GiB there: 9.75 = 9984 MiB; an A100 3g.40gb shows
  // 40192 MiB in nvidia-smi). Indexes are nvml.h's NVML_GPU_INSTANCE_PROFILE_1_SLICE (0), _2_SLICE
  // (1), _3_SLICE (2), _4_SLICE (3), _7_SLICE (4), _1_SLICE_REV1 (7, "+me"), _1_SLICE_REV2 (9). No
  // encoders and no P2P on either.
  const std::vector<unsigned> seven = {0, 1, 2, 3, 4, 5, 6};
  std::vector<Row> rows;
  if (model == "H100 80GB") {
    rows = {{0, 19, "1g.10gb", 1, 7, 16, 9984, 1, 1, 1, 0, 1, seven},
            {7, 20, "1g.10gb+me", 1, 1, 16, 9984, 1, 1, 1, 1, 1, seven},
            {9, 15, "1g.20gb", 1, 4, 26, 20096, 1, 1, 1, 0, 2, {0, 2, 4, 6}},
            {1, 14, "2g.20gb", 2, 3, 32, 20096, 2, 2, 2, 0, 2, {0, 2, 4}},
            {2, 9, "3g.40gb", 3, 2, 60, 40448, 3, 3, 3, 0, 4, {0, 4}},
            {3, 5, "4g.40gb", 4, 1, 64, 40448, 4, 4, 4, 0, 4, {0}},
            {4, 0, "7g.80gb", 7, 1, 132, 81152, 8, 7, 7, 1, 8, {0}}};
  } else if (model == "A100 80GB") {
    rows = {{0, 19, "1g.10gb", 1, 7, 14, 9728, 1, 0, 0, 0, 1, seven},
            {7, 20, "1g.10gb+me", 1, 1, 14, 9728, 1, 1, 1, 1, 1, seven},
            {9, 15, "1g.20gb", 1, 4, 14, 19968, 1, 1, 0, 0, 2, {0, 2, 4, 6}},
            {1, 14, "2g.20gb", 2, 3, 28, 19968, 2, 1, 0, 0, 2, {0, 2, 4}},
            {2, 9, "3g.40gb", 3, 2, 42, 40192, 3, 2, 0, 0, 4, {0, 4}},
            {3, 5, "4g.40gb", 4, 1, 56, 40192, 4, 2, 0, 0, 4, {0}},
            {4, 0, "7g.80gb", 7, 1, 98, 80896, 7, 5, 1, 1, 8, {0}}};
  } else {
    throw std::invalid_argument("no MIG profiles for '" + model + "' (use \"A100 80GB\" or \"H100 80GB\")");
  }
  nlohmann::json profiles = nlohmann::json::array();
  for (const Row& r : rows) {
    profiles.push_back({{"index", r.index},
                        {"id", r.id},
                        {"name", r.name},
                        {"slices", r.slices},
                        {"instances", r.instances},
                        {"sm", r.sm},
                        {"memory_mb", r.memory_mb},
                        {"copy_engines", r.copy_engines},
                        {"decoders", r.decoders},
                        {"encoders", 0},
                        {"jpegs", r.jpegs},
                        {"ofas", r.ofas},
                        {"p2p", false},
                        {"placement_size", r.placement_size},
                        {"placements", r.placements}});
  }
  return profiles;
}

void writeFakeNvml(const std::filesystem::path& file, const nlohmann::json& doc) {
  std::filesystem::path temporary = file;
  temporary += ".new";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << doc.dump(2) << "\n";
  }
  std::filesystem::rename(temporary, file);
}

void reexecWithFakeNvml(char** argv) {
  std::string dir = fakeNvmlDir().string();
  const char* current = std::getenv("LD_LIBRARY_PATH");
  std::string path = current != nullptr ? current : "";
  if (path == dir || path.rfind(dir + ":", 0) == 0) return;
  path = path.empty() ? dir : dir + ":" + path;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  execv("/proc/self/exe", argv);
  std::perror(
      "cannot run this test binary again with the fake NVML on LD_LIBRARY_PATH (execv /proc/self/exe)");
}

}  // namespace poolrun::test
