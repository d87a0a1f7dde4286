#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "poolrun/topo/writers.hpp"

namespace poolrun::topo {
namespace {

constexpr const char* kLegend =
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA "
    "node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n";

std::string cpuAffinity(const CpuSet& cpus) {
  return cpus.empty() ? "N/A" : cpus.toList();
}
std::string numaAffinity(int numa) {
  return numa == kNone ? "N/A" : std::to_string(numa);
}

std::string gib(uint64_t bytes) {
  return bytes == 0 ? "-" : fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ull << 30));
}

// "enabled", or the change that waits for a GPU reset.
std::string migMode(const MigState& m) {
  if (!m.resetPending()) return m.enabled ? "enabled" : "disabled";
  return std::string(m.enabled ? "enabled" : "disabled") + " now, " + (m.pending ? "enabled" : "disabled") +
         " after the next GPU reset (pending)";
}

// Each MIG-capable GPU's mode and instances, as nvidia-smi -L names them.
std::string migSection(const NodeTopology& topo) {
  std::string out;
  for (const Gpu& g : topo.gpus) {
    if (!g.mig.capable) continue;
    const MigState& m = g.mig;
    out += fmt::format("  {}: MIG {}", NodeTopology::gpuLabel(g.index), migMode(m));
    if (!m.enabled) {
      out += "\n";
      continue;
    }
    out += fmt::format(", {} instance{}\n", m.instances.size(), m.instances.size() == 1 ? "" : "s");
    if (m.instances.empty()) continue;
    out += fmt::format("    {:<4}{:<4}{:<14}{:<6}{:<11}{}\n", "GI", "CI", "PROFILE", "SMS", "MEMORY", "UUID");
    for (const MigInstance& i : m.instances)
      out += fmt::format("    {:<4}{:<4}{:<14}{:<6}{:<11}{}\n", i.gpu_instance, i.compute_instance,
                         i.profile.empty() ? "?" : i.profile, i.sm, gib(i.memory_bytes),
                         i.uuid.empty() ? "-" : i.uuid);
  }
  return out.empty() ? "" : "\nMIG:\n\n" + out;
}

// " (down)" for a NIC that cannot carry traffic: every port's state is known and none is up.
// Ports in other states (init, armed) name those states instead.
std::string nicNote(const Nic& nic) {
  if (nic.ports.empty()) return "";
  std::set<std::string> states;
  for (const NicPort& p : nic.ports) {
    if (p.up() || p.state == PortState::kUnknown) return "";
    states.insert(toString(p.state));
  }
  std::string note;
  for (const std::string& s : states) note += (note.empty() ? "" : "/") + s;
  return " (" + note + ")";
}

}  // namespace

std::string toMatrix(const NodeTopology& topo) {
  if (topo.gpus.empty() && topo.nics.empty()) {
    std::string host = topo.hostname.empty() ? "this node" : topo.hostname;
    return host + ": no GPUs or RDMA NICs found (" + std::to_string(topo.allCpus().size()) + " CPUs in " +
           std::to_string(topo.numa_nodes.size()) + " NUMA nodes)\n";
  }

  // Devices: GPUs 0 to nGpus-1, then the NICs.
  const size_t nGpus = topo.gpus.size();
  const size_t nNics = topo.nics.size();
  const size_t nDevices = nGpus + nNics;
  auto label = [&](size_t d) {
    return d < nGpus ? NodeTopology::gpuLabel(d) : "NIC" + std::to_string(d - nGpus);
  };
  // Row labels mark GPUs that are not NVIDIA's ("GPU3 (AMD)"): no CUDA device, no rank of poolrun's.
  std::set<std::string> otherVendors;
  auto rowLabel = [&](size_t d) {
    if (d >= nGpus || topo.gpus[d].isNvidia()) return label(d);
    uint16_t vendor = topo.gpus[d].vendor;
    std::string mark = vendor == 0 ? "vendor unknown" : vendorName(vendor);
    otherVendors.insert(mark);
    return label(d) + " (" + mark + ")";
  };
  auto path = [&](size_t r, size_t c) -> std::string {
    if (r == c) return "X";
    if (r < nGpus && c < nGpus) return topo.gpuToGpu(r, c).str();
    if (r < nGpus) return topo.gpuToNic(r, c - nGpus).str();
    if (c < nGpus) return topo.gpuToNic(c, r - nGpus).str();
    return topo.nicToNic(r - nGpus, c - nGpus).str();
  };

  // rows[0] is the header; column 0 holds the row labels.
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{""};
  for (size_t d = 0; d < nDevices; ++d) header.push_back(label(d));
  header.push_back("CPU Affinity");
  header.push_back("NUMA Affinity");
  rows.push_back(std::move(header));
  for (size_t r = 0; r < nDevices; ++r) {
    std::vector<std::string> row{rowLabel(r)};
    for (size_t c = 0; c < nDevices; ++c) row.push_back(path(r, c));
    const CpuSet& cpus = r < nGpus ? topo.gpus[r].cpus : topo.nics[r - nGpus].cpus;
    int numa = r < nGpus ? topo.gpus[r].at.numa : topo.nics[r - nGpus].at.numa;
    row.push_back(cpuAffinity(cpus));
    row.push_back(numaAffinity(numa));
    rows.push_back(std::move(row));
  }

  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      line += row[c];
      line.append(width[c] - row[c].size(), ' ');
    }
    // Padding keeps the columns aligned; the last column's padding is only trailing blanks.
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }

  out += "\n";
  out += kLegend;
  for (const std::string& v : otherVendors) {
    out += "  (" + v + ") = not an NVIDIA GPU: no CUDA device, so poolrun plans no CUDA/NCCL ranks on it\n";
  }
  if (nNics > 0) {
    out += "\nNIC Legend:\n\n";
    for (size_t n = 0; n < nNics; ++n) {
      const Nic& nic = topo.nics[n];
      out += "  " + label(nGpus + n) + ": " + nic.name + nicNote(nic) + "\n";
    }
  }
  out += migSection(topo);
  return out;
}

}  // namespace poolrun::topo
