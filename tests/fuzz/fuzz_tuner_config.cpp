// libFuzzer target: the tuner's configuration readers (poolrun.tuner/1 JSON, the example tuner's CSV
// rules) reject any input with ConfigError and never crash, hang or overflow the stack (the plugin
// runs them on NCCL's threads); what they accept builds decision tables, and its JSON form reads back
// to the same rules.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "poolrun/tuner/config.hpp"
#include "poolrun/tuner/decision.hpp"

namespace tuner = poolrun::tuner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool json = text.find_first_not_of(" \t\r\n") != std::string_view::npos &&
                    text[text.find_first_not_of(" \t\r\n")] == '{';
  try {
    tuner::TunerConfig c;
    if (json) {
      c = tuner::parseConfig(text, "fuzz.json");
      tuner::TunerConfig back = tuner::parseConfig(tuner::toJson(c).dump(), "fuzz-rewritten.json");
      if (back.rules.size() != c.rules.size() || back.calibration.size() != c.calibration.size()) {
        __builtin_trap();
      }
    } else {
      c.has_hardware = false;
      c.rules = tuner::parseExampleCsv(text, "fuzz.conf");
    }
    for (tuner::CommShape shape : {tuner::CommShape{8, 1}, tuner::CommShape{32, 4}}) {
      tuner::DecisionTable table = tuner::DecisionTable::build(c, shape);
      float costs[7 * 3];
      for (float& f : costs) f = 1.0f;
      tuner::Choice choice;
      for (int coll = 0; coll < tuner::kNumColls; ++coll) {
        for (std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{4096}, std::uint64_t{1} << 30}) {
          (void)table.choose(static_cast<tuner::Coll>(coll), bytes, 1, 0, costs, 7, 3, &choice);
        }
      }
    }
  } catch (const tuner::ConfigError&) {
  }
  return 0;
}
