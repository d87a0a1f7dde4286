#include "poolrun/runtime/port_check.hpp"

#include <fstream>
#include <sstream>

namespace poolrun::runtime {

std::vector<std::string> downPorts(const std::string& nccl_ib_hca, const std::filesystem::path& sysfs_root) {
  std::vector<std::string> problems;
  std::string list = nccl_ib_hca;
  if (!list.empty() && list[0] == '^') return problems;
  if (!list.empty() && list[0] == '=') list.erase(0, 1);
  std::istringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string nic = item.substr(0, colon);
    std::string port = colon == std::string::npos ? "1" : item.substr(colon + 1);
    std::filesystem::path file = sysfs_root / "class" / "infiniband" / nic / "ports" / port / "state";
    std::ifstream in(file);
    std::string state;
    if (!in || !std::getline(in, state)) {
      problems.push_back(nic + " port " + port + " does not exist on this node (" + file.string() +
                         " cannot be read): check NCCL_IB_HCA and that the NIC's driver is loaded");
      continue;
    }
    while (!state.empty() && std::isspace(static_cast<unsigned char>(state.back()))) state.pop_back();
    // "4: ACTIVE" and "5: ACTIVE_DEFER" carry traffic; DOWN, INIT (no subnet manager) and ARMED do not.
    if (state.starts_with("4:") || state.starts_with("5:")) continue;
    problems.push_back(nic + " port " + port + " is " + state + " (" + file.string() +
                       "): NCCL would hang connecting through it");
  }
  return problems;
}

}  // namespace poolrun::runtime
