#include "poolrun/pool/placement.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string_view>
#include <unordered_map>

#include "poolrun/topo/fabric.hpp"

namespace poolrun::pool {
namespace {

struct Candidate {
  const NodeView* view;
  int free;
  bool whole;
  int cap;  // the GPUs it can give the request: `free`, or the request's GPUs per node
};

// Nodes chosen for a request and how many GPUs each gives.
struct Choice {
  std::vector<std::pair<const NodeView*, int>> takes;
  long waste = 0;    // usable GPUs left on the chosen nodes
  int whole = 0;     // whole nodes broken into
  size_t units = 1;  // NVLink domains it spans (a node outside any counting as one)
  size_t count() const { return takes.size(); }
};

// Lexicographic: fewer nodes, less waste, fewer whole nodes broken into.
bool better(const Choice& a, const Choice& b) {
  if (a.count() != b.count()) return a.count() < b.count();
  if (a.waste != b.waste) return a.waste < b.waste;
  return a.whole < b.whole;
}

bool byOrder(const Candidate& a, const Candidate& b) {
  return a.view->node->order < b.view->node->order;
}

Choice makeChoice(std::vector<Candidate> chosen, int n) {
  Choice c;
  long sum = 0;
  for (const Candidate& x : chosen) sum += x.free;
  c.waste = sum - n;
  // The waste comes off the smallest node; with the fewest nodes it is always smaller than it.
  std::sort(chosen.begin(), chosen.end(), [](const Candidate& a, const Candidate& b) {
    return a.free != b.free ? a.free < b.free : byOrder(a, b);
  });
  for (size_t i = 0; i < chosen.size(); ++i) {
    int take = chosen[i].free - (i == 0 ? static_cast<int>(c.waste) : 0);
    c.whole += chosen[i].whole ? 1 : 0;
    c.takes.emplace_back(chosen[i].view, take);
  }
  return c;
}

// The fewest nodes out of `cands` that hold n GPUs, and among those the tightest fit.
std::optional<Choice> bestFit(std::vector<Candidate> cands, int n) {
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.free != b.free) return a.free > b.free;
    if (a.whole != b.whole) return !a.whole;
    return byOrder(a, b);
  });
  long sum = 0;
  size_t m = 0;
  while (m < cands.size() && sum < n) sum += cands[m++].free;
  if (sum < n) return std::nullopt;

  if (m <= 3) {
    // Enumerate multisets of (free, whole) kinds; nodes of one kind are interchangeable, the
    // earliest in pool order is taken first.
    std::map<std::pair<int, bool>, std::vector<Candidate>> kinds;
    for (const Candidate& c : cands) kinds[{c.free, c.whole}].push_back(c);
    for (auto& [k, v] : kinds) std::sort(v.begin(), v.end(), byOrder);
    std::vector<std::pair<std::pair<int, bool>, std::vector<Candidate>*>> keys;
    for (auto& [k, v] : kinds) keys.emplace_back(k, &v);
    std::optional<std::vector<size_t>> best;  // counts per kind
    long bestWaste = 0;
    int bestWhole = 0;
    std::vector<size_t> counts(keys.size(), 0);
    auto rec = [&](auto&& self, size_t i, size_t left, long total, int whole) -> void {
      if (left == 0) {
        if (total < n) return;
        long waste = total - n;
        if (!best || waste < bestWaste || (waste == bestWaste && whole < bestWhole)) {
          best = counts;
          bestWaste = waste;
          bestWhole = whole;
        }
        return;
      }
      if (i == keys.size()) return;
      size_t avail = keys[i].second->size();
      for (size_t k = std::min(avail, left);; --k) {
        counts[i] = k;
        self(self, i + 1, left - k, total + static_cast<long>(k) * keys[i].first.first,
             whole + (keys[i].first.second ? static_cast<int>(k) : 0));
        if (k == 0) break;
      }
      counts[i] = 0;
    };
    rec(rec, 0, m, 0, 0);
    std::vector<Candidate> chosen;
    for (size_t i = 0; i < keys.size(); ++i)
      for (size_t k = 0; k < (*best)[i]; ++k) chosen.push_back((*keys[i].second)[k]);
    return makeChoice(std::move(chosen), n);
  }

  // Many nodes: the m-1 largest, then the smallest node that completes the request.
  std::vector<Candidate> chosen(cands.begin(), cands.begin() + static_cast<long>(m - 1));
  long have = 0;
  for (const Candidate& c : chosen) have += c.free;
  long need = n - have;
  const Candidate* last = nullptr;
  for (size_t i = m - 1; i < cands.size(); ++i) {
    const Candidate& c = cands[i];
    if (c.free < need) continue;
    if (!last || c.free < last->free || (c.free == last->free && last->whole && !c.whole)) last = &c;
  }
  chosen.push_back(*last);
  return makeChoice(std::move(chosen), n);
}

