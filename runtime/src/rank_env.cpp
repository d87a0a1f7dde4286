#include "poolrun/runtime/rank_env.hpp"

#include <nlohmann/json.hpp>

#include "poolrun/topo/error.hpp"

namespace poolrun::runtime {

std::map<std::string, std::string> rankEnvironment(std::string_view text, int rank) {
  using nlohmann::json;
  auto bad = [](const std::string& what) {
    return badInput(std::string(kRankEnvVariable) + ": " + what +
                    " (it is written by poolrun; run the job with poolrun)");
  };
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) throw bad("not a JSON object");
  if (doc.value("schema", "") != kRankEnvSchema) throw bad(std::string("schema is not ") + kRankEnvSchema);
  const json& sets = doc["sets"];
  const json& templates = doc["templates"];
  const json& runs = doc["runs"];
  if (!sets.is_array() || !templates.is_array() || !runs.is_array())
    throw bad("sets, templates and runs must be arrays");
  for (const json& run : runs) {
    if (!run.is_array() || run.size() != 4 || !std::all_of(run.begin(), run.end(), [](const json& v) {
          return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX;
        })) {
      throw bad("each run must be [first_rank, nodes, ranks_per_node, template]");
    }
    int64_t first = run[0], nodes = run[1], perNode = run[2], tpl = run[3];
    if (rank < first || rank >= first + nodes * perNode) continue;
    if (perNode == 0 || static_cast<size_t>(tpl) >= templates.size())
      throw bad("run names a missing template");
    const json& t = templates[static_cast<size_t>(tpl)];
    int64_t local = (rank - first) % perNode;
    if (!t.is_array() || static_cast<size_t>(local) >= t.size() ||
        !t[static_cast<size_t>(local)].is_number_unsigned() ||
        t[static_cast<size_t>(local)].get<size_t>() >= sets.size()) {
      throw bad("template " + std::to_string(tpl) + " has no set for local rank " + std::to_string(local));
    }
    const json& set = sets[t[static_cast<size_t>(local)].get<size_t>()];
    if (!set.is_object()) throw bad("a set must be an object of strings");
    std::map<std::string, std::string> env;
    for (const auto& [k, v] : set.items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        throw bad("bad variable '" + k + "'");
      env[k] = v.get<std::string>();
    }
    return env;
  }
  throw bad("no entry for rank " + std::to_string(rank));
}

}  // namespace poolrun::runtime
