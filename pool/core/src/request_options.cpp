// The options a client turns into a LeaseRequest (poolctl acquire and poolrun alike): one reading
// and one wording of their errors (client.hpp).

#include "poolrun/pool/request_options.hpp"

#include "poolrun/pool/accounts.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/topo/hostlist.hpp"

namespace poolrun::pool {

void setMigProfile(LeaseRequest& request, std::string_view text, const std::string& option) {
  // NAME, then "+FEATURE" parts ("1g.10gb+me"), then a '+' of our own: or larger.
  std::string_view profile = text;
  const bool larger = profile.ends_with('+');
  if (larger) profile.remove_suffix(1);
  bool ok = !profile.empty() && profile.size() <= kMaxMigProfileBytes && profile.front() >= '0' &&
            profile.front() <= '9' && !profile.ends_with('+');
  for (size_t i = 0; ok && i < profile.size(); ++i) {
    const char c = profile[i];
    ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         (c == '+' && i + 1 < profile.size() && profile[i + 1] >= 'a' && profile[i + 1] <= 'z');
  }
  if (!ok)
    throw badInput(
        option + " '" + common::printable(std::string(text)) +
        "': expected a MIG profile as nvidia-smi names it (1g.10gb, 3g.40gb; PROFILE+ for that or a "
        "larger one); `poolrun topo` lists the profiles a GPU offers");
  request.mig_profile = std::string(profile);
  request.mig_or_larger = larger;
}

void setAccount(LeaseRequest& request, std::string_view text, const std::string& option) {
  if (std::string problem = accountNameProblem(text); !problem.empty())
    throw badInput(option + " '" + common::printable(text) + "': " + problem +
                   " (an account of the pool's accounts file: poolctl fairshare lists them)");
  request.account = std::string(text);
}

void setReservation(LeaseRequest& request, std::string_view text, const std::string& option) {
  if (std::string problem = accountNameProblem(text); !problem.empty())
    throw badInput(option + " '" + common::printable(text) + "': " + problem +
                   " (a reservation's name: poolctl reservations lists them)");
  request.reservation = std::string(text);
}

void setPlacement(LeaseRequest& request, std::string_view text, const std::string& option) {
  if (text != "strict" && text != "best-effort")
    throw badInput(option + " '" + common::printable(text) +
                   "': give strict (wait rather than cross a level an empty pool would not) or best-effort");
  request.topology_strict = text == "strict";
}

void setGpuModel(LeaseRequest& request, std::string_view text, const std::string& option) {
  common::checkText(text, common::kMaxLabelBytes, option);
  request.gpu_model = std::string(text);
}

void setMinMemoryGib(LeaseRequest& request, std::string_view text, const std::string& option) {
  request.min_memory_bytes = common::parseOption<uint64_t>(option, text, 0, kMinMemoryBytesRange.max >> 30)
                             << 30;
}

void addLabel(LeaseRequest& request, std::string_view text, const std::string& option) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw badInput(option + " '" + common::printable(text) +
                   "': expected KEY=VALUE (a node label, as the cluster " +
                   "file or the node's registration gives it)");
  common::checkText(text, 2 * common::kMaxLabelBytes, option);
  request.labels[std::string(text.substr(0, eq))] = std::string(text.substr(eq + 1));
}

void addExcludedNodes(LeaseRequest& request, std::string_view text, const std::string& option) {
  std::vector<std::string> nodes;
  try {
    nodes = topo::expandHostlist(text, kMaxExcludedNodes + 1);
  } catch (const Error& e) {
    throw badInput(option + ": " + e.what());
  }
  if (nodes.empty())
    throw badInput(option + " '" + common::printable(text) + "': names no node (n01,n[05-08])");
  for (const std::string& node : nodes) {
    common::checkNodeName(node, option);
    request.exclude_nodes.insert(node);
  }
  if (request.exclude_nodes.size() > kMaxExcludedNodes)
    throw badInput(option + " '" + common::printable(text) + "': more than " +
                   std::to_string(kMaxExcludedNodes) + " nodes");
}

void setSharePercent(LeaseRequest& request, std::string_view text, const std::string& option) {
  auto refuse = [&](const std::string& why) -> void {
    throw badInput(option + " '" + common::printable(std::string(text)) + "': " + why +
                   "; give a fraction of a GPU (0.25) or a percentage (25%), from 1% to 1");
  };
  std::string_view number = text;
  const bool percent = number.ends_with('%');
  if (percent) number.remove_suffix(1);
  // Digits, at most one '.', nothing else: no sign, exponent, "nan" or spaces.
  const bool digits =
      !number.empty() && number.size() <= 16 &&
      std::all_of(number.begin(), number.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
      std::count(number.begin(), number.end(), '.') <= 1 && number != ".";
  if (!digits) refuse("not a number");
  const double value = std::stod(std::string(number)) * (percent ? 1.0 : 100.0);
  if (value > 100.0 + 1e-9) refuse("more than a whole GPU");
  if (value < 1.0 - 1e-9) refuse("less than 1% of a GPU");  // MPS limits SMs by whole percents
  const long rounded = std::lround(value);
  request.share_percent = static_cast<int>(rounded);
}

void setShareMemory(LeaseRequest& request, std::string_view text, const std::string& option) {
  size_t n = 0;
  while (n < text.size() && text[n] >= '0' && text[n] <= '9') ++n;
  const std::string_view unit = text.substr(n);
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  if (unit == "K" || unit == "KiB") shift = 10;
  if (unit == "M" || unit == "MiB") shift = 20;
  if (unit == "G" || unit == "GiB") shift = 30;
  if (unit == "T" || unit == "TiB") shift = 40;
  const std::string shown = option + " '" + common::printable(std::string(text)) + "'";
  if (n == 0 || n > 16 || shift < 0)
    throw badInput(shown + ": not a byte count; give bytes or a whole number with a unit (512M, 10G, 10GiB)");
  const uint64_t value = std::stoull(std::string(text.substr(0, n)));
  if (value == 0) throw badInput(shown + ": no memory at all; give at least 1M");
  if (value > (kShareMemoryBytesRange.max >> shift))
    throw badInput(shown + ": more than 1 PiB, more than any GPU has");
  request.share_memory_bytes = value << shift;
}

}  // namespace poolrun::pool
