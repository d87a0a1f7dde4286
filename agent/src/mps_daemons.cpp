// The MPS control daemons of a node's GPUs (agent.hpp: mpsControl): one per GPU with shares, each
// seeing only its GPU and listening in a pipe directory of its own, so that a client names its GPU
// by the directory it is given (CUDA_MPS_PIPE_DIRECTORY) and its share's limits hold on that GPU.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "poolrun/agent/agent.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"

extern char** environ;

namespace poolrun::agent {
namespace {

constexpr const char* kPidFile = "nvidia-cuda-mps-control.pid";  // the daemon writes it in its pipe directory

struct Ran {
  int status = -1;  // the exit status; 128 + N for signal N; -1: not run, or killed at the limit
  std::string output;
};

// Runs `argv` (found on PATH) with `env` added to the agent's environment and `input` on its stdin,
// its stdout and stderr read together; at most `limit`, then killed. The daemon `-d` starts forks
// away and keeps the output pipe: what was written by the time the command itself ended is kept.
Ran run(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& input,
        std::chrono::milliseconds limit) {
  Ran ran;
  std::vector<std::string> envText;
  for (char** e = environ; *e != nullptr; ++e) envText.emplace_back(*e);
  envText.insert(envText.end(), env.begin(), env.end());
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : envText) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return ran;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    return ran;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    sigset_t none;  // the agent blocks the signals its threads wait for: the program gets none blocked
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    execvpe(args[0], args.data(), envp.data());
    const std::string why = std::string("cannot run it: ") + std::strerror(errno);
    ssize_t ignored = write(2, why.data(), why.size());
    (void)ignored;
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]), close(out[0]);
    return ran;
  }
  if (!input.empty()) {
    ssize_t ignored = write(in[1], input.data(), input.size());  // a few bytes: the pipe takes them
    (void)ignored;
  }
  close(in[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  auto drain = [&] {
    char buf[4096];
    ssize_t n;
    while (ran.output.size() < 64 * 1024 && (n = read(out[0], buf, sizeof buf)) > 0)
      ran.output.append(buf, static_cast<size_t>(n));
  };
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int raw = 0;
    const pid_t r = waitpid(pid, &raw, WNOHANG);
    if (r == pid) {
      ran.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : WIFSIGNALED(raw) ? 128 + WTERMSIG(raw) : -1;
      break;
    }
    if (r < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= end) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &raw, 0) < 0 && errno == EINTR) {
      }
      ran.output += "\n(killed after " + std::to_string(limit.count()) + " ms)";
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    poll(&p, 1, 20);
    drain();
  }
  drain();
  close(out[0]);
  return ran;
}

// The first line of a command's output, for a message ("" where it said nothing).
std::string firstLine(const std::string& output) {
  std::string line = output.substr(0, output.find('\n'));
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return common::printable(line);
}

class Daemons {
 public:
  Daemons(const topo::NodeTopology& topology, MpsOptions options) : options_(std::move(options)) {
    for (const topo::Gpu& g : topology.gpus)
      devices_.push_back(g.uuid.empty() ? std::to_string(g.index) : g.uuid);
  }

  std::string start(size_t gpu) const {
    if (gpu >= devices_.size()) return "the node has no GPU " + std::to_string(gpu);
    if (running(gpu)) return "";
    const std::filesystem::path dir = pool::mpsPipeDirectory(options_.dir, gpu);
    std::error_code ec;
    std::filesystem::create_directories(dir / "log", ec);
    if (ec)
      return "cannot make its pipe directory " + dir.string() + ": " + ec.message() +
             " (poold-agent runs MPS as root; give --mps-dir a directory it may write)";
    // Clients of every user reach the daemon through the directory.
    std::filesystem::permissions(dir, std::filesystem::perms(0755), ec);
    const Ran ran = run({options_.control, "-d"}, env(gpu), "", options_.limit);
    if (ran.status == 127)
      return options_.control + " -d: " + firstLine(ran.output) +
             " (install the NVIDIA driver's utilities, or give poold-agent --mps-control PATH)";
    if (ran.status != 0)
      return options_.control + " -d exited with status " + std::to_string(ran.status) +
             (ran.output.empty() ? "" : ": " + firstLine(ran.output)) +
             " (its log: " + (dir / "log").string() +
             "; MPS needs root, and the GPU in the Default or Exclusive Process compute mode)";
    return "";
  }

  std::string stop(size_t gpu) const {
    if (gpu >= devices_.size() || !running(gpu)) return "";
    const Ran ran = run({options_.control}, env(gpu), "quit\n", options_.limit);
    if (ran.status != 0)
      return "`echo quit | " + options_.control + "` exited with status " + std::to_string(ran.status) +
             (ran.output.empty() ? "" : ": " + firstLine(ran.output));
    return "";
  }

  std::set<size_t> runningNow() const {
    std::set<size_t> out;
    for (size_t gpu = 0; gpu < devices_.size(); ++gpu)
      if (running(gpu)) out.insert(gpu);
    return out;
  }

 private:
  std::vector<std::string> env(size_t gpu) const {
    const std::filesystem::path dir = pool::mpsPipeDirectory(options_.dir, gpu);
    return {"CUDA_VISIBLE_DEVICES=" + devices_[gpu], "CUDA_MPS_PIPE_DIRECTORY=" + dir.string(),
            "CUDA_MPS_LOG_DIRECTORY=" + (dir / "log").string()};
  }

  // The PID the daemon wrote in its pipe directory is a process that lives.
  bool running(size_t gpu) const {
    try {
      const std::string text = common::readRegularFileHead(
          pool::mpsPipeDirectory(options_.dir, gpu) / kPidFile, 64, "MPS daemon PID files");
      size_t used = 0;
      const long pid = std::stol(text, &used);
      return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    } catch (const std::exception&) {
      return false;  // none, or not a number
    }
  }

  MpsOptions options_;
  std::vector<std::string> devices_;  // per GPU: what its daemon's CUDA_VISIBLE_DEVICES names
};

}  // namespace

MpsControl mpsControl(const topo::NodeTopology& topology, MpsOptions options) {
  auto d = std::make_shared<const Daemons>(topology, std::move(options));
  return {[d](size_t gpu) { return d->start(gpu); }, [d](size_t gpu) { return d->stop(gpu); },
          [d] { return d->runningNow(); }};
}

}  // namespace poolrun::agent
