// libFuzzer target: the topology JSON reader rejects bad documents with poolrun::Error only.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/writers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  try {
    poolrun::topo::NodeTopology topo = poolrun::topo::fromJson(doc, "fuzz.json");
    (void)poolrun::topo::toJson(topo).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    (void)poolrun::topo::toMatrix(topo);
  } catch (const poolrun::Error&) {
  }
  return 0;
}
