#include "poolrun/runtime/rank_info.hpp"

#include <unistd.h>

#include "core/rank_info.hpp"
#include "core_adapters.hpp"
#include "poolrun/common/error.hpp"

namespace poolrun::runtime {

Environment processEnvironment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

RankInfo rankInfo(const Environment& env) {
  core::RankInfo c;
  core::Line error;
  if (!core::rankInfo(EnvironmentVariables(env), c, error)) throw badInput(error.c_str());
  return {c.rank, c.world_size, c.local_rank, c.local_world_size, hostedString(c.master_addr), c.master_port};
}

std::vector<std::pair<std::string, std::string>> torchVariables(const RankInfo& info) {
  struct Collect final : core::VariableSink {
    std::vector<std::pair<std::string, std::string>> vars;
    bool set(core::Text name, core::Text value) override {
      vars.emplace_back(hostedString(name), hostedString(value));
      return true;
    }
  } sink;
  core::RankInfo c{
      info.rank,       info.world_size, info.local_rank, info.local_world_size, coreText(info.master_addr),
      info.master_port};
  core::torchVariables(c, sink);
  return std::move(sink.vars);
}

}  // namespace poolrun::runtime
