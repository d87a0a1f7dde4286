#include "poolrun/launcher/preflight.hpp"

#include <set>

namespace poolrun::launcher {

doctor::Scope doctorScope(const JobPlan& plan, size_t node_index) {
  doctor::Scope scope;
  scope.planned = true;
  std::set<std::pair<std::string, int>> seen;
  std::set<std::pair<topo::PciAddress, std::string>> pairs;
  if (plan.fabric == topo::Fabric::kTcp) return scope;  // NCCL_IB_DISABLE: no port is used through verbs
  for (const RankPlan& r : plan.ranks) {
    if (r.node_index != node_index) continue;
    std::optional<int> gid;
    for (const auto& [var, value] : r.env) {
      if (var != "NCCL_IB_GID_INDEX") continue;
      try {
        gid = std::stoi(value);
      } catch (const std::exception&) {
        gid = -1;  // unparsable: NCCL will not use the right one either
      }
    }
    for (const NicChoice& n : r.nics) {
      if (!n.verbs) continue;
      if (seen.emplace(n.name, n.port).second) {
        scope.ports.push_back(
            {n.name, n.port, n.link_layer == topo::LinkLayer::kEthernet ? gid : std::nullopt});
      }
      if (r.gdr) pairs.emplace(r.gpu_pci, n.name);
    }
  }
  for (const auto& [gpu, nic] : pairs) scope.gdr.push_back({gpu, nic});
  return scope;
}

doctor::Report preflight(const JobPlan& plan, const std::function<bool(const NodePlan&)>& live,
                         const doctor::Roots& roots) {
  doctor::Report all;
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const NodePlan& node = plan.nodes[i];
    doctor::Scope scope = doctorScope(plan, i);
    if (scope.ports.empty()) continue;  // TCP: nothing the doctor can judge before the start
    doctor::Report report;
    if (live(node)) {
      doctor::NodeSources sources;
      sources.roots = roots;
      sources.host = false;
      report = doctor::checkNode(sources, scope);
    } else if (node.node.topology) {
      report = doctor::checkTopology(*node.node.topology, scope);
    }
    for (doctor::Check& c : report.checks) c.node = node.name;
    all.append(report);
  }
  return all;
}

void printPreflight(const doctor::Report& report, std::ostream& err) {
  for (const doctor::Check& c : report.checks) {
    if (c.status != doctor::Status::kWarn && c.status != doctor::Status::kFail) continue;
    err << "poolrun: doctor: " << doctor::toString(c.status) << " " << c.id << " " << c.node << " "
        << c.subject << ": " << c.evidence << "\n";
    if (!c.fix.empty()) err << "poolrun: doctor:   fix: " << c.fix << "\n";
  }
}

}  // namespace poolrun::launcher
