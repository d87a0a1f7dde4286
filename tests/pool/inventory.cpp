#include "inventory.hpp"

#include <cctype>
#include <sstream>
#include <stdexcept>

#include "poolrun/pool/request_options.hpp"
#include "poolrun/pool/store.hpp"
#include "poolrun/topo/hostlist.hpp"
#include "support/synthetic.hpp"

namespace poolrun::test {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == sep && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(' ');
  size_t b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// "0-3,5" -> {0,1,2,3,5}
std::vector<size_t> indexes(const std::string& text) {
  std::vector<size_t> out;
  for (const std::string& part : split(text, ',')) {
    size_t dash = part.find('-');
    size_t a = std::stoul(part.substr(0, dash));
    size_t b = dash == std::string::npos ? a : std::stoul(part.substr(dash + 1));
    for (size_t i = a; i <= b; ++i) out.push_back(i);
  }
  return out;
}

// H100 80GB's GPU instance profiles (NVIDIA's MIG user guide; tests/fake_nvml/fake_nvml_file.cpp
// has the whole table): name, SMs, MiB.
struct MigRow {
  const char* name;
  int slices, sm;
  uint64_t mib;
};
constexpr MigRow kH100Profiles[] = {{"1g.10gb", 1, 16, 9984},  {"1g.20gb", 1, 26, 20096},
                                    {"2g.20gb", 2, 32, 20096}, {"3g.40gb", 3, 60, 40448},
                                    {"4g.40gb", 4, 64, 40448}, {"7g.80gb", 7, 132, 81152}};

// "1g.10gb*7" or "3g.40gb*1+1g.10gb*4": the GPU in MIG mode with those instances (GPU instance ids
// from 1, compute instance 0 each, UUIDs MIG-<GPU>-<GI>).
void addMigLayout(topo::Gpu& gpu, const std::string& layout) {
  gpu.mig = migState(true, true);
  unsigned id = 0;
  for (const MigRow& row : kH100Profiles)
    gpu.mig.profiles.push_back({id++, row.name, row.slices, 7 / row.slices, row.sm, row.mib << 20});
  int gi = 1;
  for (const std::string& part : split(layout, '+')) {
    const size_t star = part.find('*');
    const std::string name = part.substr(0, star);
    const int count = star == std::string::npos ? 1 : std::stoi(part.substr(star + 1));
    const MigRow* row = nullptr;
    for (const MigRow& r : kH100Profiles)
      if (name == r.name) row = &r;
    if (!row) throw std::invalid_argument("no MIG profile '" + name + "' in the test inventory's table");
    for (int k = 0; k < count; ++k, ++gi)
      gpu.mig.instances.push_back(migInstance(gi, 0, name, 0, row->slices, row->sm, row->mib,
                                              "MIG-" + std::to_string(gpu.index) + "-" + std::to_string(gi)));
  }
}

}  // namespace

