#pragma once

// The tuner's configuration (schema "poolrun.tuner/1"): the hardware the job runs on, optional
// explicit rules and optional measured figures. It describes the machines, not the communicator:
// a communicator's shape (ranks, nodes) comes from NCCL at init.
//
//   {"schema": "poolrun.tuner/1", "fabric": "roce", "nodes": 4, "gpus_per_node": 8,
//    "gpu": {"sm": 90, "nvlink_gbyte_s": 450, "nvswitch": true, "nvls": true},
//    "net": {"nics_per_node": 8, "nic_gbit_s": 400, "gdr": true, "sharp": false},
//    "cpu_vendor": "intel", "rules": [...], "calibration": [...]}
//
// Parsing never half-succeeds: any bad value throws ConfigError naming the value and what to do.

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/tuner/types.hpp"

namespace poolrun::tuner {

inline constexpr std::string_view kConfigSchema = "poolrun.tuner/1";

// A configuration or log that cannot be used; the message is one line naming the bad value.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Fabric : std::uint8_t { kIb, kRoce, kTcp };
enum class CpuVendor : std::uint8_t { kIntel, kAmd, kArm, kOther };

std::string_view fabricName(Fabric f);
std::string_view cpuVendorName(CpuVendor v);

struct GpuSpec {
  int sm = 80;                 // compute capability x10: 70, 80, 86, 90, 100, ...
  double nvlink_gbyte_s = 0;   // NVLink bandwidth per GPU per direction, GB/s; 0 = PCIe only
  bool nvswitch = false;       // GPUs meet through NVSwitch (all-to-all at full NVLink rate)
  bool nvls = false;           // NVLink SHARP usable (SM90+ with NVSwitch)
  double pcie_gbyte_s = 12.0;  // GPU-to-GPU over PCIe where there is no NVLink (NCCL's PCI_BW)
};

struct NetSpec {
  int nics_per_node = 0;
  double nic_gbit_s = 0;  // line rate of one NIC port, Gb/s
  bool gdr = false;       // GPUDirect RDMA between the GPUs and the NICs
  bool sharp = false;     // in-network reduction (CollNet) available
};

// An explicit choice. Matches a collective (any when unset), an inclusive size range, and
// optionally the communicator's node and rank counts, NCCL's numPipeOps and regBuff (-1 = any).
// It prefers the cells that match `algo` and/or `proto` (at least one is set), cheapest first.
struct Rule {
  std::optional<Coll> coll;
  std::uint64_t min_bytes = 0;
  std::uint64_t max_bytes = std::numeric_limits<std::uint64_t>::max();
  int nnodes = -1;
  int nranks = -1;
  int pipe_ops = -1;
  int reg_buff = -1;
  std::optional<Algo> algo;
  std::optional<Proto> proto;
  int channels = 0;    // 0 = leave the channel count to NCCL
  std::string origin;  // "FILE rule 3" or "FILE:12", for messages
};

// A measured time, from nccl-tests. algo/proto are set when the run forced them (NCCL_ALGO /
// NCCL_PROTO); figures of unforced runs are kept for the record but do not rank cells.
struct Measurement {
  Coll coll = Coll::kAllReduce;
  int nranks = 0;
  int nnodes = 0;
  std::optional<Algo> algo;
  std::optional<Proto> proto;
  std::uint64_t bytes = 0;
  double time_us = 0;
  std::string source;
  // How many GPUs the benchmark's process drove (nccl-tests -g N, its "nGpus N"); 0: not stated.
  // It sets the host's floor per call (ModelFit), not the collective's own time.
  int gpus_per_process = 0;
};

struct TunerConfig {
  // False for a configuration made only of example-tuner CSV rules: no hardware, no model.
  bool has_hardware = true;
  Fabric fabric = Fabric::kIb;
  int nodes = 1;
  // The GPUs of a node; net.nics_per_node / gpus_per_node is how many NICs each GPU has at its
  // distance (poolrun run writes the ranks of node 0 and the NICs they use, which gives the same).
  int gpus_per_node = 1;
  GpuSpec gpu;
  NetSpec net;
  CpuVendor cpu_vendor = CpuVendor::kIntel;
  std::vector<Rule> rules;
  std::vector<Measurement> calibration;
  std::string origin;  // where it was read from, for messages
};

// The limits a configuration is read within: files of at most 8 MiB (a configuration of 20,000 rules
// is about 2.4 MiB; `poolrun tuner calibrate` writes it indented, about twice that), regular files
// only, and JSON nested at most 64 levels deep (the schema nests 3; "comment" and "x-" keys may hold
// more). Past them a ConfigError names the file and the limit; nothing is read until memory runs out
// and no input can overflow the stack of the small threads NCCL calls the plugin on.
inline constexpr size_t kConfigFileLimit = size_t{8} << 20;
inline constexpr int kMaxConfigDepth = 64;

// Parses a "poolrun.tuner/1" document. `origin` names it in messages (a path or "POOLRUN_TUNER_CONFIG").
TunerConfig parseConfig(std::string_view jsonText, const std::string& origin);

// POOLRUN_TUNER_CONFIG's value: JSON text if it starts with `{` (after blanks), else a file path.
TunerConfig loadConfig(std::string_view pathOrJson);

// Rules in NCCL's example tuner CSV format, one per line:
//   collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]
// `#` lines and blank lines are skipped; -1 means "any" (channels: "keep NCCL's").
// Unlike the example tuner, unknown names are an error rather than a silent fallback.
std::vector<Rule> parseExampleCsv(std::string_view text, const std::string& origin);

// A configuration holding only the rules of an example-tuner CSV file.
TunerConfig loadExampleCsvFile(const std::string& path);

// The whole of a file the tuner reads (a configuration, rules, an nccl-tests log): a regular file of
// at most `limit` bytes. `what` names it in messages ("tuner config"). Throws ConfigError.
std::string readConfigFile(const std::string& path, const std::string& what, size_t limit = kConfigFileLimit);

// Configurations parsed once per process. NCCL inits a tuner context for every communicator, from
// several threads at once, and a file of 20,000 rules takes about a second to parse. The same text
// (POOLRUN_TUNER_CONFIG holding the JSON itself) or the same file, unchanged, gives the same parsed
// configuration; a file that was replaced or rewritten (another inode, size or modification time) is
// read again. A configuration that failed fails again with the same message without being read again
// while the file is unchanged. Thread-safe; a miss parses under the cache's lock, so that threads
// initing at once parse once.
class ConfigCache {
 public:
  // As loadConfig and loadExampleCsvFile.
  std::shared_ptr<const TunerConfig> load(std::string_view pathOrJson);
  std::shared_ptr<const TunerConfig> loadExampleCsv(const std::string& path);

  // How many times a configuration was parsed (misses), for tests.
  size_t parses() const;

 private:
  struct Entry;
  std::shared_ptr<const TunerConfig> get(bool csv, std::string_view value);

  mutable std::mutex mutex_;
  std::map<std::pair<bool, std::string>, std::shared_ptr<Entry>> entries_;
  size_t parses_ = 0;
};

nlohmann::json measurementToJson(const Measurement& m);
nlohmann::json ruleToJson(const Rule& r);
// The document parseConfig reads back to an equal configuration.
nlohmann::json toJson(const TunerConfig& config);

}  // namespace poolrun::tuner
