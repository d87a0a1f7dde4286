#include "poolrun/doctor/doctor.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "checks.hpp"

extern char** environ;

namespace poolrun::doctor {
namespace {

class ProcessToolRunner final : public ToolRunner {
 public:
  std::optional<std::string> run(const std::vector<std::string>& argv) override {
    int pipefd[2];
    if (argv.empty() || pipe2(pipefd, O_CLOEXEC) != 0) return std::nullopt;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(pipefd[1]);
    if (rc != 0) {
      close(pipefd[0]);
      return std::nullopt;
    }
    std::string out;
    char buf[65536];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) out.append(buf, static_cast<size_t>(n));
    }
    close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
    return out;
  }
};

}  // namespace

std::unique_ptr<ToolRunner> processToolRunner() {
  return std::make_unique<ProcessToolRunner>();
}

Report checkNode(const NodeSources& sources, const Scope& scope) {
  const Roots& roots = sources.roots;
  Report report;
  std::vector<std::string> warnings;
  std::vector<topo::SysfsRdmaDevice> devices;
  std::error_code ec;
  if (std::filesystem::exists(roots.sys / "class" / "infiniband", ec))
    devices = topo::readRdmaDevices(roots.sys, warnings);
  for (const std::string& w : warnings) {
    report.add({"rdma.sysfs", Status::kWarn, "sysfs", w,
                "the kernel or driver lays sysfs out unusually: check `rdma link show`", ""});
  }
  if (devices.empty() && !(scope.planned && !scope.ports.empty())) {
    report.add({"rdma", Status::kSkip, "node",
                "no RDMA device under " + (roots.sys / "class" / "infiniband").string(), "", ""});
  } else {
    detail::checkPorts(detail::livePorts(roots, devices), scope, report);
    std::set<std::string> nics;
    for (const topo::SysfsRdmaDevice& d : devices) {
      bool used = !scope.planned || std::any_of(scope.ports.begin(), scope.ports.end(),
                                                [&](const PlannedPort& p) { return p.nic == d.name; });
      if (used) nics.insert(d.name);
    }
    detail::checkVerbs(roots, {nics.begin(), nics.end()}, report);
    if (!nics.empty()) detail::checkMemlock(roots, report);
  }
  if (!devices.empty()) {
    detail::checkGdr(roots, devices, scope, report);
  } else if (!scope.planned) {
    report.add({"gdr", Status::kSkip, "node", "no RDMA device: GPUDirect RDMA does not apply", "", ""});
  }
  if (sources.host) detail::checkHost(roots, report);
  if (sources.tools != nullptr)
    detail::checkTools(*sources.tools, !devices.empty(), !detail::pciGpus(roots).empty(), report);
  if (sources.gpus != nullptr) detail::checkGpus(*sources.gpus, report);
  return report;
}

Report checkTopology(const topo::NodeTopology& topology, const Scope& scope) {
  Report report;
  detail::checkPorts(detail::topologyPorts(topology), scope, report);
  return report;
}

}  // namespace poolrun::doctor
