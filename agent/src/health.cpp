// The node's health checks (health.hpp).

#include "poolrun/agent/health.hpp"

#include <memory>

#include "poolrun/common/names.hpp"
#include "poolrun/doctor/doctor.hpp"
#include "poolrun/pool/limits.hpp"

namespace poolrun::agent {

namespace {

// `text` with every byte that is not part of well-formed UTF-8 shown as \xNN.
std::string utf8(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    const size_t good = common::utf8ErrorOffset(text);
    out.append(text.substr(0, good));
    if (good == text.size()) break;
    static constexpr char kHex[] = "0123456789abcdef";
    const auto byte = static_cast<unsigned char>(text[good]);
    out += std::string("\\x") + kHex[byte >> 4] + kHex[byte & 0xf];
    text.remove_prefix(good + 1);
  }
  return out;
}

}  // namespace

std::string healthFailure(const doctor::Report& report) {
  std::string out;
  for (const doctor::Check& c : report.checks) {
    // The locked-memory limit the doctor reads is the agent's own process's, not its jobs'.
    if (c.status != doctor::Status::kFail || c.id == "rdma.memlock") continue;
    out += (out.empty() ? "" : "; ") + c.id + (c.subject.empty() ? "" : " " + c.subject) + ": " + c.evidence;
  }
  out = utf8(out);
  if (out.size() <= pool::kMaxHealthBytes) return out;
  size_t cut = pool::kMaxHealthBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80) --cut;  // a character's start
  return out.substr(0, cut) + "...";
}

std::function<std::string()> doctorHealthCheck(std::filesystem::path sysfs_root, std::string cuda_probe) {
  auto gpus = std::shared_ptr<doctor::GpuQuery>(doctor::nvmlGpuQuery(std::move(cuda_probe)));
  return [sysfs_root = std::move(sysfs_root), gpus] {
    doctor::NodeSources sources;
    sources.roots.sys = sysfs_root;
    sources.gpus = gpus.get();
    sources.host = false;
    return healthFailure(doctor::checkNode(sources, doctor::Scope{}));
  };
}

}  // namespace poolrun::agent
