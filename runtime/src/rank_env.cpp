#include "poolrun/runtime/rank_env.hpp"

#include "core/rank_env.hpp"
#include "core_adapters.hpp"
#include "poolrun/common/error.hpp"

namespace poolrun::runtime {

std::map<std::string, std::string> rankEnvironment(std::string_view text, int rank) {
  struct Collect final : core::VariableSink {
    std::map<std::string, std::string> env;
    bool set(core::Text name, core::Text value) override {
      env[hostedString(name)] = hostedString(value);
      return true;
    }
  } sink;
  std::string scratch(text.size(), '\0');
  core::Line error;
  if (!core::rankVariables(coreText(text), rank, scratch.data(), sink, error)) throw badInput(error.c_str());
  return std::move(sink.env);
}

}  // namespace poolrun::runtime
