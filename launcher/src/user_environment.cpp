// The user's variables against the plan's (plan.hpp): the shell's never override it, -x does, and
// a -x CUDA_VISIBLE_DEVICES stays within the lease.

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/launcher/plan.hpp"

namespace poolrun::launcher {

std::vector<std::pair<std::string, std::string>> shellPlannedVariables(
    const std::vector<std::string>& exports) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& var : plannedVariables()) {
    const char* value = std::getenv(var.c_str());
    if (value == nullptr) continue;
    bool named = std::any_of(exports.begin(), exports.end(),
                             [&](const std::string& x) { return x == var || x.starts_with(var + "="); });
    if (!named) out.emplace_back(var, value);
  }
  return out;
}

std::string ignoredShellVariablesNote(const JobPlan& plan,
                                      const std::vector<std::pair<std::string, std::string>>& shell) {
  std::string ignored;
  for (const auto& variable : shell) {
    const std::string& name = variable.first;
    const std::string& value = variable.second;
    bool differs = std::any_of(plan.ranks.begin(), plan.ranks.end(), [&](const RankPlan& r) {
      return std::any_of(r.env.begin(), r.env.end(),
                         [&](const auto& e) { return e.first == name && e.second != value; });
    });
    if (differs) ignored += (ignored.empty() ? "" : ", ") + name + "=" + common::printable(value);
  }
  if (ignored.empty()) return "";
  return "your shell's " + ignored +
         " not used: the plan sets these for each rank (its GPU, NICs and place in the job); to override "
         "the plan, give -x VAR=VALUE";
}

void checkUserGpusWithinPlan(const JobPlan& plan, const std::string& what) {
  for (const RankPlan& r : plan.ranks) {
    if (!r.user_won.contains("CUDA_VISIBLE_DEVICES")) continue;
    auto it = std::find_if(r.env.begin(), r.env.end(),
                           [](const auto& e) { return e.first == "CUDA_VISIBLE_DEVICES"; });
    if (it == r.env.end()) continue;
    const NodePlan& node = plan.nodeOf(r);
    // What the ranks of this node were given: CUDA indexes, GPU UUIDs, MIG instance UUIDs.
    std::set<std::string> held;
    std::string listed;
    for (const RankPlan& o : plan.ranks) {
      if (o.node_index != r.node_index) continue;
      held.insert(std::to_string(o.cuda_index));
      const topo::Gpu& g = node.node.topology->gpus[o.gpu];
      if (!g.uuid.empty()) held.insert(g.uuid);
      if (!o.mig.empty()) held.insert(o.mig);
      listed += (listed.empty() ? "" : ",") + (o.mig.empty() ? std::to_string(o.cuda_index) : o.mig);
    }
    std::string_view list = it->second;
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string entry(common::trim(list.substr(0, comma)));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      if (entry.empty() || held.contains(entry)) continue;
      throw badInput(
          "-x CUDA_VISIBLE_DEVICES=" + common::printable(it->second) + " puts rank " +
          std::to_string(r.rank) + " on node " + node.name + " on GPU " + common::printable(entry) +
          ", which " + what + " does not hold (it holds " + listed +
          " there, by CUDA index with CUDA_DEVICE_ORDER=PCI_BUS_ID); drop the -x to use the plan's GPUs");
    }
  }
}

}  // namespace poolrun::launcher
