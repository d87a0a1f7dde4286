// One cgroup per lease (lease_cgroup.hpp).

#include "poolrun/agent/lease_cgroup.hpp"

#include <fcntl.h>
#include <linux/bpf.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"

namespace poolrun::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

Error ioError(const std::string& what) {
  return Error(ErrorCode::kIo, what);
}

// Writes `text` to a cgroup file in one write (the kernel takes one value per write).
void put(const fs::path& file, const std::string& text) {
  const int fd = open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw ioError("cannot open " + file.string() + ": " + strerror(errno));
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw ioError("cannot write '" + text + "' to " + file.string() + ": " + strerror(err));
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<pid_t> readPids(const fs::path& file) {
  std::vector<pid_t> out;
  std::istringstream in(slurp(file));
  for (long long pid; in >> pid;)
    if (pid > 0) out.push_back(static_cast<pid_t>(pid));
  return out;
}

// --- cgroup v2's device program -----------------------------------------------------------------

bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

// A program that refuses every access to the devices in `deny` (character devices) and allows the
// rest. Its context is struct bpf_cgroup_dev_ctx {access_type, major, minor}, the device's type in
// the low 16 bits of access_type.
std::vector<bpf_insn> denyProgram(const std::vector<CharDevice>& deny) {
  std::vector<bpf_insn> p = {
      insn(BPF_LDX | BPF_W | BPF_MEM, 2, 1, 0, 0),       // r2 = access_type
      insn(BPF_ALU | BPF_AND | BPF_K, 2, 0, 0, 0xffff),  // r2 &= 0xffff: the device's type
      insn(BPF_LDX | BPF_W | BPF_MEM, 3, 1, 4, 0),       // r3 = major
      insn(BPF_LDX | BPF_W | BPF_MEM, 4, 1, 8, 0),       // r4 = minor
  };
  for (const CharDevice& d : deny) {
    // Not this device: on to the next one's five instructions.
    p.push_back(insn(BPF_JMP | BPF_JNE | BPF_K, 2, 0, 4, BPF_DEVCG_DEV_CHAR));
    p.push_back(insn(BPF_JMP | BPF_JNE | BPF_K, 3, 0, 3, static_cast<int32_t>(d.major)));
    p.push_back(insn(BPF_JMP | BPF_JNE | BPF_K, 4, 0, 2, static_cast<int32_t>(d.minor)));
    p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0));  // r0 = 0: refused
    p.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1));  // r0 = 1: allowed
  p.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return p;
}

long bpf(int cmd, bpf_attr& attr) {
  return syscall(__NR_bpf, cmd, &attr, sizeof attr);
}

// Loads the device program for `deny` and attaches it to `folder` in place of any before it.
void attachDeviceProgram(const fs::path& folder, const std::vector<CharDevice>& deny) {
  const std::vector<bpf_insn> program = denyProgram(deny);
  static const char kLicense[] = "GPL";
  std::vector<char> log(16384, 0);
  bpf_attr load{};
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<uint64_t>(program.data());
  load.insn_cnt = static_cast<uint32_t>(program.size());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  load.log_buf = reinterpret_cast<uint64_t>(log.data());
  load.log_size = static_cast<uint32_t>(log.size());
  load.log_level = 1;
  const int prog = static_cast<int>(bpf(BPF_PROG_LOAD, load));
  if (prog < 0)
    throw ioError("the kernel refused the device program for " + folder.string() +
                  " (BPF_PROG_LOAD: " + strerror(errno) + "): " + std::string(log.data()) +
                  " (a cgroup v2 node needs CONFIG_CGROUP_BPF and root)");
  const int dir = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    const int err = errno;
    close(prog);
    throw ioError("cannot open " + folder.string() + ": " + strerror(err));
  }
  bpf_attr attach{};
  attach.target_fd = static_cast<uint32_t>(dir);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog);
  attach.attach_type = BPF_CGROUP_DEVICE;
  attach.attach_flags = BPF_F_ALLOW_OVERRIDE;  // a second attach (an agent's restart) replaces it
  const long r = bpf(BPF_PROG_ATTACH, attach);
  const int err = errno;
  close(dir);
  close(prog);  // the attachment holds the program
  if (r != 0)
    throw ioError("cannot attach the device program to " + folder.string() +
                  " (BPF_PROG_ATTACH: " + strerror(err) + ")");
}

// --- making and ending ---------------------------------------------------------------------------

void makeFolder(const fs::path& folder) {
  if (mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST)
    throw ioError("cannot make cgroup " + folder.string() + ": " + strerror(errno));
}

