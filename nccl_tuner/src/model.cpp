#include "poolrun/tuner/model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace poolrun::tuner {
namespace {

// ---- Constants and where they come from ----------------------------------------------------------
// [N] NCCL 2.28.9 src/graph/tuning.cc (via ../shared/ref/nccl-tuner.md section 4): taken as facts.
// [M] derived from published measurements (../shared/ref/perf-anchors.md).
// [E] poolrun's estimate, to be replaced by `poolrun tuner calibrate` where it matters.
// [F] fitted to the published tables of nccl_tuner/data/ (ModelFit, defaultFit() below).

constexpr int kNvlinkHw = 0, kPciHw = 1, kNetHw = 2;
constexpr double kNa = 0;  // a cell that NCCL never runs

// [N] base latency, us, [algo][LL, LL128, Simple].
constexpr double kBaseLatency[kNumAlgos][kNumProtos] = {
    {6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {8.0, 8.0, 8.0}};

// [N] per-hop hardware latency, us, [NVLink, PCI, NET][algo][LL, LL128, Simple].
constexpr double kHopLatency[3][kNumAlgos][kNumProtos] = {
    {{0.6, 1.25, 4.0},
     {0.6, 1.9, 3.4},
     {kNa, kNa, 3.7},
     {kNa, kNa, 2.8},
     {kNa, kNa, 25},
     {kNa, kNa, 25},
     {kNa, kNa, 4.0}},
    {{1.0, 1.9, 4.0},
     {1.0, 2.5, 5.7},
     {kNa, kNa, 3.7},
     {kNa, kNa, 2.8},
     {kNa, kNa, 0},
     {kNa, kNa, 0},
     {kNa, kNa, 4.0}},
    {{5.0, 8.5, 14},
     {2.7, 4.0, 14.0},
     {kNa, kNa, 31},
     {kNa, kNa, 30},
     {kNa, kNa, 18},
     {kNa, kNa, 20.9},
     {kNa, kNa, 14}},
};

// [N] LL bus-bandwidth ceiling, GB/s. One node: row = GPU generation; several nodes: row 0 for
// Intel hosts, row 1 for AMD; columns 1 node / 2 nodes / 3 or more.
constexpr double kLlMaxBw[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
// One node: the share of NCCL's LL ceiling that LL reaches, per generation. [M] Ampere: the published
// 8x A100 series (D) grows by 21.5 us from 512 KiB to 1 MiB, an LL bus bandwidth of 43 GB/s against
// NCCL's 87.7 (0.51). [M] Hopper: NCCL_PROTO=LL on 4x H100 at 256 MiB measured 147 GB/s busbw against
// NCCL's 141 (nccl_tuner/data/h100-nx1-nvswitch-slices.json), so NCCL's ceiling holds (1.0). [N] Volta
// and Blackwell: NCCL's ceiling, for want of a measurement.
constexpr double kLlOneNodeScale[4] = {1.0, 0.51, 1.0, 1.0};

// [M] Share of the NVLink rate (per GPU, per direction) a Simple ring allreduce reaches as busbw:
// A100 231-235 of 300 GB/s (0.78), H100 365-370 of 450 (0.82); Volta taken as Ampere and Blackwell
// between the two [E].
constexpr double kNvlinkRingEfficiency[4] = {0.78, 0.78, 0.82, 0.80};
// [M] NVLS allreduce: each GPU sends its whole buffer into the switch (its share of every reduction)
// plus its reduced share out to the multicast, and receives as much: (n+1)/n x bytes each way, so the
// algorithm bandwidth is the NVLink rate x efficiency x n/(n+1) (NCCL's maintainer gives this ratio in
// NVIDIA/nccl-tests#212). The efficiency is the share of the rate that traffic reaches: 8x H100 NVLS
// algbw ~275 of 450 GB/s (NVIDIA, nccl-tests#212) gives 275 x 9/8 / 450 = 0.69, and 2, 4 and 6 H100s
// with NCCL_ALGO=NVLS measured 207, 251 and 266 GB/s (data/h100-nx1-nvswitch-slices.json), 5, 7 and
// 8 H200s 259, 268 and 270 (data/h200-nx1-ml-engineering.json): the same 0.69 to within 3%.
// Blackwell: 8x B300 NVLS algbw 483 of 900 GB/s (NVIDIA/nccl#2140): 0.60.
constexpr double kNvlsLinkEfficiency[4] = {0, 0, 0.69, 0.60};
// [N] NCCL's nvlsEfficiency, used for NVLS allgather/reducescatter.
constexpr double kNvlsEfficiency[4] = {0, 0, 0.85, 0.74};

// [N] Protocol and algorithm factors.
constexpr double kLlFactor = 0.5;       // 8-byte lines carry 4 bytes of flags
constexpr double kLl128Factor = 0.92;   // ring LL128
constexpr double kTreeFactor = 0.92;    // tree allreduce
constexpr double kTreeLlDivisor = 3.8;  // tree LL
constexpr double kTreeLl128OneNode = 7.0 / 9.0;
constexpr double kTreeLl128Nodes = 120.0 / 128.0;
constexpr double kPatFactor = 0.75;
constexpr double kCollNetFactor = 0.9;       // in-network reduction against the NIC rate
constexpr double kCollNetDirectSm90 = 0.85;  // CollNetDirect on SM90+
// [N] Ring/Simple allreduce over several nodes: latency x1.4 (x1.9 before SM80) once each rank's share
// per channel reaches 64 bytes ("plateau").
constexpr double kPlateauFactor[2] = {1.9, 1.4};

// Network per fabric, indexed by Fabric.
// [M] Share of the NIC line rate NCCL reaches per NIC: HDR 24 of 25 GB/s, NDR 46-49 of 50 (IB);
// RoCE a little lower for its larger headers and congestion control [E]; TCP sockets [E].
constexpr double kNetEfficiency[3] = {0.95, 0.90, 0.60};
// [E] Extra latency per network hop over NCCL's (which is the same for IB and RoCE): end-to-end IB HDR
// is ~0.6 us and RDMA over Ethernet ~2 us, so RoCE pays ~1.4 us more per hop; TCP 10-50 us, take 25.
constexpr double kFabricHopUs[3] = {0.0, 1.4, 25.0};
// [E] LL128 bandwidth kept on network hops: LL128 underperforms Simple on inter-node RoCE at large
// sizes ("Demystifying NCCL"); modelled as a 20% bandwidth penalty on RoCE.
constexpr double kLl128NetFactor[3] = {1.0, 0.80, 1.0};
// [E] Without GPUDirect RDMA the data is staged through host memory.
constexpr double kNoGdrFactor = 0.8;
// [F] The pipeline fill (ModelFit) counts, besides the algorithm's steps, one step for every 8 us of
// the cell's latency (NCCL's base plus its per-hop terms): a chunk waits that latency at each hop as
// well as its transfer. 8 us (near NCCL's Simple base latency, 8.4) is the best leave-one-table-out
// of those tried (3.3 to 17 us; nccl_tuner/README.md); fitted freely with the fill, a share of the
// latency predicted the held-out tables worse (the 8x A100 Azure table 41% off from 1 MiB).
constexpr double kFillLatencyPerStepUs = 8.0;
// [N] NCCL's tree correction: trees run below their modelled bandwidth at medium sizes, and NCCL
// scales a Tree allreduce's bandwidth by a factor per power of two of the size, 64 B (index 0) to
// 256 MiB (index 22), [LL, LL128, Simple]; unchanged from NCCL 2.17 to 2.28 (src/graph/tuning.cc).
constexpr double kTreeCorrection[kNumProtos][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

// [N] NCCL_NET_OVERHEAD default: 1 us on Intel (and others), 2 us on AMD; x3 for Simple.
constexpr double kNetOverheadUs[4] = {1.0, 2.0, 1.0, 1.0};

int floorLog2(int x) {
  int r = 0;
  while (x > 1) {
    x >>= 1;
    ++r;
  }
  return r;
}

int key(Coll c, Cell cell) {
  return (static_cast<int>(c) * kNumAlgos + static_cast<int>(cell.algo)) * kNumProtos +
         static_cast<int>(cell.proto);
}

}  // namespace

// [F] The fit to all the tables of nccl_tuner/data/ (least mean |log error| from 64 KiB up, each
// table weighing the same; tests/nccl_tuner/validation_test.cpp refits it and checks these values).
ModelFit defaultFit() {
  ModelFit f;
  f.fill_step_us = 13.5;
  f.fill_half_bytes = 33554432;  // 32 MiB
  f.launch_us = 6.0;
  return f;
}

CostModel::CostModel(const TunerConfig& config, CommShape shape, ModelFit fit)
    : config_(config), shape_(shape), fit_(fit) {
  if (!config.has_hardware) {
    throw ConfigError("tuner config " + config.origin +
                      ": holds rules only and no hardware, so there is nothing to model (use a "
                      "poolrun.tuner/1 JSON configuration)");
  }
  if (shape_.nranks < 1 || shape_.nnodes < 1 || shape_.nnodes > shape_.nranks) {
    throw ConfigError("tuner: a communicator of " + std::to_string(shape_.nranks) + " ranks on " +
                      std::to_string(shape_.nnodes) + " nodes cannot be modelled (need 1 <= nodes <= ranks)");
  }
  ppn_ = (shape_.nranks + shape_.nnodes - 1) / shape_.nnodes;
  const int sm = config_.gpu.sm;
  gen_ = sm >= 100 ? 3 : sm >= 90 ? 2 : sm >= 80 ? 1 : 0;
  intraBus_ = config_.gpu.nvlink_gbyte_s > 0 ? config_.gpu.nvlink_gbyte_s * kNvlinkRingEfficiency[gen_]
                                             : config_.gpu.pcie_gbyte_s;
  const auto f = static_cast<size_t>(config_.fabric);
  netBus_ = nicsUsed() * config_.net.nic_gbit_s / 8.0 * kNetEfficiency[f];
  if (!config_.net.gdr && config_.fabric != Fabric::kTcp) netBus_ *= kNoGdrFactor;
  if (shape_.nnodes > 1 && netBus_ <= 0) {
    throw ConfigError("tuner config " + config_.origin + ": the communicator spans " +
                      std::to_string(shape_.nnodes) +
                      " nodes but the configuration describes no network (set net.nics_per_node and "
                      "net.nic_gbit_s)");
  }
  for (const Measurement& m : config_.calibration) {
    if (!m.algo || !m.proto || m.nranks != shape_.nranks || m.nnodes != shape_.nnodes) continue;
    measured_[key(m.coll, {*m.algo, *m.proto})].emplace_back(m.bytes, m.time_us);
  }
  for (auto& [k, points] : measured_) {
    std::sort(points.begin(), points.end());
    // Several figures for one size (repeated runs): keep the fastest, as nccl-tests users read them.
    std::vector<std::pair<std::uint64_t, double>> unique;
    for (const auto& p : points) {
      if (!unique.empty() && unique.back().first == p.first) {
        unique.back().second = std::min(unique.back().second, p.second);
      } else {
        unique.push_back(p);
      }
    }
    points = std::move(unique);
  }
}

int CostModel::nicsUsed() const {
  // [M] 2 x 1 H100 with 4x 400G RoCE NICs on 8-GPU hosts, Tree forced: 41 GB/s at 8 GiB, one NIC's
  // worth (nccl-tests#232); 2 x 8 A100 with 16x 100G RoCE (two a GPU): 238 GB/s busbw at 8 GiB,
  // past what 8 of the 16 carry (oracle-quickstart/oci-hpc-oke).
  const int perGpu = std::max(1, config_.net.nics_per_node / std::max(1, config_.gpus_per_node));
  return std::min(config_.net.nics_per_node, ppn_ * perGpu);
}

double CostModel::fabricHopLatencyUs() const {
  return kFabricHopUs[static_cast<size_t>(config_.fabric)];
}

double CostModel::ll128NetworkFactor() const {
  return kLl128NetFactor[static_cast<size_t>(config_.fabric)];
}

bool CostModel::valid(Coll coll, Cell cell) const {
  const int n = shape_.nranks, k = shape_.nnodes;
  const Algo a = cell.algo;
  const Proto p = cell.proto;
  if (n == 1) return a == Algo::kRing && p == Proto::kSimple;
  if (p == Proto::kLL128) {
    const bool intraOk = config_.gpu.nvlink_gbyte_s > 0 || ppn_ == 1;
    const bool interOk = k == 1 || config_.net.gdr;
    if (config_.gpu.sm < 70 || !intraOk || !interOk) return false;
  }
  const bool simpleOnly = a != Algo::kTree && a != Algo::kRing;
  if (simpleOnly && p != Proto::kSimple) return false;
  const bool nvls = config_.gpu.nvls;
  const bool sharp = config_.net.sharp;
  switch (coll) {
    case Coll::kBroadcast:
    case Coll::kReduce:
      return a == Algo::kRing;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
      switch (a) {
        case Algo::kRing:
          return true;
        case Algo::kPat:
          return k == n && k > 1;
        case Algo::kNvls:
          return nvls && ppn_ > 1 && ppn_ <= 32 && (k == 1 || sharp);
        case Algo::kCollNetDirect:
          return sharp && config_.gpu.nvswitch && k > 1 && ppn_ <= 8;
        default:
          return false;
      }
    case Coll::kAllReduce:
      switch (a) {
        case Algo::kTree:
        case Algo::kRing:
          return true;
        case Algo::kCollNetDirect:
          return sharp && config_.gpu.nvswitch && k > 1 && ppn_ <= 8;
        case Algo::kCollNetChain:
          return sharp && k > 1 && ppn_ <= 8;
        case Algo::kNvls:
          return nvls && ppn_ > 1 && (k == 1 || sharp);
        case Algo::kNvlsTree:
          return nvls && ppn_ > 1 && k > 1;
        case Algo::kPat:
          return false;
      }
  }
  return false;
}

double CostModel::latencyUs(Coll coll, Cell cell, std::uint64_t bytes) const {
  const int n = shape_.nranks, k = shape_.nnodes;
  const auto a = static_cast<size_t>(cell.algo);
  const auto p = static_cast<size_t>(cell.proto);
  const int intraHw = config_.gpu.nvlink_gbyte_s > 0 ? kNvlinkHw : kPciHw;
  const double intraLat = kHopLatency[intraHw][a][p];
  // A network hop: NCCL's, the tree's where each node holds one rank, plus the fabric's own (twice for
  // Simple, which also waits for the receive-side flush, as NCCL counts its net latency).
  const size_t netAlgo = ppn_ == 1 ? static_cast<size_t>(Algo::kTree) : a;
  double interLat = kHopLatency[kNetHw][netAlgo][p];
  if (cell.algo == Algo::kPat) interLat = kHopLatency[kNetHw][a][p];
  interLat += fabricHopLatencyUs() * (cell.proto == Proto::kSimple ? 2.0 : 1.0);
  const double overhead =
      kNetOverheadUs[static_cast<size_t>(config_.cpu_vendor)] * (cell.proto == Proto::kSimple ? 3.0 : 1.0);
  const double base = kBaseLatency[a][p];
  const int depth = floorLog2(k);

  switch (cell.algo) {
    case Algo::kRing: {
      const double intraStep = k > 1 ? std::max(intraLat, overhead) : intraLat;
      int steps = n - 1, netSteps = k - 1;
      if (coll == Coll::kAllReduce) {
        steps = 2 * (n - 1);
        netSteps = 2 * (k - 1);
      }
      double lat = base + (steps - netSteps) * intraStep + netSteps * interLat;
      if (coll == Coll::kAllReduce && k > 1 && cell.proto == Proto::kSimple) {
        // NCCL opens about two channels per NIC.
        const double channels = std::max(2, 2 * nicsUsed());
        if (static_cast<double>(bytes) / (channels * n) >= 64) lat *= kPlateauFactor[gen_ >= 1 ? 1 : 0];
      }
      return lat;
    }
    case Algo::kTree:
      return base + 2.0 * ((ppn_ - 1) * intraLat + depth * interLat);
    case Algo::kCollNetDirect:
      return base + 2.0 * (std::min(1, ppn_ - 1) * intraLat + (ppn_ - 1) * 0.4) + interLat;
    case Algo::kCollNetChain:
      return base + 2.0 * (ppn_ - 1) * intraLat + interLat;
    case Algo::kNvls:
      return intraLat + (k > 1 ? interLat : 0.0);
    case Algo::kNvlsTree:
      return intraLat + 2.0 * depth * interLat;
    case Algo::kPat:
      return base + depth * interLat / 3.5 + 2.8 * n;
  }
  return base;
}

int CostModel::pipelineSteps(Coll coll, Cell cell) const {
  const int n = shape_.nranks, k = shape_.nnodes, depth = floorLog2(k);
  switch (cell.algo) {
    case Algo::kRing:
      return coll == Coll::kAllReduce ? 2 * (n - 1) : n - 1;
    case Algo::kTree:
      return 2 * ((ppn_ - 1) + depth);
    case Algo::kNvls:
      return (ppn_ - 1) + (k > 1 ? 1 : 0);
    case Algo::kNvlsTree:
      return (ppn_ - 1) + 2 * depth;
    case Algo::kCollNetDirect:
      return 2 * std::min(1, ppn_ - 1) + 1;
    case Algo::kCollNetChain:
      return 2 * (ppn_ - 1) + 1;
    case Algo::kPat:
      return n - 1;
  }
  return 1;
}

double CostModel::algoBandwidth(Coll coll, Cell cell) const {
  const int n = shape_.nranks, k = shape_.nnodes;
  const double busFactor = busBandwidthFactor(coll, n);
  const double nvlink = config_.gpu.nvlink_gbyte_s;
  const double ll128Net = ll128NetworkFactor();
  const double inf = std::numeric_limits<double>::infinity();
  const double llCap = k == 1 ? kLlMaxBw[gen_][0] * kLlOneNodeScale[gen_]
                              : kLlMaxBw[config_.cpu_vendor == CpuVendor::kAmd ? 1 : 0][std::min(k - 1, 2)];
  // The tree's and NVLSTree's network stage, as algorithm bandwidth: with two nodes each node sends
  // and receives the buffer once; with more, interior nodes of the double tree carry it twice.
  const double treeNet = k > 1 ? netBus_ * (k == 2 ? 1.0 : 0.5) : inf;
  const double nvlsAllReduce = nvlink * kNvlsLinkEfficiency[gen_] * ppn_ / (ppn_ + 1.0);

  switch (cell.algo) {
    case Algo::kRing: {
      const double intra = ppn_ > 1 ? intraBus_ : inf;
      const double net = k > 1 ? netBus_ : inf;
      double bus = std::min(intra, net);
      if (cell.proto == Proto::kLL) bus = std::min(bus * kLlFactor, llCap);
      if (cell.proto == Proto::kLL128) bus = kLl128Factor * std::min(intra, net * ll128Net);
      return bus / busFactor;
    }
    case Algo::kTree: {
      const double chain = ppn_ > 1 ? intraBus_ * 0.5 : inf;
      // In NCCL's terms: the tree's bus bandwidth, halved to algorithm bandwidth at the end.
      double bus = 2.0 * std::min(chain, treeNet) * kTreeFactor;
      if (cell.proto == Proto::kLL) bus = std::min(bus / kTreeLlDivisor, llCap);
      if (cell.proto == Proto::kLL128) {
        const bool netBound = treeNet < chain;
        bus *= (k == 1 ? kTreeLl128OneNode : kTreeLl128Nodes) * (netBound ? ll128Net : 1.0);
      }
      return bus * 0.5;
    }
    case Algo::kNvls: {
      const double net = k > 1 ? netBus_ * kCollNetFactor : inf;
      if (coll == Coll::kAllReduce) return std::min(nvlsAllReduce, net);
      const double bus = nvlink * kNvlsEfficiency[gen_] * (ppn_ - 1) / ppn_;
      return std::min(bus / busFactor, net);
    }
    case Algo::kNvlsTree:
      return std::min(nvlsAllReduce, treeNet);
    case Algo::kCollNetDirect: {
      const double net = netBus_ * kCollNetFactor * (config_.gpu.sm >= 90 ? kCollNetDirectSm90 : 1.0);
      if (coll == Coll::kAllReduce) return std::min(intraBus_, net);
      return std::min(intraBus_, net) / busFactor;
    }
    case Algo::kCollNetChain:
      return std::min(intraBus_ * 0.5, netBus_ * kCollNetFactor);
    case Algo::kPat:
      return netBus_ * kPatFactor / busFactor;
  }
  return 0;
}

double CostModel::predictUs(Coll coll, Cell cell, std::uint64_t bytes) const {
  const double lat = latencyUs(coll, cell, bytes);
  double bw = algoBandwidth(coll, cell);
  if (cell.algo == Algo::kTree && coll == Coll::kAllReduce && ppn_ > 1 && bytes >= 64) {
    const int bucket = floorLog2(static_cast<int>(std::min<std::uint64_t>(bytes >> 6, 1u << 30)));
    if (bucket < 23) bw *= kTreeCorrection[static_cast<size_t>(cell.proto)][bucket];
  }
  if (!(bw > 0)) return std::numeric_limits<double>::infinity();
  const double b = static_cast<double>(bytes);
  const double steps = pipelineSteps(coll, cell) + lat / kFillLatencyPerStepUs;
  const double fill =
      cell.proto == Proto::kLL ? 0.0 : fit_.fill_step_us * steps * b / (b + fit_.fill_half_bytes);
  return lat + b / (bw * 1e3) + fill;
}

double CostModel::callUs(Coll coll, Cell cell, std::uint64_t bytes, int gpusPerProcess) const {
  return std::max(fit_.launch_us * std::max(1, gpusPerProcess), predictUs(coll, cell, bytes));
}

Estimate CostModel::estimate(Coll coll, Cell cell, std::uint64_t bytes) const {
  auto it = measured_.find(key(coll, cell));
  if (it != measured_.end()) {
    const auto& pts = it->second;
    auto hi = std::lower_bound(pts.begin(), pts.end(), std::make_pair(bytes, 0.0),
                               [](const auto& x, const auto& y) { return x.first < y.first; });
    if (hi != pts.end() && hi->first == bytes) return {hi->second, true};
    if (hi != pts.end() && hi != pts.begin() && bytes > 0) {
      const auto lo = std::prev(hi);
      if (lo->first > 0) {
        const double t =
            (std::log(static_cast<double>(bytes)) - std::log(static_cast<double>(lo->first))) /
            (std::log(static_cast<double>(hi->first)) - std::log(static_cast<double>(lo->first)));
        return {std::exp(std::log(lo->second) + t * (std::log(hi->second) - std::log(lo->second))), true};
      }
    }
  }
  return {predictUs(coll, cell, bytes), false};
}

}  // namespace poolrun::tuner