void addInventory(pool::PoolState& state, const std::string& spec, pool::TimePoint now) {
  int leaseNo = 0;
  for (std::string clause : split(spec, ';')) {
    clause = trim(clause);
    if (clause.empty()) continue;
    std::istringstream words(clause);
    std::string head;
    words >> head;
    if (size_t slash = head.find("/gpu["); slash != std::string::npos) {
      std::string hosts = head.substr(0, slash);
      std::string rest = head.substr(slash + 5);
      std::string sw;
      if (size_t at = rest.find('@'); at != std::string::npos) {
        sw = rest.substr(at + 1);
        rest = rest.substr(0, at);
      }
      int count = static_cast<int>(indexes(rest.substr(0, rest.find(']'))).size());
      std::string model = "NVIDIA H100 80GB HBM3";
      uint64_t mem = uint64_t{80} << 30;
      std::map<std::string, std::string> labels;
      topo::NodeLevels levels;
      levels.switch_name = sw;
      std::vector<size_t> migNow, migAfterReset;
      std::vector<std::string> layouts;
      std::string opt;
      while (words >> opt) {
        if (opt.rfind("layout=", 0) == 0) layouts.push_back(opt.substr(7));
        if (opt.rfind("mig=", 0) == 0) migNow = indexes(opt.substr(4));
        if (opt.rfind("mig-after-reset=", 0) == 0) migAfterReset = indexes(opt.substr(16));
        if (opt.rfind("model=", 0) == 0) model = "NVIDIA " + opt.substr(6);
        if (opt.rfind("mem=", 0) == 0) mem = std::stoull(opt.substr(4)) << 30;
        if (opt.rfind("nvl=", 0) == 0) levels.nvlink_domain = opt.substr(4);
        if (opt.rfind("block=", 0) == 0) levels.block = opt.substr(6);
        if (opt.rfind("rail=", 0) == 0) levels.rail_group = opt.substr(5);
        if (opt.rfind("spine=", 0) == 0) levels.spine = opt.substr(6);
        if (opt.rfind("label=", 0) == 0) {
          std::string kv = opt.substr(6);
          labels[kv.substr(0, kv.find(':'))] = kv.substr(kv.find(':') + 1);
        }
      }
      SyntheticSpec s;
      s.gpus = count;
      s.nics = count;
      auto topology = std::make_shared<topo::NodeTopology>(synthetic(s));
      for (topo::Gpu& g : topology->gpus) {
        g.model = model;
        g.memory_bytes = mem;
      }
      for (size_t i : migNow) topology->gpus.at(i).mig = migState(true, true);
      for (size_t i : migAfterReset) topology->gpus.at(i).mig = migState(false, true);
      for (const std::string& layout : layouts) {
        const size_t colon = layout.find(':');
        for (size_t i : indexes(layout.substr(0, colon)))
          addMigLayout(topology->gpus.at(i), layout.substr(colon + 1));
      }
      for (const std::string& name : topo::expandHostlist(hosts)) {
        topo::ClusterNode n;
        n.name = name;
        n.topology = topology;
        n.levels = levels;
        n.labels = labels;
        state.registerNode(n);
      }
      continue;
    }
    std::string verb;
    words >> verb;
    for (const std::string& name : topo::expandHostlist(head)) {
      if (verb == "draining" || verb == "down") {
        state.setNodeState(name, verb == "down" ? pool::NodeState::kDown : pool::NodeState::kDraining);
      } else if (verb == "failed" || verb == "leased") {
        std::string list;
        words >> list;
        if (verb == "failed") {
          for (size_t i : indexes(list)) state.failGpu(name, i, now);
          continue;
        }
        pool::Lease l;
        l.id = "pre" + std::to_string(++leaseNo);
        l.owner = "other";
        for (size_t i : indexes(list)) l.gpus.push_back({name, i});
        l.created = now;
        l.ttl = std::chrono::hours(1000);
        l.expires = now + l.ttl;
        std::string w;
        while (words >> w) {
          auto value = [&](const char* key) { return w.substr(std::string(key).size()); };
          if (w == "for") {
            int seconds = 0;
            words >> seconds;
            l.max_end = now + std::chrono::seconds(seconds);
            l.expires = *l.max_end;
          } else if (w.rfind("prio=", 0) == 0) {
            l.priority = std::stoi(value("prio="));
          } else if (w == "preemptible") {
            l.preemptible = true;
          } else if (w.rfind("age=", 0) == 0) {
            l.created = now - std::chrono::seconds(std::stoll(value("age=")));
          } else if (w.rfind("owner=", 0) == 0) {
            l.owner = value("owner=");
          } else if (w.rfind("id=", 0) == 0) {
            l.id = value("id=");
          } else if (w.rfind("share=", 0) == 0) {  // share=PERCENT[:GiB]: MPS shares of the GPUs
            std::vector<std::string> parts = split(value("share="), ':');
            for (pool::GpuRef& g : l.gpus) {
              g.share = true;
              g.share_percent = std::stoi(parts.at(0));
              g.share_memory = parts.size() > 1
                                   ? std::stoull(parts[1]) << 30
                                   : (uint64_t{80} << 30) * static_cast<uint64_t>(g.share_percent) / 100;
            }
          } else if (w.rfind("elastic=", 0) == 0) {  // elastic=MIN:MAX[:PPN]
            std::vector<std::string> bounds = split(value("elastic="), ':');
            pool::LeaseRequest r;
            r.gpus = std::stoi(bounds.at(0));
            r.max_gpus = std::stoi(bounds.at(1));
            if (bounds.size() > 2) r.gpus_per_node = std::stoi(bounds[2]);
            r.resize_interval = std::chrono::seconds(0);
            l.elastic = r;
          } else {
            throw std::invalid_argument("bad lease word '" + w + "' in '" + clause + "'");
          }
        }
        if (l.elastic) {
          l.elastic->owner = l.owner;
          l.elastic->priority = l.priority;
        }
        l.resized = l.created;
        state.loadLease(l);
      } else {
        throw std::invalid_argument("bad inventory clause '" + clause + "'");
      }
    }
  }
  state.takeDirty();
}

