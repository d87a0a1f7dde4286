#include "fake_nvml/fake_nvml_file.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

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
