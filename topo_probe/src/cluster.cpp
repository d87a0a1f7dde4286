#include "poolrun/topo/cluster.hpp"

#include <toml++/toml.h>
#include <cstdlib>
#include <map>
#include <set>

#include "file_util.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/topo/hostlist.hpp"
#include "poolrun/topo/sources.hpp"

namespace poolrun::topo {
namespace {

std::filesystem::path resolveTopology(const std::filesystem::path& clusterFile, const std::string& value) {
  std::filesystem::path p(value);
  const char* fixtures = std::getenv("POOLRUN_FIXTURES");
  if (fixtures != nullptr && *fixtures != '\0') {
    const std::string marker = "shared/fixtures/";
    size_t at = value.find(marker);
    if (at != std::string::npos) return std::filesystem::path(fixtures) / value.substr(at + marker.size());
  }
  if (p.is_relative()) p = clusterFile.parent_path() / p;
  return p.lexically_normal();
}

}  // namespace

const ClusterNode* Cluster::node(const std::string& name) const {
  for (const ClusterNode& n : nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

std::string domainConflict(const std::string& node, const NodeLevels& levels, const std::string& other,
                           const NodeLevels& otherLevels) {
  for (auto [key, member] : {std::pair{"block", &NodeLevels::block}, std::pair{"spine", &NodeLevels::spine}})
    if (levels.*member != otherLevels.*member)
      return "nvlink_domain '" + common::printable(levels.nvlink_domain) + "': node " + node + " has " + key +
             " '" + common::printable(levels.*member) + "', node " + other + " of the same domain " + key +
             " '" + common::printable(otherLevels.*member) +
             "' (the nodes of one NVLink domain share their block and spine: give them the same)";
  return "";
}

namespace {

// Each NVLink domain of the file: at most kMaxNvlinkDomainGpus, its nodes under one block and spine.
void checkDomains(const std::vector<ClusterNode>& nodes, const std::string& file) {
  struct Domain {
    const ClusterNode* first;
    size_t gpus = 0, nodes = 0;
  };
  std::map<std::string, Domain> domains;
  for (const ClusterNode& n : nodes) {
    if (n.levels.nvlink_domain.empty()) continue;
    Domain& d = domains.try_emplace(n.levels.nvlink_domain, Domain{&n}).first->second;
    if (std::string problem = domainConflict(n.name, n.levels, d.first->name, d.first->levels);
        !problem.empty())
      throw badInput(file + ": " + problem);
    d.gpus += n.topology ? n.topology->gpus.size() : 0;
    ++d.nodes;
  }
  for (const auto& [name, d] : domains)
    if (d.gpus > kMaxNvlinkDomainGpus)
      throw badInput(file + ": nvlink_domain '" + common::printable(name) + "' joins " +
                     std::to_string(d.gpus) + " GPUs on " + std::to_string(d.nodes) +
                     " nodes; one NVLink domain joins at most " + std::to_string(kMaxNvlinkDomainGpus) +
                     " (an NVL72 rack: 72): give each rack's nodes their own nvlink_domain");
}

}  // namespace

Cluster readClusterString(const std::string& text, const std::filesystem::path& file) {
  const std::string name = file.string();
  common::checkTomlKeyDepth(text, name, "cluster files nest 3: [[group]] labels.KEY");
  toml::table doc;
  try {
    doc = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    throw badInput(name + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  for (auto&& [key, value] : doc) {
    if (key.str() != "group") {
      throw badInput(name + ": unknown top-level key '" + std::string(key.str()) +
                     "' (expected [[group]] tables)");
    }
  }
  const toml::array* groups = doc["group"].as_array();
  if (groups == nullptr || groups->empty()) {
    throw badInput(name + ": no [[group]] of nodes (see the cluster file format in topo_probe/README.md)");
  }
  Cluster cluster;
  cluster.file = file;
  std::map<std::filesystem::path, std::shared_ptr<const NodeTopology>> loaded;
  std::set<std::string> seen;
  static const std::set<std::string> kKeys = {"nodes",      "topology", "nvlink_domain", "block", "switch",
                                              "rail_group", "spine",    "fabric",        "labels"};
  for (size_t g = 0; g < groups->size(); ++g) {
    const toml::table* group = (*groups)[g].as_table();
    std::string where = name + ": group " + std::to_string(g + 1);
    if (group == nullptr) throw badInput(where + ": must be a table");
    for (auto&& [key, value] : *group) {
      if (!kKeys.contains(std::string(key.str()))) {
        throw badInput(where + ": unknown key '" + std::string(key.str()) +
                       "' (known: nodes, topology, nvlink_domain, block, switch, rail_group, spine, fabric, "
                       "labels)");
      }
    }
    auto str = [&](const char* key, bool required) -> std::string {
      const toml::node* n = group->get(key);
      if (n == nullptr) {
        if (required) throw badInput(where + ": missing '" + key + "'");
        return "";
      }
      if (!n->is_string()) throw badInput(where + ": '" + key + "' must be a string");
      return std::string(*n->value<std::string>());
    };
    // Names the pool stores and shows (levels, labels): UTF-8 without control
    // characters, as poold takes them in a registration.
    auto stored = [&](const char* key) {
      std::string value = str(key, false);
      common::checkText(value, common::kMaxLabelBytes, where + ": " + key);
      return value;
    };
    std::vector<std::string> hosts;
    try {
      hosts = expandHostlist(str("nodes", true));
    } catch (const Error& e) {
      throw badInput(where + ": " + e.what());
    }
    std::filesystem::path topoFile = resolveTopology(file, str("topology", true));
    auto it = loaded.find(topoFile);
    if (it == loaded.end()) {
      try {
        it = loaded.emplace(topoFile, std::make_shared<const NodeTopology>(readTopologyFile(topoFile))).first;
      } catch (const Error& e) {
        throw Error(e.code(), where + ": topology: " + e.what());
      }
    }
    ClusterNode proto;
    proto.topology = it->second;
    proto.topology_file = topoFile;
    for (const LevelField& level : kLevelFields) proto.levels.*level.member = stored(level.key);
    if (std::string f = str("fabric", false); !f.empty()) {
      common::checkText(f, common::kMaxLabelBytes, where + ": fabric");
      try {
        proto.fabric = fabricFromString(f);
      } catch (const Error& e) {
        throw badInput(where + ": " + e.what());
      }
    }
    if (const toml::node* labels = group->get("labels")) {
      const toml::table* t = labels->as_table();
      if (t == nullptr) throw badInput(where + ": 'labels' must be a table, e.g. labels = { rack = \"r1\" }");
      for (auto&& [k, v] : *t) {
        if (!v.is_string()) throw badInput(where + ": label '" + std::string(k.str()) + "' must be a string");
        const std::string key(k.str()), value(*v.value<std::string>());
        common::checkText(key, common::kMaxLabelBytes, where + ": a label's name");
        common::checkText(value, common::kMaxLabelBytes, where + ": label '" + common::printable(key) + "'");
        proto.labels[key] = value;
      }
    }
    for (std::string& host : hosts) {
      common::checkNodeName(host, where + ": node name");
      if (!seen.insert(host).second)
        throw badInput(where + ": node " + host + " is already in an earlier group");
      ClusterNode node = proto;
      node.name = std::move(host);
      cluster.nodes.push_back(std::move(node));
    }
  }
  checkDomains(cluster.nodes, name);
  return cluster;
}

Cluster readClusterFile(const std::filesystem::path& file) {
  return readClusterString(common::readRegularFile(file, common::kClusterFileLimit, "cluster files"), file);
}

Cluster singleNodeCluster(const std::filesystem::path& topologyFile) {
  auto topo = std::make_shared<const NodeTopology>(readTopologyFile(topologyFile));
  Cluster c;
  c.file = topologyFile;
  ClusterNode n;
  n.name = topo->hostname.empty() ? "node0" : topo->hostname;
  n.topology = topo;
  n.topology_file = topologyFile;
  c.nodes.push_back(std::move(n));
  return c;
}

}  // namespace poolrun::topo
