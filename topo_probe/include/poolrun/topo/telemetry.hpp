#pragma once

// What a node's GPUs and NIC ports are doing now: the samples a node agent sends in its
// heartbeats. GPUs are read through NVML (dlopen, as the prober does), NIC ports from sysfs (as the
// doctor reads them). Each value is optional: a driver that lacks a call, or a GPU that fails one,
// leaves it empty rather than zero, and says why in `error`. A GPU that does not have a counter
// (NVML_ERROR_NOT_SUPPORTED: no ECC on a GeForce, no power reading on some boards) leaves it empty
// without a word in `error`.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/topo/topology.hpp"

namespace poolrun::topo {

using SampleTime = std::chrono::system_clock::time_point;

struct GpuProcess {
  uint32_t pid = 0;
  uint64_t used_memory_bytes = 0;  // 0 where NVML does not say (NVML_VALUE_NOT_AVAILABLE)
  bool operator==(const GpuProcess&) const = default;
};

// An XID error the driver reported (nvmlEventTypeXidCriticalError): 48 is a double-bit ECC error,
// 79 a GPU that fell off the bus, 63/64 row remapping events, and so on.
struct XidEvent {
  uint64_t xid = 0;
  SampleTime time;  // when the sampler took it from the driver (NVML gives events no time)
  bool operator==(const XidEvent&) const = default;
};

struct GpuSample {
  size_t index = kNoIndex;  // the GPU's index in the node's NodeTopology (PCI order); kNoIndex: none
  std::string uuid;         // "GPU-...": NVML's, else the topology's
  std::string pci;          // "0000:18:00.0", lowercase, as PciAddress::str()
  SampleTime time;
  std::optional<double> sm_utilization;      // 0 to 1 (nvmlDeviceGetUtilizationRates .gpu / 100)
  std::optional<double> memory_utilization;  // 0 to 1 (.memory / 100: time the memory was busy)
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  // Energy the GPU has drawn since its driver loaded, in millijoules
  // (nvmlDeviceGetTotalEnergyConsumption; Volta and later): the usage ledger's energy, exact between
  // samples however far apart.
  std::optional<uint64_t> energy_mj;
  std::optional<uint64_t> ecc_uncorrected_volatile;  // since the driver loaded
  bool retired_pages_pending = false;                // a page retirement waits for a reset
  bool remapping_failure = false;                    // row remapping failed: the GPU needs service
  std::vector<XidEvent> xid_events;                  // since the previous sample
  std::vector<GpuProcess> processes;                 // compute processes running on it
  std::string error;                                 // what could not be read, where something
  bool operator==(const GpuSample&) const = default;
};

struct NicPortSample {
  std::string nic;  // "mlx5_0"
  int port = 1;
  PortState state = PortState::kUnknown;
  double rate_gbps = 0;
  SampleTime time;
  bool operator==(const NicPortSample&) const = default;
};

// Samples one node. Opens NVML once (and keeps it open: an XID event set lives as long as the
// session), registers for XID events on every GPU that supports them, and maps NVML's devices to
// the topology's GPUs by PCI bus id. Where NVML is absent, gpus() returns one sample per GPU of the
// topology with only its index, UUID (as the topology has it), PCI address and `error` set, and
// nvmlWhy() says why. A GPU of the topology that NVML does not list has `error` saying so.
//
// Cost: one sample of a GPU is about ten NVML calls (no waiting: queued XID events are drained
// with a timeout of 0); NIC ports are two small sysfs reads each. Not thread-safe: one thread
// samples. NVML is opened once: a sampler made before the driver loaded stays without it (make a
// new one).
class TelemetrySampler {
 public:
  // `sysfs_root`: the root under which sys/class/infiniband is read ("/" on a real node, a fake
  // tree in tests: ROOT/sys/class/infiniband/DEV/ports/N/{state,rate}).
  explicit TelemetrySampler(const NodeTopology& topology, std::string sysfs_root = "/");
  ~TelemetrySampler();
  TelemetrySampler(const TelemetrySampler&) = delete;
  TelemetrySampler& operator=(const TelemetrySampler&) = delete;

  bool nvmlOk() const;
  const std::string& nvmlWhy() const;  // empty where NVML is open

  // One sample per GPU of the topology, in index order; XID events are those since the last call.
  std::vector<GpuSample> gpus();
  // One sample per port of every NIC of the topology (port 1 for a NIC whose ports it does not
  // list); a port whose files cannot be read has state kUnknown and rate 0.
  std::vector<NicPortSample> nics() const;
  // Per GPU of the topology, its MIG state as NVML reports it now (the layout an administrator or
  // the agent changed); nullopt where NVML does not list the GPU or is absent.
  std::vector<std::optional<MigState>> mig() const;
  // Makes GPU `gpu`'s MIG layout `profiles` through NVML (each a GPU instance with one compute
  // instance spanning it): "" when done, else what failed and what to do.
  std::string applyMigLayout(size_t gpu, const std::vector<std::string>& profiles);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// XIDs that mean a GPU must not take new work until an administrator has looked at it: 48 (double
// bit ECC error), 79 (fallen off the bus). Others (13, 31, 43, 45: application errors) are reported
// but do not fail a GPU.
bool xidFailsGpu(uint64_t xid);

}  // namespace poolrun::topo