// In v2, a limit needs its controller enabled for the parent's children.
void enableControllerV2(const fs::path& parent, const std::string& controller) {
  std::istringstream enabled(slurp(parent / "cgroup.subtree_control"));
  for (std::string c; enabled >> c;)
    if (c == controller) return;
  std::istringstream offered(slurp(parent / "cgroup.controllers"));
  for (std::string c; offered >> c;)
    if (c == controller) return put(parent / "cgroup.subtree_control", "+" + controller);
  throw ioError("the " + controller + " controller is not available in " + parent.string() +
                " (its cgroup.controllers): enable it for the agent's cgroups, or leave the limit out");
}

// "PID (COMMAND) STATE" for each of `pids` (the first few), from /proc: what a cgroup that could
// not be removed still holds, and why it may not die (D: asleep uninterruptibly).
std::string describe(const std::vector<pid_t>& pids) {
  if (pids.empty()) return "no process; a child cgroup?";
  std::string out = std::to_string(pids.size()) + " processes:";
  for (size_t i = 0; i < pids.size() && i < 5; ++i) {
    // /proc/PID/stat: PID (COMM) STATE ...; COMM may hold spaces and parentheses.
    const std::string stat = slurp(fs::path("/proc") / std::to_string(pids[i]) / "stat");
    const size_t open = stat.find('('), close = stat.rfind(')');
    out += " " + std::to_string(pids[i]);
    if (open != std::string::npos && close != std::string::npos && close > open && close + 2 < stat.size())
      out += " " + stat.substr(open, close - open + 1) + " " + stat[close + 2];
  }
  return out;
}