// Exactly `m` nodes giving `k` GPUs each: the nodes with the fewest usable GPUs that still have k.
std::optional<Choice> perNodeFit(std::vector<Candidate> cands, int k, size_t m) {
  if (cands.size() < m) return std::nullopt;
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.free != b.free) return a.free < b.free;
    if (a.whole != b.whole) return !a.whole;
    return byOrder(a, b);
  });
  Choice c;
  for (size_t i = 0; i < m; ++i) {
    c.takes.emplace_back(cands[i].view, k);
    c.waste += cands[i].free - k;
    c.whole += cands[i].whole ? 1 : 0;
  }
  return c;
}

// Whole nodes until n GPUs: the biggest nodes first (fewest nodes), then the least surplus.
std::optional<Choice> wholeFit(std::vector<Candidate> cands, int n) {
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    return a.free != b.free ? a.free > b.free : byOrder(a, b);
  });
  long sum = 0;
  size_t m = 0;
  while (m < cands.size() && sum < n) sum += cands[m++].free;
  if (sum < n) return std::nullopt;
  // Replace the last node by the smallest one that still completes the request.
  long have = sum - cands[m - 1].free;
  size_t last = m - 1;
  for (size_t i = m; i < cands.size(); ++i)
    if (have + cands[i].free >= n && cands[i].free < cands[last].free) last = i;
  Choice c;
  for (size_t i = 0; i + 1 < m; ++i) c.takes.emplace_back(cands[i].view, cands[i].free);
  c.takes.emplace_back(cands[last].view, cands[last].free);
  c.waste = have + cands[last].free - n;
  c.whole = static_cast<int>(m);
  return c;
}

// k GPUs of a node, keeping them close: one PCIe switch if some switch has k, else one NUMA node,
// else the largest NUMA groups first.
std::vector<size_t> pickGpus(const PoolNode& node, const std::vector<size_t>& usable, size_t k) {
  if (k >= usable.size()) return usable;
  const auto& gpus = node.topology->gpus;
  auto groupsBy = [&](auto key) {
    std::map<decltype(key(gpus.front())), std::vector<size_t>> groups;
    for (size_t i : usable) groups[key(gpus[i])].push_back(i);
    return groups;
  };
  // The smallest group that has k, among those of a known switch or NUMA node.
  auto smallestWith = [&](const auto& groups, auto unknown) -> const std::vector<size_t>* {
    const std::vector<size_t>* best = nullptr;
    for (const auto& [key, g] : groups)
      if (key != unknown && g.size() >= k && (!best || g.size() < best->size())) best = &g;
    return best;
  };
  const auto bySwitch = groupsBy([](const topo::Gpu& g) { return g.at.switch_index; });
  const auto groups = groupsBy([](const topo::Gpu& g) { return g.at.numa; });  // by NUMA node
  const std::vector<size_t>* best = smallestWith(bySwitch, topo::kNoIndex);
  if (!best) best = smallestWith(groups, topo::kNone);
  if (best) return {best->begin(), best->begin() + static_cast<std::ptrdiff_t>(k)};
  std::vector<std::vector<size_t>> ordered;
  for (const auto& [key, g] : groups) ordered.push_back(g);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::vector<size_t> out;
  for (const auto& g : ordered)
    for (size_t i : g)
      if (out.size() < k) out.push_back(i);
  std::sort(out.begin(), out.end());
  return out;
}

