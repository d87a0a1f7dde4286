#pragma once

// The cost model: predicted time of one collective for every NCCL algorithm and protocol, from the
// hardware in the configuration and the communicator's shape NCCL reports.
//
// time = latency + bytes / algorithm bandwidth. Latencies follow NCCL's own structure (a base per
// algorithm and protocol plus per-hop terms for NVLink/PCIe/network hops, counted per algorithm
// shape: ring steps, tree depth, NVLS, CollNet, PAT) with a fabric-specific network hop (IB, RoCE and
// TCP differ). Bandwidths come from the configured link and NIC rates times measured efficiencies,
// with NCCL's protocol factors and a fabric-specific LL128 penalty on network hops. The constants and
// where each comes from are listed in model.cpp.

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "poolrun/tuner/config.hpp"
#include "poolrun/tuner/types.hpp"

namespace poolrun::tuner {

// What NCCL tells the tuner at init about the communicator.
struct CommShape {
  int nranks = 1;
  int nnodes = 1;
};

struct Estimate {
  double time_us = 0;
  bool measured = false;  // from the configuration's calibration rather than the model
};

class CostModel {
 public:
  // Throws ConfigError where the configuration cannot model this communicator: it has no hardware
  // section (CSV rules only), or the communicator spans several nodes and no network is described.
  CostModel(const TunerConfig& config, CommShape shape);

  const CommShape& shape() const { return shape_; }
  int ranksPerNode() const { return ppn_; }

  // Whether NCCL's rules let this cell run here: the collective's algorithms, Simple-only
  // algorithms, NVLS only with `nvls`, NVLSTree only on more than one node, CollNet only with `sharp`,
  // PAT only with one GPU per node, LL128 only over NVLink and (across nodes) with GPUDirect RDMA.
  bool valid(Coll coll, Cell cell) const;

  // The model's prediction in microseconds; meaningful only for valid cells.
  double predictUs(Coll coll, Cell cell, std::uint64_t bytes) const;

  // The measured time where the calibration has this collective, cell and shape at this size (or
  // on both sides of it: interpolated in log-log), else the prediction.
  Estimate estimate(Coll coll, Cell cell, std::uint64_t bytes) const;

  // The per-hop network latency this fabric adds to NCCL's (which counts 0 for IB and RoCE alike).
  double fabricHopLatencyUs() const;
  // The factor LL128 keeps of its bandwidth on network hops on this fabric (1 on IB).
  double ll128NetworkFactor() const;

 private:
  double latencyUs(Coll coll, Cell cell, std::uint64_t bytes) const;
  double algoBandwidth(Coll coll, Cell cell) const;  // GB/s of user bytes

  TunerConfig config_;
  CommShape shape_;
  int ppn_ = 1;
  int gen_ = 1;          // 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell
  double intraBus_ = 0;  // GB/s a ring gets inside a node
  double netBus_ = 0;    // GB/s of the node's NICs together
  // Measured points per (coll, algo, proto) for this shape, sorted by bytes.
  std::map<int, std::vector<std::pair<std::uint64_t, double>>> measured_;
};

}  // namespace poolrun::tuner
