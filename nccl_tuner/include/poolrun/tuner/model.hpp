#pragma once

// The cost model: predicted time of one collective for every NCCL algorithm and protocol, from the
// hardware in the configuration and the communicator's shape NCCL reports.
//
// time = latency + bytes / algorithm bandwidth + pipeline fill (ModelFit). Latencies follow NCCL's own
// structure (a base per algorithm and protocol plus per-hop terms for NVLink/PCIe/network hops, counted per
// algorithm shape: ring steps, tree depth, NVLS, CollNet, PAT) with a fabric-specific network hop (IB, RoCE
// and TCP differ). Bandwidths come from the configured link and NIC rates times measured efficiencies, with
// NCCL's protocol factors and a fabric-specific LL128 penalty on network hops; the network is the NICs the
// ranks use (one per rank where a node has more NICs than ranks). The constants and where each comes from are
// listed in model.cpp.

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

// The model's constants fitted to the published tables in nccl_tuner/data/ rather than taken from
// NCCL or a single figure; tests/nccl_tuner/validation_test.cpp refits them (and fits them again
// with each table left out, to predict that table) and checks that defaultFit() is the fit.
//
// Pipeline fill: NCCL pipelines a collective in chunks through the steps of its algorithm (2(n-1)
// for a ring allreduce, 2((ranks per node - 1) + tree depth) for a tree, ranks per node - 1 for NVLS,
// whose chunks NCCL shrinks below sizes that grow with the node's GPUs (src/enqueue.cc, its heads x
// channels x chunk): pipelineSteps()), and the steps of the first chunk cannot overlap; at every
// step it also waits the hop's latency, so the cell's latency counts one step more for every 8 us of
// it (model.cpp, kFillLatencyPerStepUs). Its chunks grow with the message until NCCL's buffers cap
// them, so the fill grows with the message and then stays:
// fill_step_us x (steps + latency / 8 us) x bytes / (bytes + fill_half_bytes) per call, added to the
// LL128 and Simple cells (LL sends 8-byte lines through small buffers and is used where the fill is
// negligible). Counted per step alone it overfilled 8-GPU rings (the 8x A100 tables) once the 8x
// H200's NVLS pulled the fit; one fill for every cell underfilled 2- to 6-GPU slices (see
// nccl_tuner/README.md). No table checks it on rings across nodes (62 steps for 32 ranks), where it
// is an extrapolation.
//
// Launch floor: a benchmark issues its calls back to back, so a call it measures takes at least the
// host's time to launch it, one kernel launch (and NCCL's enqueue) for each GPU its process drives
// (nccl-tests -g N drives N from one thread); what it measures is the larger of that floor and the
// collective's own time. The floor is the same for every cell, so it changes no choice: the plugin
// ranks cells by predictUs; comparisons with measured tables use callUs.
struct ModelFit {
  double fill_step_us = 0;     // the fill per pipeline step once chunks are at their largest
  double fill_half_bytes = 1;  // the message size at which the fill is half of that
  double launch_us = 0;        // the host's time per call and GPU its process drives
};
ModelFit defaultFit();

struct Estimate {
  double time_us = 0;
  bool measured = false;  // from the configuration's calibration rather than the model
};

class CostModel {
 public:
  // Throws ConfigError where the configuration cannot model this communicator: it has no hardware
  // section (CSV rules only), or the communicator spans several nodes and no network is described.
  CostModel(const TunerConfig& config, CommShape shape, ModelFit fit = defaultFit());

  const CommShape& shape() const { return shape_; }
  int ranksPerNode() const { return ppn_; }

  // Whether NCCL's rules let this cell run here: the collective's algorithms, Simple-only
  // algorithms, NVLS only with `nvls`, NVLSTree only on more than one node, CollNet only with `sharp`,
  // PAT only with one GPU per node, LL128 only over NVLink and (across nodes) with GPUDirect RDMA.
  bool valid(Coll coll, Cell cell) const;

  // The model's prediction in microseconds; meaningful only for valid cells.
  double predictUs(Coll coll, Cell cell, std::uint64_t bytes) const;
  // What a benchmark issuing calls back to back from processes that each drive `gpusPerProcess`
  // GPUs (0: not known, taken as 1) measures: the prediction, at least the launch floor.
  double callUs(Coll coll, Cell cell, std::uint64_t bytes, int gpusPerProcess) const;
  // The steps a chunk passes through in sequence (the pipeline the fill is counted on, with the
  // latency's share: see ModelFit).
  int pipelineSteps(Coll coll, Cell cell) const;

  // The measured time where the calibration has this collective, cell and shape at this size (or
  // on both sides of it: interpolated in log-log), else the prediction.
  Estimate estimate(Coll coll, Cell cell, std::uint64_t bytes) const;

  // The per-hop network latency this fabric adds to NCCL's (which counts 0 for IB and RoCE alike).
  double fabricHopLatencyUs() const;
  // The factor LL128 keeps of its bandwidth on network hops on this fabric (1 on IB).
  double ll128NetworkFactor() const;
  // The NICs of a node that the communicator's ranks use: each GPU sends through the NICs nearest
  // it, so with fewer ranks than NICs on a node the others stay idle (NCCL_IB_HCA listing them or
  // not), and a GPU with several NICs at one distance (nics_per_node / gpus_per_node of them, the
  // node's GPUs, not the ranks) spreads its channels over all of them.
  int nicsUsed() const;

 private:
  double latencyUs(Coll coll, Cell cell, std::uint64_t bytes) const;
  double algoBandwidth(Coll coll, Cell cell) const;  // GB/s of user bytes

  TunerConfig config_;
  CommShape shape_;
  ModelFit fit_;
  int ppn_ = 1;
  int gen_ = 1;          // 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell
  double intraBus_ = 0;  // GB/s a ring gets inside a node
  double netBus_ = 0;    // GB/s of the node's NICs together
  // Measured points per (coll, algo, proto) for this shape, sorted by bytes.
  std::map<int, std::vector<std::pair<std::uint64_t, double>>> measured_;
};

}  // namespace poolrun::tuner