// k MIG instances of a node, packed onto as few GPUs as possible, so that whole GPUs' worth of
// instances stay free: the GPU with the fewest usable instances that still has k, else the GPUs
// with the most first. On a GPU, the smallest instances first (a PROFILE+ request takes larger ones
// only where it must).
std::vector<size_t> pickMigUnits(const PoolNode& node, const std::vector<size_t>& usable, size_t k) {
  std::map<size_t, std::vector<size_t>> byGpu;
  for (size_t u : usable) byGpu[node.gpuOf(u)].push_back(u);
  std::vector<std::vector<size_t>> groups;
  for (auto& [gpu, units] : byGpu) {
    std::stable_sort(units.begin(), units.end(), [&](size_t a, size_t b) {
      const topo::MigInstance* x = node.migInstance(a);
      const topo::MigInstance* y = node.migInstance(b);
      return std::pair(x->memory_bytes, x->sm) < std::pair(y->memory_bytes, y->sm);
    });
    groups.push_back(std::move(units));
  }
  const std::vector<size_t>* tightest = nullptr;
  for (const auto& g : groups)
    if (g.size() >= k && (!tightest || g.size() < tightest->size())) tightest = &g;
  std::vector<size_t> out;
  if (tightest) {
    out.assign(tightest->begin(), tightest->begin() + static_cast<std::ptrdiff_t>(k));
  } else {
    std::stable_sort(groups.begin(), groups.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (const auto& g : groups)
      for (size_t u : g)
        if (out.size() < k) out.push_back(u);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// --- the levels above the node (docs/placement.md): lowest first, a node's name at each
enum Level { kDomain, kBlock, kLeaf, kSpine };

// The leaf is the switch, or in a rail-optimised fabric named only by rail groups, the rail group.
const std::string& levelKey(const PoolNode& n, int level) {
  switch (level) {
    case kDomain:
      return n.levels.nvlink_domain;
    case kBlock:
      return n.levels.block;
    case kLeaf:
      return n.levels.switch_name.empty() ? n.levels.rail_group : n.levels.switch_name;
    default:
      return n.levels.spine;
  }
}

// Nodes that share their name at a level; a node with none there is a group of its own.
struct Group {
  std::vector<Candidate> nodes;
  long cap = 0;       // the GPUs its nodes can give the request
  int64_t first = 0;  // the pool order of its first node
};

std::vector<Group> groupBy(const std::vector<Candidate>& cands, int level) {
  std::vector<Group> groups;
  std::unordered_map<std::string_view, size_t> index;
  for (const Candidate& c : cands) {
    const std::string& key = levelKey(*c.view->node, level);
    size_t at = groups.size();
    if (!key.empty()) at = index.try_emplace(key, groups.size()).first->second;
    if (at == groups.size()) groups.push_back({{}, 0, c.view->node->order});
    Group& g = groups[at];
    g.nodes.push_back(c);
    g.cap += c.cap;
    g.first = std::min(g.first, c.view->node->order);
  }
  return groups;
}

bool hasLevel(const std::vector<Candidate>& cands, int level) {
  return std::any_of(cands.begin(), cands.end(),
                     [&](const Candidate& c) { return !levelKey(*c.view->node, level).empty(); });
}

using Fit = std::function<std::optional<Choice>(const std::vector<Candidate>&, int)>;

// n GPUs inside one NVLink domain (or one node outside any): the best fit, the tighter domain
// where two fit alike, so that roomy domains stay whole for large requests. Domains are tried
// tightest first; one that takes the fewest nodes any could, with nothing left over, ends the search.
std::optional<Choice> inOneDomain(std::vector<Group> domains, int n, const Fit& fit) {
  std::erase_if(domains, [&](const Group& g) { return g.cap < n; });
  std::sort(domains.begin(), domains.end(), [](const Group& a, const Group& b) {
    return a.cap != b.cap ? a.cap < b.cap : a.first < b.first;
  });
  int largest = 1;
  for (const Group& g : domains)
    for (const Candidate& c : g.nodes) largest = std::max(largest, c.cap);
  const size_t fewest = static_cast<size_t>((n + largest - 1) / largest);
  std::optional<Choice> best;
  for (const Group& g : domains) {
    std::optional<Choice> c = fit(g.nodes, n);
    if (c && (!best || better(*c, *best))) best = std::move(c);
    if (best && best->count() == fewest && best->waste == 0) break;
  }
  return best;
}

// n GPUs over the fewest domains of `domains`: the largest whole, the last the smallest that
// completes the request, each part placed inside its domain by `fit`.
std::optional<Choice> acrossDomains(std::vector<Group> domains, int n, const Fit& fit) {
  std::sort(domains.begin(), domains.end(), [](const Group& a, const Group& b) {
    return a.cap != b.cap ? a.cap > b.cap : a.first < b.first;
  });
  long sum = 0;
  size_t m = 0;
  while (m < domains.size() && sum < n) sum += domains[m++].cap;
  if (sum < n) return std::nullopt;
  const long need = n - (sum - domains[m - 1].cap);
  size_t last = m - 1;
  for (size_t i = m; i < domains.size(); ++i)
    if (domains[i].cap >= need && domains[i].cap < domains[last].cap) last = i;
  Choice out;
  out.units = m;
  for (size_t i = 0; i < m; ++i) {
    const Group& g = i + 1 < m ? domains[i] : domains[last];
    std::optional<Choice> part = fit(g.nodes, static_cast<int>(i + 1 < m ? g.cap : need));
    if (!part) return std::nullopt;
    out.takes.insert(out.takes.end(), part->takes.begin(), part->takes.end());
    out.waste += part->waste;
    out.whole += part->whole;
  }
  return out;
}

// n GPUs out of `cands` on the fewest NVLink domains (where the pool has them), else the fewest nodes.
std::optional<Choice> spanFit(const std::vector<Candidate>& cands, int n, const Fit& fit, bool domains) {
  if (!domains) {
    std::optional<Choice> c = fit(cands, n);
    if (c) c->units = c->count();
    return c;
  }
  return acrossDomains(groupBy(cands, kDomain), n, fit);
}

// How many distinct names at `level` the chosen nodes have (a node with none counting alone).
size_t namesAt(const Choice& c, int level) {
  std::set<std::string_view> names;
  size_t alone = 0;
  for (const auto& [view, take] : c.takes) {
    const std::string& key = levelKey(*view->node, level);
    if (key.empty())
      ++alone;
    else
      names.insert(key);
  }
  return names.size() + alone;
}

Spread spreadOfChoice(const Choice& c) {
  return {.nodes = c.count(),
          .domains = namesAt(c, kDomain),
          .blocks = namesAt(c, kBlock),
          .leaves = namesAt(c, kLeaf),
          .spines = namesAt(c, kSpine)};
}

// The placement by levels: inside one NVLink domain where one holds the request; else over the
// fewest domains, under one block, leaf or spine where that takes no more domains and nodes than
// the pool at large (the lowest such level first). --one-switch: under one leaf or not at all.
// `atMost` (--placement strict): no more of any level than that.
std::optional<Choice> chooseByLevels(const std::vector<Candidate>& all, int n, const Fit& fit,
                                     const LeaseRequest& request, const Spread* atMost) {
  auto within = [&](const std::optional<Choice>& c) {
    return c && (!atMost || spreadOfChoice(*c) <= *atMost);
  };
  const bool domains = hasLevel(all, kDomain);
  if (domains && !request.one_switch) {
    std::optional<Choice> one = inOneDomain(groupBy(all, kDomain), n, fit);
    if (within(one)) return one;
  }
  std::optional<Choice> global = request.one_switch ? std::nullopt : spanFit(all, n, fit, domains);
  for (int level : {kBlock, kLeaf, kSpine}) {
    if (request.one_switch && level != kLeaf) continue;
    if (!request.one_switch && !hasLevel(all, level)) continue;
    std::optional<Choice> best;
    for (const Group& g : groupBy(all, level)) {
      if (g.cap < n) continue;
      std::optional<Choice> c = spanFit(g.nodes, n, fit, domains);
      if (!c || (atMost && !within(c))) continue;
      if (!best || c->units < best->units || (c->units == best->units && better(*c, *best)))
        best = std::move(c);
    }
    if (best && (request.one_switch || atMost || !global ||
                 (best->units <= global->units && best->count() <= global->count())))
      return best;
  }
  return within(global) ? global : std::nullopt;
}

}  // namespace

Spread spreadOf(std::span<const PoolNode* const> nodes) {
  Choice c;
  std::vector<NodeView> views;
  views.reserve(nodes.size());
  for (const PoolNode* n : nodes) views.push_back(NodeView{n, {}, false});
  for (const NodeView& v : views) c.takes.emplace_back(&v, 0);
  return spreadOfChoice(c);
}

bool nodeMatches(const PoolNode& node, const LeaseRequest& request, bool anyState) {
  if ((!anyState && (node.state != NodeState::kUp || node.live.unreachable)) || !node.topology) return false;
  if (request.fabric && !topo::nodeCarries(*node.topology, node.fabric, *request.fabric)) return false;
  if (!request.exclude_nodes.empty() && request.exclude_nodes.count(node.name)) return false;
  for (const auto& [key, value] : request.labels) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  return true;
}

bool inMigMode(const topo::Gpu& gpu) {
  return gpu.mig.enabled || gpu.mig.pending;
}

uint64_t shareMemory(const PoolNode& node, size_t gpu, const LeaseRequest& request) {
  if (request.share_memory_bytes > 0) return request.share_memory_bytes;
  return std::min(node.memoryOf(gpu), uint64_t{1} << 50) * static_cast<uint64_t>(request.share_percent) / 100;
}

bool gpuMatches(const topo::Gpu& gpu, const LeaseRequest& request) {
  if (request.mig() || inMigMode(gpu)) return false;  // MIG instances are the units, not the GPU
  if (!request.gpu_model.empty() && gpu.model.find(request.gpu_model) == std::string::npos) return false;
  if (request.min_memory_bytes > 0 && gpu.memory_bytes < request.min_memory_bytes) return false;
  return true;
}

bool unitMatches(const PoolNode& node, size_t unit, const LeaseRequest& request) {
  if (!node.isMigUnit(unit)) {
    // Most requests name no model or memory: the node's copy of the MIG flags answers, without a
    // read of the GPU's topology entry.
    if (request.mig() || (unit < node.gpu_in_mig.size() && node.gpu_in_mig[unit])) return false;
    if (request.gpu_model.empty() && request.min_memory_bytes == 0 && unit < node.gpu_in_mig.size())
      return true;
    return gpuMatches(node.topology->gpus[unit], request);
  }
  const topo::MigInstance* instance = node.migInstance(unit);
  if (!request.mig() || !instance) return false;
  const topo::Gpu& gpu = node.topology->gpus[node.gpuOf(unit)];
  if (gpu.mig.resetPending()) return false;  // MIG mode goes off at the next reset
  if (!request.gpu_model.empty() && gpu.model.find(request.gpu_model) == std::string::npos) return false;
  if (instance->memory_bytes < request.min_memory_bytes) return false;
  if (instance->profile == request.mig_profile) return true;
  if (!request.mig_or_larger) return false;
  // At least the SMs and memory of the profile of that name on this GPU.
  for (const topo::MigProfile& p : gpu.mig.profiles)
    if (p.name == request.mig_profile)
      return instance->sm >= p.sm && instance->memory_bytes >= p.memory_bytes;
  return false;
}

std::optional<std::vector<GpuRef>> place(std::span<const NodeView> nodes, const LeaseRequest& request,
                                         const Spread* atMost) {
  const int n = request.gpus;
  if (n <= 0) return std::nullopt;
  std::vector<Candidate> all;
  for (const NodeView& v : nodes) {
    if (v.usable.empty()) continue;
    if (request.whole_nodes && !v.whole) continue;
    if (request.gpus_per_node > 0 && static_cast<int>(v.usable.size()) < request.gpus_per_node) continue;
    const int free = static_cast<int>(v.usable.size());
    all.push_back({&v, free, v.whole, request.gpus_per_node > 0 ? request.gpus_per_node : free});
  }

  const Fit fit = [&request](const std::vector<Candidate>& cands, int k) -> std::optional<Choice> {
    if (request.whole_nodes) return wholeFit(cands, k);
    if (request.gpus_per_node > 0)
      return perNodeFit(cands, request.gpus_per_node, static_cast<size_t>(k / request.gpus_per_node));
    return bestFit(cands, k);
  };
  std::optional<Choice> choice = chooseByLevels(all, n, fit, request, atMost);
  if (!choice) return std::nullopt;

  std::sort(choice->takes.begin(), choice->takes.end(),
            [](const auto& a, const auto& b) { return a.first->node->order < b.first->node->order; });
  std::vector<GpuRef> out;
  out.reserve(static_cast<size_t>(n));
  if (request.shared()) {
    for (const auto& [view, take] : choice->takes) {
      std::vector<size_t> order(view->usable.size());
      std::iota(order.begin(), order.end(), size_t{0});
      const std::vector<int>& room = view->room;  // a lambda may not capture a structured binding (C++17)
      std::stable_sort(order.begin(), order.end(), [&room](size_t a, size_t b) {
        return (a < room.size() ? room[a] : 100) < (b < room.size() ? room[b] : 100);
      });
      order.resize(static_cast<size_t>(take));
      std::sort(order.begin(), order.end());
      for (size_t k : order) {
        const size_t gpu = view->usable[k];
        GpuRef ref{view->node->name, gpu, {}};
        ref.share = true;
        ref.share_percent = request.share_percent;
        ref.share_memory = shareMemory(*view->node, gpu, request);
        out.push_back(std::move(ref));
      }
    }
    return out;
  }
  for (const auto& [view, take] : choice->takes)
    for (size_t i : request.mig() ? pickMigUnits(*view->node, view->usable, static_cast<size_t>(take))
                                  : pickGpus(*view->node, view->usable, static_cast<size_t>(take)))
      out.push_back({view->node->name, i, request.mig() ? view->node->migInstance(i)->uuid : std::string()});
  return out;
}

}  // namespace poolrun::pool
