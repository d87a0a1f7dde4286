// The binding planner (see plan.hpp). Each distinct (topology, granted GPUs) pair is planned once
// and reused, so that a 12,500-node cluster of one machine type costs one node's planning.

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "poolrun/common/error.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/topo/fabric.hpp"
#include "poolrun/topo/hostlist.hpp"

namespace poolrun::launcher {
namespace {

using topo::CpuSet;
using topo::Fabric;
using topo::LinkLayer;
using topo::NodeTopology;
using topo::Path;
using topo::PathType;

int rankOf(const Path& p) {
  // Lower is closer; more NVLinks is closer still.
  return p.type == PathType::kNVLink ? -p.nvlinks : static_cast<int>(p.type);
}

// A GPU that takes no rank, for messages: "AMD GPU 1002:66a1".
std::string vendorWord(const topo::Gpu& g) {
  return g.vendor == 0 ? "unknown-vendor" : topo::vendorName(g.vendor);
}
std::string describeOther(const topo::Gpu& g) {
  return vendorWord(g) + " GPU " + fmt::format("{:04x}:{:04x}", g.vendor, g.device);
}

Fabric chooseFabric(const std::vector<NodeGrant>& grants, const PlanRequest& request) {
  auto supports = [](const NodeGrant& g, Fabric f) {
    return topo::nodeCarries(*g.node->topology, g.node->fabric, f);
  };
  if (request.fabric) {
    if (*request.fabric == Fabric::kTcp) return Fabric::kTcp;
    for (const NodeGrant& g : grants) {
      if (!supports(g, *request.fabric)) {
        throw badInput("--fabric " + toString(*request.fabric) + ": node " + g.node->name +
                       " has no usable " + (*request.fabric == Fabric::kIb ? "InfiniBand" : "RoCE") +
                       " port (see `poolrun topo`); use --fabric auto or pick other nodes");
      }
    }
    return *request.fabric;
  }
  for (Fabric f : {Fabric::kIb, Fabric::kRoce}) {
    if (std::all_of(grants.begin(), grants.end(), [&](const NodeGrant& g) { return supports(g, f); }))
      return f;
  }
  return Fabric::kTcp;
}

// GPUs of a node in the order that puts the fastest link between consecutive ranks: from the
// first GPU, always the closest not yet taken (NVLink, then one switch, then one NUMA node).
std::vector<size_t> chainOrder(const NodeTopology& t, std::vector<size_t> gpus) {
  std::sort(gpus.begin(), gpus.end());
  std::vector<size_t> out;
  std::vector<bool> taken(gpus.size(), false);
  for (size_t step = 0; step < gpus.size(); ++step) {
    size_t pick = 0;
    if (step == 0) {
      pick = 0;
    } else {
      int best = 1 << 30;
      for (size_t i = 0; i < gpus.size(); ++i) {
        if (taken[i]) continue;
        int r = rankOf(t.gpuToGpu(out.back(), gpus[i]));
        if (r < best) best = r, pick = i;
      }
    }
    taken[pick] = true;
    out.push_back(gpus[pick]);
  }
  return out;
}

// One local rank's node-level decisions (the same on every node of the same type and grant).
struct LocalPlan {
  size_t gpu = 0;
  int cuda_index = 0;
  std::string mig;
  std::vector<NicChoice> nics;
  Path path;
  NetTransport transport = NetTransport::kNone;
  bool gdr = false;
  std::string gdr_reason;
  int numa = topo::kNone;
  CpuSet cpuset;
  bool shares_cpus = false;
  bool whole_cores = true;
  std::vector<std::string> notes;
};

struct NodeTemplate {
  std::vector<LocalPlan> locals;
  std::vector<unsigned> coreLogical;  // per OS CPU: logical core index
  std::vector<unsigned> puLogical;    // per OS CPU: logical hardware-thread index
};

struct Candidate {
  topo::NicPortRef at;
  Path path;
};

std::vector<NicChoice> choose(const NodeTopology& t, const std::vector<Candidate>& picked) {
  std::vector<NicChoice> out;
  for (const Candidate& c : picked) {
    const topo::Nic& nic = t.nics[c.at.nic];
    const topo::NicPort& port = nic.ports[c.at.port];
    const topo::NicAccess access = topo::nicAccess(nic);
    NicChoice ch;
    ch.name = nic.name;
    ch.port = port.port;
    ch.netdev = port.netdev;
    if (ch.netdev.empty() && access == topo::NicAccess::kSocket) ch.netdev = nic.name;
    ch.link_layer = port.link_layer;
    ch.roce_v2_gid_index = port.roce_v2_gid_index;
    ch.rate_gbps = port.rate_gbps;
    ch.verbs = access == topo::NicAccess::kVerbs &&
               (port.link_layer == LinkLayer::kInfiniBand || port.link_layer == LinkLayer::kEthernet);
    ch.efa = nic.isEfa();
    out.push_back(std::move(ch));
  }
  return out;
}

void assignNics(const NodeTopology& t, Fabric fabric, GdrMode gdrMode, std::vector<LocalPlan>& locals) {
  const std::vector<topo::NicPortRef> ports = topo::fabricPorts(t, fabric);
  if (ports.empty()) {
    for (LocalPlan& l : locals) {
      l.notes.push_back("no usable " + toString(fabric) +
                        " NIC on this node: NCCL falls back to its own choice");
      l.transport = NetTransport::kNone;
      l.gdr_reason = "n/a: no usable NIC on this node";
    }
    return;
  }
  size_t cap = (locals.size() + ports.size() - 1) / ports.size();
  std::vector<size_t> load(ports.size(), 0);
  // Best path of each GPU to each candidate.
  std::vector<std::vector<Path>> paths(locals.size());
  std::vector<int> bestRank(locals.size(), 1 << 30);
  for (size_t l = 0; l < locals.size(); ++l) {
    for (const topo::NicPortRef& p : ports) {
      paths[l].push_back(t.gpuToNic(locals[l].gpu, p.nic));
      bestRank[l] = std::min(bestRank[l], rankOf(paths[l].back()));
    }
  }
  // GPUs whose best set is smallest choose first, so that shared NICs go where they are needed.
  std::vector<size_t> order(locals.size());
  std::iota(order.begin(), order.end(), 0);
  auto bestCount = [&](size_t l) {
    return std::count_if(paths[l].begin(), paths[l].end(),
                         [&](const Path& p) { return rankOf(p) == bestRank[l]; });
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bestCount(a) < bestCount(b); });