pool::LeaseRequest parseRequest(const std::string& spec) {
  std::istringstream words(spec);
  pool::LeaseRequest r;
  words >> r.gpus;
  r.owner = "alice";
  r.ttl = std::chrono::hours(1000);
  std::string w;
  while (words >> w) {
    auto value = [&](const char* key) { return w.substr(std::string(key).size()); };
    if (w.rfind("ppn=", 0) == 0)
      r.gpus_per_node = std::stoi(value("ppn="));
    else if (w == "whole")
      r.whole_nodes = true;
    else if (w == "one-switch")
      r.one_switch = true;
    else if (w == "strict")
      r.topology_strict = true;
    else if (w.rfind("model=", 0) == 0)
      r.gpu_model = value("model=");
    else if (w.rfind("mem=", 0) == 0)
      r.min_memory_bytes = std::stoull(value("mem=")) << 30;
    else if (w.rfind("label=", 0) == 0) {
      std::string kv = value("label=");
      r.labels[kv.substr(0, kv.find(':'))] = kv.substr(kv.find(':') + 1);
    } else if (w.rfind("prio=", 0) == 0)
      r.priority = std::stoi(value("prio="));
    else if (w.rfind("max=", 0) == 0)
      r.max_duration = std::chrono::seconds(std::stoll(value("max=")));
    else if (w.rfind("owner=", 0) == 0)
      r.owner = value("owner=");
    else if (w == "preemptible")
      r.preemptible = true;
    else if (w.rfind("upto=", 0) == 0)  // elastic: gpus to this many
      r.max_gpus = std::stoi(value("upto="));
    else if (w.rfind("every=", 0) == 0)  // an elastic lease's resize interval, in seconds
      r.resize_interval = std::chrono::seconds(std::stoll(value("every=")));
    else if (w.rfind("mig=", 0) == 0)  // MIG instances of that profile (PROFILE+: or larger)
      pool::setMigProfile(r, value("mig="), "mig=");
    else if (w.rfind("share=", 0) == 0)  // MPS shares of that fraction of a GPU
      pool::setSharePercent(r, value("share="), "share=");
    else if (w.rfind("gpumem=", 0) == 0)  // MPS shares with that much memory
      pool::setShareMemory(r, value("gpumem="), "gpumem=");
    else
      throw std::invalid_argument("bad request word '" + w + "'");
  }
  return r;
}

std::string gpuList(const std::vector<pool::GpuRef>& gpus) {
  return pool::formatGpus(gpus);
}

pool::PoolState throughStateFile(pool::PoolState& state, const std::filesystem::path& file) {
  {
    pool::Store store(file);
    store.begin();
    pool::Dirty all = state.takeDirty();
    for (const auto& [name, n] : state.nodeMap()) all.nodes.insert(name);
    store.write(state, all);
    store.commit();
  }
  pool::Store store(file);
  pool::PoolState loaded;
  store.load(loaded);
  return loaded;
}

std::vector<std::string> leasesUnderNotice(const pool::PoolState& state) {
  std::vector<std::string> out;
  for (const auto& [id, lease] : state.leaseMap())
    if (lease.preempt_at) out.push_back(id);
  return out;
}

void registerAgent(pool::PoolState& state, const std::string& node, pool::TimePoint now) {
  topo::ClusterNode c;
  c.name = node;
  c.topology = state.nodeMap().at(node).topology;
  state.registerAgentNode({c, "poold-agent test"}, now);
}

pool::PoolState livePool(const std::string& spec, pool::LiveOptions options) {
  pool::PoolState state;
  state.setLiveOptions(options);
  addInventory(state, spec, t0());
  std::vector<topo::ClusterNode> nodes;
  for (const auto& [name, node] : state.nodeMap()) {
    topo::ClusterNode c;
    c.name = name;
    c.topology = node.topology;
    c.levels.switch_name = node.levels.switch_name;
    c.labels = node.labels;
    nodes.push_back(c);
  }
  for (const auto& c : nodes) state.registerAgentNode({c, "poold-agent test"}, t0());
  return state;
}

pool::Heartbeat heartbeatOf(const pool::PoolState& state, const std::string& node, double utilization) {
  const pool::PoolNode& n = state.nodeMap().at(node);
  pool::Heartbeat hb;
  hb.node = node;
  hb.agent_version = "poold-agent test";
  hb.topology_hash = n.topology_hash;
  for (size_t i = 0; i < n.gpuCount(); ++i) {
    topo::GpuSample g;
    g.index = i;
    g.sm_utilization = utilization;
    hb.gpus.push_back(g);
  }
  return hb;
}

}  // namespace poolrun::test
