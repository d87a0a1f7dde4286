#include "poold_process.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#include "support/etcd_cluster.hpp"

namespace poolrun::test {
namespace {

std::vector<char*> cargs(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

PooldProcess::PooldProcess(const std::filesystem::path& state, const std::filesystem::path& tokens,
                           const std::vector<std::string>& extra, int port) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> argv{POOLD_BINARY,   "--listen",     "127.0.0.1:" + std::to_string(port),
                                "--state",      state.string(), "--token-file",
                                tokens.string()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    auto a = cargs(argv);
    execv(a[0], a.data());
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[256];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  size_t at = line.find("://");  // http:// or https://
  if (at != std::string::npos) at = line.rfind("http", at);
  if (at == std::string::npos) {
    kill9();
    throw std::runtime_error("poold did not start: '" + line + "'");
  }
  uri_ = line.substr(at, line.find('\n', at) - at);
  port_ = std::stoi(uri_.substr(uri_.rfind(':') + 1));
}

PooldProcess::~PooldProcess() {
  stop();
}

void PooldProcess::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    usleep(50'000);
  }
  kill9();
}

bool PooldProcess::waitServing(std::chrono::milliseconds limit) const {
  auto deadline = std::chrono::steady_clock::now() + limit;
  auto ok = [this] {
    std::string reply = httpGet(port_, "/healthz", std::chrono::milliseconds(1000));
    return reply.rfind("HTTP/1.", 0) == 0 && reply.compare(8, 5, " 200 ") == 0;
  };
  while (!ok()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    usleep(20'000);
  }
  return true;
}

int PooldProcess::waitExit(std::chrono::milliseconds limit) {
  if (pid_ <= 0) return -1;
  auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) != pid_) {
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    usleep(20'000);
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void PooldProcess::kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

EtcdCluster& sharedEtcd() {
  static std::unique_ptr<EtcdCluster> cluster = std::make_unique<EtcdCluster>(3);
  return *cluster;
}

std::vector<std::string> storeOptions(const std::string& store, int port) {
  if (store == "sqlite") return {};
  static std::atomic<int> prefixes{0};
  return {"--store",       sharedEtcd().uri(),
          "--etcd-prefix", "/poolrun-test-" + std::to_string(getpid()) + "-" + std::to_string(++prefixes),
          "--advertise",   "http://127.0.0.1:" + std::to_string(port)};
}

int runProgram(const std::vector<std::string>& argv, std::string* out, const std::vector<std::string>& env) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> a = argv;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    for (const std::string& e : env) putenv(strdup(e.c_str()));
    auto c = cargs(a);
    execv(c[0], c.data());
    _exit(127);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

PooldReplicas::PooldReplicas(const std::string& etcd, int n, const std::filesystem::path& dir,
                             std::filesystem::path tokens, std::vector<std::string> extra)
    : dir_(dir), tokens_(std::move(tokens)), etcd_(etcd), extra_(std::move(extra)) {
  static std::atomic<int> count{0};
  prefix_ = "/replicas-" + std::to_string(getpid()) + "-" + std::to_string(++count);
  for (int i = 0; i < n; ++i) ports_.push_back(freePort());
  procs_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    start(i);
    if (i == 0) leader(std::chrono::seconds(10));  // the first leads
  }
}

void PooldReplicas::start(int i) {
  const std::string port = std::to_string(ports_[static_cast<size_t>(i)]);
  std::vector<std::string> options = {"--store",       etcd_,
                                      "--etcd-prefix", prefix_,
                                      "--advertise",   "http://127.0.0.1:" + port,
                                      "--etcd-ttl",    std::to_string(kEtcdTtl)};
  options.insert(options.end(), extra_.begin(), extra_.end());
  procs_[static_cast<size_t>(i)] = std::make_unique<PooldProcess>(
      dir_ / ("state" + std::to_string(i)), tokens_, options, ports_[static_cast<size_t>(i)]);
}

std::string PooldReplicas::uri() const {
  std::string out;
  for (int p : ports_) out += (out.empty() ? "" : ",") + std::string("http://127.0.0.1:") + std::to_string(p);
  return out;
}

int PooldReplicas::leader(std::chrono::milliseconds limit, int except) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    for (size_t i = 0; i < ports_.size(); ++i) {
      if (static_cast<int>(i) == except) continue;
      const std::string reply = httpGet(ports_[i], "/healthz", std::chrono::milliseconds(500));
      if (reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200")) return static_cast<int>(i);
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace poolrun::test
