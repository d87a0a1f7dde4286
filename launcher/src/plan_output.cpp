// What a plan looks like to people (the table), to tools (plan.json) and to Open MPI (the rankfile);
// JobDirectory (job_directory.cpp) writes them.

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "poolrun/launcher/plan.hpp"

namespace poolrun::launcher {
namespace {

using ojson = nlohmann::ordered_json;

std::string nicList(const RankPlan& r) {
  std::string out;
  for (const NicChoice& n : r.nics) out += (out.empty() ? "" : ",") + n.name;
  return out.empty() ? "-" : out;
}

// The GDR column: on/off where NCCL's IB transport decides by the plan, n/a where NCCL's transport
// has no GPUDirect RDMA (sockets, no NIC), plugin where the aws-ofi-nccl plugin decides (EFA).
std::string gdrCell(const RankPlan& r) {
  switch (r.transport) {
    case NetTransport::kIbVerbs:
      return r.gdr ? "on" : "off";
    case NetTransport::kOfiPlugin:
      return "plugin";
    case NetTransport::kSocket:
    case NetTransport::kNone:
      break;
  }
  return "n/a";
}

}  // namespace

ojson planToJson(const JobPlan& plan) {
  ojson doc;
  doc["schema"] = "poolrun.plan/1";
  doc["fabric"] = toString(plan.fabric);
  doc["world_size"] = plan.ranks.size();
  doc["hwthread_slots"] = plan.hwthread_slots;
  ojson nodes = ojson::array();
  for (const NodePlan& n : plan.nodes) {
    nodes.push_back(
        {{"name", n.name},
         {"switch", n.node.levels.switch_name.empty() ? ojson(nullptr) : ojson(n.node.levels.switch_name)},
         {"topology", n.node.topology_file.string()},
         {"first_rank", n.first_rank},
         {"ranks", n.ranks}});
  }
  doc["nodes"] = nodes;
  ojson ranks = ojson::array();
  for (const RankPlan& r : plan.ranks) {
    ojson nics = ojson::array(), ports = ojson::array();
    for (const NicChoice& n : r.nics) {
      nics.push_back(n.name);
      ports.push_back(
          {{"name", n.name},
           {"port", n.port},
           {"netdev", n.netdev.empty() ? ojson(nullptr) : ojson(n.netdev)},
           {"link_layer", topo::toString(n.link_layer)},
           {"rate_gbps", n.rate_gbps > 0 ? ojson(n.rate_gbps) : ojson(nullptr)},
           {"roce_v2_gid_index", n.roce_v2_gid_index ? ojson(*n.roce_v2_gid_index) : ojson(nullptr)}});
    }
    ojson env = ojson::object();
    for (const auto& [k, v] : r.env) env[k] = v;
    ojson won = ojson::object();
    for (const auto& [k, planned] : r.user_won) won[k] = {{"user", env[k]}, {"planned", planned}};
    const topo::Gpu& gpu = plan.nodeOf(r).node.topology->gpus[r.gpu];
    ranks.push_back({{"rank", r.rank},
                     {"node", plan.nodeOf(r).name},
                     {"local_rank", r.local_rank},
                     {"local_size", r.local_size},
                     {"gpu",
                      {{"index", r.gpu},
                       {"cuda_index", r.cuda_index},
                       {"mig", r.mig.empty() ? ojson(nullptr) : ojson(r.mig)},
                       {"pci", r.gpu_pci.str()},
                       {"model", gpu.model}}},
                     {"nics", nics},
                     {"nic_ports", ports},
                     {"gpu_nic_path", r.nics.empty() ? ojson(nullptr) : ojson(r.gpu_nic_path.str())},
                     {"transport", toString(r.transport)},
                     {"gdr", r.transport == NetTransport::kOfiPlugin ? ojson(nullptr) : ojson(r.gdr)},
                     {"gdr_reason", r.gdr_reason},
                     {"numa", r.numa == topo::kNone ? ojson(nullptr) : ojson(r.numa)},
                     {"cpuset", r.cpuset.toList()},
                     {"shares_cpus", r.shares_cpus},
                     {"rankfile_slots", r.rankfile_slots},
                     {"env", env},
                     {"user_won", won},
                     {"notes", r.notes}});
  }
  doc["ranks"] = ranks;
  doc["notes"] = plan.notes;
  return doc;
}

std::string planTable(const JobPlan& plan) {
  struct Row {
    std::vector<std::string> cells;
  };
  std::vector<std::string> head = {"RANK",   "NODE", "LOCAL", "GPU",  "BUS ID",
                                   "NIC(S)", "PATH", "GDR",   "NUMA", "CPUS"};
  std::vector<Row> rows;
  for (const RankPlan& r : plan.ranks) {
    rows.push_back({{std::to_string(r.rank), plan.nodeOf(r).name, std::to_string(r.local_rank),
                     std::to_string(r.gpu) + (r.mig.empty() ? "" : " " + r.mig), r.gpu_pci.str(), nicList(r),
                     r.nics.empty() ? "-" : r.gpu_nic_path.str(), gdrCell(r),
                     r.numa == topo::kNone ? "-" : std::to_string(r.numa), r.cpuset.toList()}});
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const Row& row : rows) width[c] = std::max(width[c], row.cells[c].size());
  }
  std::string out = fmt::format("fabric {} · {} ranks on {} nodes\n", toString(plan.fabric),
                                plan.ranks.size(), plan.nodes.size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c)
      l += fmt::format("{:<{}}", cells[c], width[c] + (c + 1 < cells.size() ? 2 : 0));
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(head);
  for (const Row& row : rows) line(row.cells);
  std::set<std::string> notes(plan.notes.begin(), plan.notes.end());
  for (const RankPlan& r : plan.ranks) {
    for (const std::string& n : r.notes) notes.insert(plan.nodeOf(r).name + ": " + n);
    for (const auto& [k, planned] : r.user_won) {
      notes.insert("rank " + std::to_string(r.rank) + ": your " + k + " wins over the planned " + planned);
    }
  }
  if (!notes.empty()) {
    out += "\nnotes:\n";
    for (const std::string& n : notes) out += "  - " + n + "\n";
  }
  return out;
}

std::string rankfile(const JobPlan& plan) {
  std::string out;
  for (const RankPlan& r : plan.ranks) {
    out += fmt::format("rank {}={} slot={}\n", r.rank, plan.nodeOf(r).name, r.rankfile_slots);
  }
  return out;
}

}  // namespace poolrun::launcher