// Kills what is in `procs` until nothing is (a killed process leaves cgroup.procs once it has
// exited), or `until` passes; every process seen is added to `seen`.
void killUntilEmpty(const std::vector<fs::path>& procs, std::chrono::steady_clock::time_point until,
                    std::set<pid_t>& seen) {
  for (;;) {
    bool empty = true;
    for (const fs::path& file : procs)
      for (pid_t pid : readPids(file)) {
        empty = false;
        seen.insert(pid);
        kill(pid, SIGKILL);
      }
    if (empty || std::chrono::steady_clock::now() >= until) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

CgroupMounts readCgroupMounts(const fs::path& mountinfo) {
  CgroupMounts out;
  std::ifstream in(mountinfo);
  for (std::string line; std::getline(in, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, device, root, point, fstype, source, options;
    head >> id >> parent >> device >> root >> point;
    tail >> fstype >> source >> options;
    if (fstype == "cgroup2") {
      out.unified = point;
    } else if (fstype == "cgroup") {
      std::istringstream words(options);
      for (std::string word; std::getline(words, word, ',');)
        if (word == "devices" || word == "pids" || word == "freezer" || word == "memory")
          out.controllers[word] = point;
    }
  }
  return out;
}

std::optional<CgroupVersion> defaultCgroupVersion(const CgroupMounts& mounts) {
  if (mounts.controllers.count("devices")) return CgroupVersion::kV1;
  if (!mounts.unified.empty()) return CgroupVersion::kV2;
  return std::nullopt;
}

std::set<std::string> leaseCgroupNames(const CgroupMounts& mounts, CgroupVersion version,
                                       const std::string& parent) {
  std::vector<fs::path> tops;
  if (version == CgroupVersion::kV2) {
    if (!mounts.unified.empty()) tops.push_back(mounts.unified / parent);
  } else {
    for (const char* controller : {"devices", "freezer", "pids", "memory"})
      if (auto it = mounts.controllers.find(controller); it != mounts.controllers.end())
        tops.push_back(it->second / parent);
  }
  std::set<std::string> out;
  for (const fs::path& top : tops) {
    std::error_code ec;
    if (!fs::exists(top, ec)) continue;
    for (fs::directory_iterator it(top, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code kind;
      if (it->is_directory(kind) && common::leaseIdProblem(name).empty() && !name.starts_with("probe-"))
        out.insert(name);
    }
    if (ec) throw ioError("cannot list the leases' cgroups in " + top.string() + ": " + ec.message());
  }
  return out;
}

LeaseCgroup::LeaseCgroup(const CgroupMounts& mounts, CgroupVersion version, const std::string& parent,
                         const std::string& name, const Confinement& confinement)
    : version_(version) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw Error(ErrorCode::kInternal, "a lease cgroup's name may not be '" + name + "'");
  try {
    if (version == CgroupVersion::kV2) {
      if (mounts.unified.empty())
        throw ioError("this node has no cgroup2 mount (/proc/self/mountinfo): confine with cgroup v1");
      const fs::path top = mounts.unified / parent;
      makeFolder(top);
      if (confinement.pids_max) enableControllerV2(top, "pids");
      if (confinement.memory_max) enableControllerV2(top, "memory");
      folders_.push_back(top / name);
      makeFolder(folders_.back());
      procs_.push_back(folders_.back() / "cgroup.procs");
      if (!confinement.deny.empty()) attachDeviceProgram(folders_.back(), confinement.deny);
      if (confinement.pids_max) put(folders_.back() / "pids.max", std::to_string(*confinement.pids_max));
      if (confinement.memory_max) {
        put(folders_.back() / "memory.max", std::to_string(*confinement.memory_max));
        put(folders_.back() / "memory.swap.max", "0");  // the limit is on memory, not moved to swap
      }
      return;
    }
    auto hierarchy = [&](const std::string& controller) -> std::optional<fs::path> {
      auto it = mounts.controllers.find(controller);
      if (it == mounts.controllers.end()) return std::nullopt;
      makeFolder(it->second / parent);
      folders_.push_back(it->second / parent / name);
      makeFolder(folders_.back());
      procs_.push_back(folders_.back() / "cgroup.procs");
      return folders_.back();
    };
    const std::optional<fs::path> devices = hierarchy("devices");
    if (!devices) throw ioError("this node has no cgroup v1 devices hierarchy: confine with cgroup v2");
    for (const CharDevice& d : confinement.deny)
      put(*devices / "devices.deny", "c " + std::to_string(d.major) + ":" + std::to_string(d.minor) + " rwm");
    if (const std::optional<fs::path> freezer = hierarchy("freezer")) {
      freezer_ = *freezer;
      // Taken again after an agent died between freezing it and thawing it (destroy()): thawed, or
      // a process that joins it would stay frozen, and its agent wait on its exec for ever.
      if (!slurp(freezer_ / "freezer.state").starts_with("THAWED")) put(freezer_ / "freezer.state", "THAWED");
    }
    const std::optional<fs::path> pids = hierarchy("pids");
    const std::optional<fs::path> memory = hierarchy("memory");
    if (confinement.pids_max) {
      if (!pids) throw ioError("this node has no cgroup v1 pids hierarchy for a process limit");
      put(*pids / "pids.max", std::to_string(*confinement.pids_max));
    }
    if (confinement.memory_max) {
      if (!memory) throw ioError("this node has no cgroup v1 memory hierarchy for a memory limit");
      put(*memory / "memory.limit_in_bytes", std::to_string(*confinement.memory_max));
    }
  } catch (...) {
    for (auto it = folders_.rbegin(); it != folders_.rend(); ++it) rmdir(it->c_str());
    throw;
  }
}

void LeaseCgroup::add(pid_t pid) const {
  for (const fs::path& file : procs_) put(file, std::to_string(pid));
}

std::vector<pid_t> LeaseCgroup::pids() const {
  return procs_.empty() ? std::vector<pid_t>{} : readPids(procs_.front());
}

size_t LeaseCgroup::destroy(milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::set<pid_t> seen;
  if (version_ == CgroupVersion::kV2 && fs::exists(folders_.front() / "cgroup.kill")) {
    for (pid_t pid : pids()) seen.insert(pid);
    put(folders_.front() / "cgroup.kill", "1");
  } else if (!freezer_.empty()) {
    // Held still, none can fork while the others are killed; the kill lands as they thaw. A task
    // the freezer cannot stop (asleep uninterruptibly, under load) gets a quarter of the time: the
    // kills that follow must have the rest.
    put(freezer_ / "freezer.state", "FROZEN");
    const auto frozenBy = std::chrono::steady_clock::now() + limit / 4;
    while (slurp(freezer_ / "freezer.state").starts_with("FREEZING") &&
           std::chrono::steady_clock::now() < frozenBy)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (pid_t pid : readPids(freezer_ / "cgroup.procs")) {
      seen.insert(pid);
      kill(pid, SIGKILL);
    }
    put(freezer_ / "freezer.state", "THAWED");
  }
  killUntilEmpty(procs_, until, seen);
  // A killed process counts until it is reaped (on v2 the cgroup stays populated, and rmdir says
  // EBUSY, while an orphan waits for init to reap it).
  for (auto it = folders_.rbegin(); it != folders_.rend(); ++it) {
    int err = 0;
    while (rmdir(it->c_str()) != 0 && errno != ENOENT) {
      err = errno;
      if (err != EBUSY || std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(milliseconds(1));
      err = 0;
    }
    if (err != 0)
      throw ioError("cannot remove cgroup " + it->string() + ": " + strerror(err) +
                    " (left in it: " + describe(pids()) + ")");
  }
  return seen.size();
}

}  // namespace poolrun::agent