  // GPUs sharing one best set with more NICs than GPUs split the set between them.
  std::map<std::vector<size_t>, std::vector<size_t>> groups;  // best set -> GPUs
  for (size_t l = 0; l < locals.size(); ++l) {
    std::vector<size_t> set;
    for (size_t c = 0; c < ports.size(); ++c) {
      if (rankOf(paths[l][c]) == bestRank[l]) set.push_back(c);
    }
    groups[set].push_back(l);
  }
  // Only NICs on the group's own PCIe switch(es) that no other GPU counts among its closest.
  std::vector<size_t> claims(ports.size(), 0);
  for (const auto& [set, members] : groups) {
    for (size_t c : set) claims[c] += members.size();
  }
  std::vector<bool> done(locals.size(), false);
  for (const auto& [set, members] : groups) {
    if (set.size() <= members.size() || bestRank[members[0]] > static_cast<int>(PathType::kPXB)) continue;
    const size_t sharers = members.size();  // (clang before 16 cannot capture a structured binding)
    bool own = std::all_of(set.begin(), set.end(), [&](size_t c) { return claims[c] == sharers; });
    if (!own) continue;
    for (size_t i = 0; i < members.size(); ++i) {
      std::vector<Candidate> picked;
      for (size_t c = i; c < set.size(); c += members.size()) {
        picked.push_back({ports[set[c]], paths[members[i]][set[c]]});
        ++load[set[c]];
      }
      locals[members[i]].nics = choose(t, picked);
      locals[members[i]].path = picked.front().path;
      done[members[i]] = true;
    }
  }
  for (size_t l : order) {
    if (done[l]) continue;
    LocalPlan& lp = locals[l];
    const topo::Gpu& gpu = t.gpus[lp.gpu];
    bool nearby = bestRank[l] < static_cast<int>(PathType::kSYS);
    // Among the closest (or, with none nearby, those of the GPU's socket): least loaded, then fastest.
    std::optional<size_t> pick;
    bool sameSocket = false;
    auto better = [&](size_t c, size_t than) {
      bool capC = load[c] < cap, capT = load[than] < cap;
      if (capC != capT) return capC;
      if (load[c] != load[than]) return load[c] < load[than];
      const topo::NicPort& pc = t.nics[ports[c].nic].ports[ports[c].port];
      const topo::NicPort& pt = t.nics[ports[than].nic].ports[ports[than].port];
      if (pc.rate_gbps != pt.rate_gbps) return pc.rate_gbps > pt.rate_gbps;
      return c < than;
    };
    for (size_t c = 0; c < ports.size(); ++c) {
      bool eligible =
          nearby ? rankOf(paths[l][c]) == bestRank[l] : t.nics[ports[c].nic].at.package == gpu.at.package;
      if (eligible && (!pick || better(c, *pick))) pick = c;
    }
    sameSocket = pick.has_value();
    if (!pick) {
      for (size_t c = 0; c < ports.size(); ++c) {
        if (!pick || better(c, *pick)) pick = c;
      }
    }
    ++load[*pick];
    lp.nics = choose(t, {{ports[*pick], paths[l][*pick]}});
    lp.path = paths[l][*pick];
    if (!nearby) {
      lp.notes.push_back("no NIC near GPU" + std::to_string(lp.gpu) + ": using " + lp.nics[0].name + " (" +
                         lp.path.str() + "), the least loaded NIC " +
                         (sameSocket ? "of its socket" : "of the node (none in its socket)"));
    }
  }
  // GPUDirect RDMA, where NCCL's transport for the NIC has it.
  for (LocalPlan& lp : locals) {
    PathType p = lp.path.type;
    bool close = p == PathType::kPIX || p == PathType::kPXB;
    bool viaCpu = p == PathType::kPHB || p == PathType::kNODE;
    lp.transport = lp.nics.front().efa      ? NetTransport::kOfiPlugin
                   : fabric == Fabric::kTcp ? NetTransport::kSocket
                                            : NetTransport::kIbVerbs;
    if (lp.transport == NetTransport::kOfiPlugin) {
      lp.gdr = false;
      lp.gdr_reason = "plugin: " + lp.nics.front().name +
                      " is AWS EFA, which NCCL reaches only through the aws-ofi-nccl net plugin; the "
                      "plugin decides GPUDirect RDMA (path " +
                      lp.path.str() + "); without it NCCL uses sockets, which never do";
    } else if (lp.transport == NetTransport::kSocket) {
      lp.gdr = false;
      lp.gdr_reason = std::string("n/a: fabric tcp: NCCL's socket transport never uses GPUDirect RDMA") +
                      (gdrMode == GdrMode::kOn ? " (--gdr on does not apply)" : "");
    } else if (gdrMode == GdrMode::kOff) {
      lp.gdr = false;
      lp.gdr_reason = "off (--gdr off)";
    } else if (close) {
      lp.gdr = true;
      lp.gdr_reason = "on: GPU and NIC share a PCIe switch (" + lp.path.str() + ")";
    } else if (viaCpu && gdrMode == GdrMode::kOn) {
      lp.gdr = true;
      lp.gdr_reason = "on (--gdr on): path " + lp.path.str() + " crosses the CPU";
    } else {
      lp.gdr = false;
      lp.gdr_reason = "off: path " + lp.path.str() +
                      (viaCpu ? " crosses the CPU (--gdr on enables it)" : " crosses sockets");
    }
  }
}

// The CPUs a GPU's rank may use: its NUMA node, else its package, else its locality.
CpuSet cpuDomain(const NodeTopology& t, const topo::Gpu& gpu, int& numa) {
  numa = gpu.at.numa;
  if (const topo::NumaNode* n = t.numaNode(gpu.at.numa); n != nullptr && !n->cpus.empty()) return n->cpus;
  for (const topo::Package& p : t.packages) {
    if (p.os_index == gpu.at.package && !p.cpus.empty()) return p.cpus;
  }
  if (!gpu.cpus.empty()) return gpu.cpus;
  return t.allCpus();
}

void assignCpus(const NodeTopology& t, NodeTemplate& tpl) {
  std::vector<CpuSet> cores = t.coresOrCpus();
  std::map<std::string, std::vector<size_t>> byDomain;
  std::map<std::string, CpuSet> domains;
  for (size_t l = 0; l < tpl.locals.size(); ++l) {
    LocalPlan& lp = tpl.locals[l];
    CpuSet d = cpuDomain(t, t.gpus[lp.gpu], lp.numa);
    domains[d.toList()] = d;
    byDomain[d.toList()].push_back(l);
  }
  for (const auto& [key, members] : byDomain) {
    const CpuSet& domain = domains[key];
    std::vector<CpuSet> mine;
    for (const CpuSet& c : cores) {
      CpuSet in = c & domain;
      if (!in.empty()) mine.push_back(in);
    }
    size_t k = members.size(), nc = mine.size();
    size_t npu = domain.size();
    if (nc == 0) {
      for (size_t m : members)
        tpl.locals[m].notes.push_back("no CPUs known for GPU" + std::to_string(tpl.locals[m].gpu));
      continue;
    }
    if (k <= nc) {
      // Whole cores: contiguous blocks, the first (nc % k) ranks one core more.
      size_t at = 0;
      for (size_t i = 0; i < k; ++i) {
        size_t take = nc / k + (i < nc % k ? 1 : 0);
        CpuSet s;
        for (size_t c = at; c < at + take; ++c) s = s | mine[c];
        at += take;
        tpl.locals[members[i]].cpuset = s;
      }
    } else {
      // More ranks than cores: hardware threads, first thread of every core first.
      std::vector<unsigned> threads;
      for (size_t level = 0;; ++level) {
        bool any = false;
        for (const CpuSet& c : mine) {
          if (level < c.size()) threads.push_back(c.cpus()[level]), any = true;
        }
        if (!any) break;
      }
      for (size_t i = 0; i < k; ++i) {
        LocalPlan& lp = tpl.locals[members[i]];
        lp.cpuset = CpuSet({threads[i % threads.size()]});
        lp.whole_cores = false;
        if (k > npu) {
          lp.shares_cpus = true;
          lp.notes.push_back(std::to_string(k) + " ranks share the " + std::to_string(npu) +
                             " CPUs of their NUMA domain (" + domain.toList() + "): ranks share CPUs");
        }
      }
    }
  }
}

NodeTemplate planNode(const topo::ClusterNode& node, const NodeGrant& grant, Fabric fabric, GdrMode gdr) {
  const NodeTopology& t = *node.topology;
  NodeTemplate tpl;
  std::vector<int> cuda(t.gpus.size(), -1);
  int next = 0;
  for (const topo::Gpu& g : t.gpus) {
    if (g.isNvidia()) cuda[g.index] = next++;
  }
  if (!grant.mig.empty()) {
    // MIG instances in the pool's order (by GPU): no NVLink chain between them to follow.
    for (size_t i = 0; i < grant.gpus.size(); ++i) {
      LocalPlan lp;
      lp.gpu = grant.gpus[i];
      lp.cuda_index = cuda[lp.gpu];
      lp.mig = grant.mig[i];
      tpl.locals.push_back(std::move(lp));
    }
  }
  for (size_t g : grant.mig.empty() ? chainOrder(t, grant.gpus) : std::vector<size_t>{}) {
    LocalPlan lp;
    lp.gpu = g;
    lp.cuda_index = cuda[g];
    tpl.locals.push_back(std::move(lp));
  }
  assignNics(t, fabric, gdr, tpl.locals);
  assignCpus(t, tpl);
  std::vector<CpuSet> cores = t.coresOrCpus();
  unsigned maxCpu = 0;
  for (const CpuSet& c : cores) {
    if (!c.empty()) maxCpu = std::max(maxCpu, c.cpus().back());
  }
  tpl.coreLogical.assign(maxCpu + 1, 0);
  tpl.puLogical.assign(maxCpu + 1, 0);
  unsigned pu = 0;
  for (size_t c = 0; c < cores.size(); ++c) {
    for (unsigned cpu : cores[c].cpus()) {
      tpl.coreLogical[cpu] = static_cast<unsigned>(c);
      tpl.puLogical[cpu] = pu++;
    }
  }
  return tpl;
}

std::string logicalList(const CpuSet& cpus, const std::vector<unsigned>& logical) {
  std::vector<unsigned> idx;
  for (unsigned c : cpus.cpus()) {
    if (c < logical.size()) idx.push_back(logical[c]);
  }
  return CpuSet(std::move(idx)).toList();
}

std::string joinNics(const std::vector<NicChoice>& nics, bool exact, bool withPort) {
  std::string out = exact ? "=" : "";
  for (size_t i = 0; i < nics.size(); ++i) {
    if (i > 0) out += ',';
    out += nics[i].name;
    if (withPort) out += ":" + std::to_string(nics[i].port);
  }
  return out;
}

std::string ncclGdrLevel(const Path& p) {
  switch (p.type) {
    case PathType::kPIX:
      return "PIX";
    case PathType::kPXB:
      return "PXB";
    default:
      return "PHB";  // NODE counts as PHB for NCCL
  }
}

// A client of the GPU's MPS control daemon (poolrun --share): the daemon's pipe directory, the
// share's limits, and the GPU by its UUID. The daemon sees only its GPU (the agent starts it with
// CUDA_VISIBLE_DEVICES set to the GPU), so a client naming the GPU by index would name another
// device; by UUID it names the same one in and outside MPS (NVIDIA's MPS documentation,
// "CUDA_VISIBLE_DEVICES"). The memory limit is for device 0, the only one the client sees.
void mpsClientEnv(RankPlan& r, const topo::Gpu& gpu, const std::string& mpsDir) {
  auto set = [&](const std::string& name, std::string value) {
    auto it = std::find_if(r.env.begin(), r.env.end(), [&](const auto& e) { return e.first == name; });
    if (it != r.env.end())
      it->second = std::move(value);
    else
      r.env.emplace_back(name, std::move(value));
  };
  if (!gpu.uuid.empty()) set("CUDA_VISIBLE_DEVICES", gpu.uuid);
  set("CUDA_MPS_PIPE_DIRECTORY", pool::mpsPipeDirectory(mpsDir, r.gpu).string());
  if (r.share->percent > 0) set("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(r.share->percent));
  if (r.share->memory_bytes > 0)
    set("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "0=" + std::to_string(std::max<uint64_t>(1, r.share->memory_bytes >> 20)) + "M");
  // poolrun-rank waits this long for the daemon, which the node's agent starts within a heartbeat
  // or two of the grant: a client started before it would run without MPS and without limits.
  set("POOLRUN_MPS_WAIT", "60");
}

std::vector<std::pair<std::string, std::string>> rankEnv(const LocalPlan& lp, Fabric fabric,
                                                         const PlanRequest& req,
                                                         std::vector<std::string>& notes) {
  std::vector<std::pair<std::string, std::string>> env;
  env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  // A MIG instance by its UUID: CUDA enumerates that one instance (and only one per process).
  env.emplace_back("CUDA_VISIBLE_DEVICES", lp.mig.empty() ? std::to_string(lp.cuda_index) : lp.mig);
  if (!lp.mig.empty() && req.ranks > 1) {
    // NCCL between MIG instances: no CUDA peer-to-peer access crosses an instance, so neither NVLink
    // nor NVLink SHARP carries anything; NCCL 2.32 and later run such a communicator over shared
    // memory within a node and the network across nodes (NCCL user guide, "Using MIG instances";
    // NVIDIA/nccl#1716). Said here, so that NCCL does not try the paths that cannot work.
    env.emplace_back("NCCL_P2P_DISABLE", "1");
    env.emplace_back("NCCL_NVLS_ENABLE", "0");
  }
  std::vector<NicChoice> verbs, opaqueNics;
  std::string netdevs;
  for (const NicChoice& n : lp.nics) {
    (n.verbs ? verbs : opaqueNics).push_back(n);
    if (!n.netdev.empty()) netdevs += (netdevs.empty() ? "=" : ",") + n.netdev;
  }
  if (fabric == Fabric::kTcp) {
    env.emplace_back("NCCL_IB_DISABLE", "1");
    if (!netdevs.empty()) {
      env.emplace_back("NCCL_SOCKET_IFNAME", netdevs);
      env.emplace_back("UCX_NET_DEVICES", netdevs.substr(1));
    }
  } else if (!verbs.empty()) {
    env.emplace_back("NCCL_IB_HCA", joinNics(verbs, true, true));
    env.emplace_back("UCX_NET_DEVICES", joinNics(verbs, false, true));
    if (!netdevs.empty()) env.emplace_back("NCCL_SOCKET_IFNAME", netdevs);
    if (fabric == Fabric::kRoce) {
      std::set<int> gids;
      for (const NicChoice& n : verbs) {
        if (n.roce_v2_gid_index) gids.insert(*n.roce_v2_gid_index);
      }
      if (gids.size() == 1 &&
          std::all_of(verbs.begin(), verbs.end(), [](const NicChoice& n) { return n.roce_v2_gid_index; })) {
        env.emplace_back("NCCL_IB_GID_INDEX", std::to_string(*gids.begin()));
      } else {
        notes.push_back(gids.empty()
                            ? "RoCE v2 GID index unknown (no IPv4 RoCE v2 GID read): NCCL picks its own"
                            : "the chosen RoCE NICs have different RoCE v2 GID indexes: NCCL picks per NIC");
      }
      if (req.roce_tc) env.emplace_back("NCCL_IB_TC", std::to_string(*req.roce_tc));
    }
    env.emplace_back("NCCL_NET_GDR_LEVEL", lp.gdr ? ncclGdrLevel(lp.path) : "LOC");
    env.emplace_back("NCCL_NET_GDR_READ", lp.gdr ? "1" : "0");
  }
  bool efa = false;
  for (const NicChoice& n : opaqueNics) {
    if (n.efa) {
      efa = true;
      continue;
    }
    notes.push_back(
        "NIC " + n.name +
        " is neither InfiniBand nor RoCE (or unnamed): no NCCL_IB_* or UCX_NET_DEVICES for it; NCCL's net "
        "plugin chooses");
  }
  if (efa) {
    // One text for every EFA rank, so that the table says it once per node.
    notes.push_back(
        "the NICs are AWS EFA (vendor 0x1d0f), neither InfiniBand nor RoCE: NCCL reaches them only "
        "through the aws-ofi-nccl net plugin (install it where NCCL loads libnccl-net.so, or name it in "
        "NCCL_NET_PLUGIN), which picks the EFA device and decides GPUDirect RDMA; without it NCCL falls "
        "back to sockets. poolrun sets no NCCL_IB_* or UCX_NET_DEVICES for them");
  }
  return env;
}

}  // namespace

std::string toString(GdrMode mode) {
  switch (mode) {
    case GdrMode::kAuto:
      return "auto";
    case GdrMode::kOn:
      return "on";
    case GdrMode::kOff:
      return "off";
  }
  return "auto";
}

std::string toString(NetTransport transport) {
  switch (transport) {
    case NetTransport::kIbVerbs:
      return "ib";
    case NetTransport::kSocket:
      return "socket";
    case NetTransport::kOfiPlugin:
      return "ofi-plugin";
    case NetTransport::kNone:
      return "none";
  }
  return "none";
}

GdrMode gdrModeFromString(std::string_view text) {
  if (text == "auto") return GdrMode::kAuto;
  if (text == "on") return GdrMode::kOn;
  if (text == "off") return GdrMode::kOff;
  throw badInput("unknown --gdr '" + std::string(text) + "' (use auto, on or off)");
}

std::string migNcclNote() {
  return "ranks on MIG instances: NCCL runs one communicator over them from 2.32 on (experimental; shared "
         "memory within a node, the network across, never NVLink: NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0); "
         "older NCCL refuses two instances of one GPU (\"Duplicate GPU detected\", NVIDIA/nccl#1716). Ranks "
         "that do not talk through NCCL (inference replicas, gloo) are not concerned";
}

const std::vector<std::string>& plannedVariables() {
  static const std::vector<std::string> kVars = {"CUDA_DEVICE_ORDER",
                                                 "CUDA_VISIBLE_DEVICES",
                                                 "NCCL_IB_DISABLE",
                                                 "NCCL_IB_HCA",
                                                 "UCX_NET_DEVICES",
                                                 "NCCL_SOCKET_IFNAME",
                                                 "NCCL_IB_GID_INDEX",
                                                 "NCCL_IB_TC",
                                                 "NCCL_NET_GDR_LEVEL",
                                                 "NCCL_NET_GDR_READ",
                                                 "NCCL_P2P_DISABLE",
                                                 "NCCL_NVLS_ENABLE",
                                                 "RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE"};
  return kVars;
}

// Nodes under one leaf switch next to each other (in order of first appearance), NCCL's ring
// following rank order; nodes keep their order otherwise.
static std::vector<size_t> switchOrder(const std::vector<const topo::ClusterNode*>& nodes) {
  std::map<std::string, size_t> firstSeen;
  for (size_t i = 0; i < nodes.size(); ++i) firstSeen.emplace(nodes[i]->levels.switch_name, i);
  std::vector<size_t> order(nodes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return firstSeen[nodes[a]->levels.switch_name] < firstSeen[nodes[b]->levels.switch_name];
  });
  return order;
}

std::vector<NodeGrant> grantFromCluster(const topo::Cluster& cluster, const PlanRequest& request) {
  if (request.ranks <= 0)
    throw badInput("-n " + std::to_string(request.ranks) + ": the job needs at least one rank");
  std::vector<const topo::ClusterNode*> nodes;
  size_t total = 0;
  std::map<std::string, size_t> others;  // GPUs that take no rank, by vendor
  for (const topo::ClusterNode& n : cluster.nodes) {
    size_t nvidia = std::count_if(n.topology->gpus.begin(), n.topology->gpus.end(),
                                  [](const topo::Gpu& g) { return g.isNvidia(); });
    for (const topo::Gpu& g : n.topology->gpus) {
      if (!g.isNvidia()) ++others[vendorWord(g)];
    }
    if (request.gpus_per_node > 0 && static_cast<size_t>(request.gpus_per_node) > nvidia) {
      throw badInput("--gpus-per-node " + std::to_string(request.gpus_per_node) + ": node " + n.name +
                     " has " + std::to_string(nvidia) + " NVIDIA GPUs");
    }
    if (nvidia == 0) continue;
    nodes.push_back(&n);
    total += request.gpus_per_node > 0 ? static_cast<size_t>(request.gpus_per_node) : nvidia;
  }
  if (static_cast<size_t>(request.ranks) > total) {
    std::string other;
    for (const auto& [vendor, count] : others) {
      other += (other.empty() ? "" : ", ") + std::to_string(count) + " " + vendor;
    }
    throw badInput(
        "-n " + std::to_string(request.ranks) + ": " + cluster.file.string() + " has " +
        std::to_string(total) + (others.empty() ? " GPUs" : " NVIDIA GPUs") +
        (request.gpus_per_node > 0 ? " at --gpus-per-node " + std::to_string(request.gpus_per_node) : "") +
        " on " + std::to_string(nodes.size()) + " nodes" +
        (others.empty() ? ""
                        : " (and GPUs that take no rank, not being NVIDIA's: " + other +
                              "; poolrun plans CUDA/NCCL ranks on NVIDIA GPUs only)") +
        (total == 0 ? "; give nodes with NVIDIA GPUs" : "; ask for fewer ranks"));
  }
  std::vector<NodeGrant> grants;
  int left = request.ranks;
  std::map<const NodeTopology*, std::vector<size_t>> chains;
  for (size_t i : switchOrder(nodes)) {
    if (left == 0) break;
    const NodeTopology& t = *nodes[i]->topology;
    auto it = chains.find(&t);
    if (it == chains.end()) {
      std::vector<size_t> all;
      for (const topo::Gpu& g : t.gpus) {
        if (g.isNvidia()) all.push_back(g.index);
      }
      it = chains.emplace(&t, chainOrder(t, all)).first;
    }
    int take = std::min<int>(
        left, request.gpus_per_node > 0 ? request.gpus_per_node : static_cast<int>(it->second.size()));
    NodeGrant g;
    g.node = nodes[i];
    g.gpus.assign(it->second.begin(), it->second.begin() + take);
    left -= take;
    grants.push_back(std::move(g));
  }
  return grants;
}

JobPlan planOnCluster(const topo::Cluster& cluster, const PlanRequest& request) {
  return makePlan(grantFromCluster(cluster, request), request);
}

JobPlan makePlan(const std::vector<NodeGrant>& grants, const PlanRequest& request) {
  size_t held = 0;
  for (const NodeGrant& g : grants) held += g.gpus.size();
  if (request.ranks <= 0)
    throw badInput("-n " + std::to_string(request.ranks) + ": the job needs at least one rank");
  if (static_cast<size_t>(request.ranks) != held) {
    throw badInput("-n " + std::to_string(request.ranks) + " ranks but the job holds " +
                   std::to_string(held) + " GPUs; one rank per GPU");
  }
  for (const NodeGrant& g : grants) {
    if (!g.mig.empty() && g.mig.size() != g.gpus.size())
      throw badInput("node " + g.node->name + ": " + std::to_string(g.mig.size()) + " MIG instances for " +
                     std::to_string(g.gpus.size()) + " GPU entries (one instance per entry)");
    for (size_t i = 0; i < g.mig.size(); ++i) {
      const size_t gpu = g.gpus[i];
      const auto& instances = gpu < g.node->topology->gpus.size() ? g.node->topology->gpus[gpu].mig.instances
                                                                  : std::vector<topo::MigInstance>{};
      if (std::none_of(instances.begin(), instances.end(),
                       [&](const topo::MigInstance& m) { return m.uuid == g.mig[i]; }))
        throw badInput("MIG instance " + g.mig[i] + " is not one of GPU" + std::to_string(gpu) + " of node " +
                       g.node->name + " (`poolrun topo` lists its instances)");
    }
    for (size_t gpu : g.gpus) {
      if (gpu >= g.node->topology->gpus.size()) {
        throw badInput("node " + g.node->name + " has no GPU " + std::to_string(gpu));
      }
      if (const topo::Gpu& other = g.node->topology->gpus[gpu]; !other.isNvidia()) {
        throw badInput("GPU" + std::to_string(gpu) + " of node " + g.node->name + " (" +
                       describeOther(other) +
                       ") is not an NVIDIA GPU: poolrun plans CUDA/NCCL ranks only; ask for NVIDIA GPUs "
                       "(`poolrun topo` marks the others)");
      }
    }
  }
  JobPlan plan;
  plan.fabric = chooseFabric(grants, request);
  std::vector<const topo::ClusterNode*> nodes;
  for (const NodeGrant& g : grants) nodes.push_back(g.node);
  std::map<std::tuple<const NodeTopology*, std::vector<size_t>, std::vector<std::string>>, NodeTemplate>
      templates;
  std::vector<const NodeTemplate*> nodeTemplates;
  plan.ranks.reserve(static_cast<size_t>(request.ranks));
  plan.nodes.reserve(grants.size());
  int rank = 0;
  for (size_t gi : switchOrder(nodes)) {
    const NodeGrant& grant = grants[gi];
    std::vector<size_t> key = grant.gpus;
    std::sort(key.begin(), key.end());
    // MIG instances differ from node to node (their UUIDs are part of the template).
    auto it = templates.find({grant.node->topology.get(), key, grant.mig});
    if (it == templates.end()) {
      it = templates
               .emplace(std::tuple(grant.node->topology.get(), key, grant.mig),
                        planNode(*grant.node, grant, plan.fabric, request.gdr))
               .first;
    }
    const NodeTemplate& tpl = it->second;
    nodeTemplates.push_back(&tpl);
    NodePlan np;
    np.name = grant.node->name;
    np.node = *grant.node;
    np.first_rank = rank;
    np.ranks = static_cast<int>(tpl.locals.size());
    plan.nodes.push_back(np);
    for (size_t l = 0; l < tpl.locals.size(); ++l) {
      const LocalPlan& lp = tpl.locals[l];
      if (!lp.whole_cores) plan.hwthread_slots = true;
      RankPlan r;
      r.rank = rank++;
      r.node_index = plan.nodes.size() - 1;
      r.local_rank = static_cast<int>(l);
      r.local_size = np.ranks;
      r.gpu = lp.gpu;
      r.cuda_index = lp.cuda_index;
      r.mig = lp.mig;
      r.gpu_pci = grant.node->topology->gpus[lp.gpu].pci;
      r.nics = lp.nics;
      r.gpu_nic_path = lp.path;
      r.transport = lp.transport;
      r.gdr = lp.gdr;
      r.gdr_reason = lp.gdr_reason;
      r.numa = lp.numa;
      r.cpuset = lp.cpuset;
      r.shares_cpus = lp.shares_cpus;
      r.notes = lp.notes;
      r.env = rankEnv(lp, plan.fabric, request, r.notes);
      if (auto share = grant.shares.find(lp.gpu); share != grant.shares.end()) {
        r.share = share->second;
        mpsClientEnv(r, grant.node->topology->gpus[lp.gpu], request.mps_dir);
      }
      r.env.emplace_back("RANK", std::to_string(r.rank));
      r.env.emplace_back("WORLD_SIZE", std::to_string(request.ranks));
      r.env.emplace_back("LOCAL_RANK", std::to_string(r.local_rank));
      r.env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(r.local_size));
      for (auto& [name, value] : r.env) {
        auto user = request.user_env.find(name);
        if (user != request.user_env.end() && user->second != value) {
          r.user_won[name] = value;
          value = user->second;
        }
      }
      plan.ranks.push_back(std::move(r));
    }
  }
  // Rankfile slots, once the job knows whether any rank needs hardware threads.
  for (RankPlan& r : plan.ranks) {
    const NodeTemplate& tpl = *nodeTemplates[r.node_index];
    r.rankfile_slots = logicalList(r.cpuset, plan.hwthread_slots ? tpl.puLogical : tpl.coreLogical);
  }
  if (request.gdr == GdrMode::kOn && plan.fabric == Fabric::kTcp) {
    plan.notes.push_back(
        "--gdr on does not apply to fabric tcp: NCCL's socket transport never uses GPUDirect RDMA (GDR n/a)");
  }
  // What the nodes' topologies under-describe, once per topology (in node order: the plan is the
  // same from run to run).
  std::vector<std::pair<const NodeTopology*, std::vector<std::string>>> nodesOf;
  for (const NodePlan& n : plan.nodes) {
    auto it = std::find_if(nodesOf.begin(), nodesOf.end(),
                           [&](const auto& entry) { return entry.first == n.node.topology.get(); });
    if (it == nodesOf.end()) it = nodesOf.insert(nodesOf.end(), {n.node.topology.get(), {}});
    it->second.push_back(n.name);
  }
  if (plan.ranks.size() > 1 &&
      std::any_of(plan.ranks.begin(), plan.ranks.end(), [](const RankPlan& r) { return !r.mig.empty(); })) {
    plan.notes.push_back(migNcclNote());
  }
  for (const auto& [t, names] : nodesOf) {
    for (std::string& w : topo::missingNvlinkWarnings(*t)) plan.notes.push_back(std::move(w));
    for (const topo::Gpu& g : t->gpus) {
      if (g.isNvidia()) continue;
      plan.notes.push_back(topo::compressHostlist(names) + ": " + NodeTopology::gpuLabel(g.index) + " (" +
                           describeOther(g) +
                           ") is not an NVIDIA GPU: no CUDA device, no rank planned on it");
    }
  }
  if (plan.hwthread_slots) {
    plan.notes.push_back(
        "some ranks have single hardware threads: the rankfile names hardware threads "
        "(mpirun --use-hwthread-cpus in Open MPI 4.x, :HWTCPUS in 5.x)");
  }
  return plan;
}

}  // namespace poolrun::launcher
