// libFuzzer target: the NCCL topology XML reader must reject any input with poolrun::Error and
// never crash, hang or leak; what it accepts must survive a write and a second read.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string xml(reinterpret_cast<const char*>(data), size);
  try {
    poolrun::topo::NodeTopology topo = poolrun::topo::readNcclXmlString(xml, "fuzz.xml");
    std::string again = poolrun::topo::toNcclXml(topo);
    poolrun::topo::NodeTopology back = poolrun::topo::readNcclXmlString(again, "fuzz-rewritten.xml");
    if (back.gpus.size() != topo.gpus.size()) __builtin_trap();
    (void)poolrun::topo::toJson(topo).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const poolrun::Error&) {
  }
  return 0;
}
