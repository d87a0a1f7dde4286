#include "support/etcd_cluster.hpp"

#include "support/process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

namespace poolrun::test {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

}  // namespace

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("no free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(a.sin_port);
}

namespace {}  // namespace

std::string httpGet(int port, const std::string& path, milliseconds limit) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  timeval tv{static_cast<time_t>(limit.count() / 1000),
             static_cast<suseconds_t>(limit.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

bool EtcdCluster::available(std::string& why) {
  if (access(kBinary, X_OK) != 0) {
    why = std::string(kBinary) + " is not installed (Debian: apt-get install etcd-server etcd-client)";
    return false;
  }
  return true;
}

EtcdCluster::EtcdCluster(int members, const Tls* tls, int token_ttl) : token_ttl_(token_ttl) {
  if (tls != nullptr) tls_ = *tls;
  const std::string scheme = tls_ ? "https://" : "http://";
  std::random_device random;
  // A port found free may be taken before etcd binds it (tests start clusters side by side): a
  // member that exits at once is such a case, and the cluster starts again on other ports.
  for (int attempt = 1;; ++attempt) {
    token_ = "poolrun-test-" + std::to_string(random());
    members_.clear();
    initial_cluster_.clear();
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = freePort();
      m.peer_port = freePort();
      m.metrics_port = tls_ ? freePort() : 0;
      initial_cluster_ += (i ? "," : "") + m.name + "=" + scheme + "127.0.0.1:" + std::to_string(m.peer_port);
      members_.push_back(m);
    }
    std::error_code ec;
    for (const Member& m : members_) std::filesystem::remove_all(dir_.path() / m.name, ec);
    try {
      for (Member& m : members_) launch(m, true);
      const auto deadline = Steady::now() + std::chrono::seconds(30);
      bool exited = false;
      while (!waitHealthy(milliseconds(500)) && !exited && Steady::now() < deadline) {
        for (Member& m : members_) {
          int status = 0;
          if (m.pid > 0 && waitpid(m.pid, &status, WNOHANG) == m.pid) {
            m.pid = -1;
            exited = true;
          }
        }
      }
      if (!exited && waitHealthy(milliseconds(0))) return;
      if (!exited || attempt == 3)
        throw std::runtime_error("the etcd cluster " + uri() +
                                 " did not become healthy within 30 s (logs in " + dir_.path().string() +
                                 ")");
    } catch (...) {
      for (Member& m : members_) stop(m);
      throw;
    }
    for (Member& m : members_) stop(m);
  }
}

EtcdCluster::~EtcdCluster() {
  for (Member& m : members_) stop(m);
}

std::string EtcdCluster::uri() const {
  std::string out = tls_ ? "etcds://" : "etcd://";
  for (size_t i = 0; i < members_.size(); ++i)
    out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(members_[i].client_port);
  return out;
}

void EtcdCluster::launch(Member& m, bool fresh) {
  const std::string scheme = tls_ ? "https://" : "http://";
  const std::string client = scheme + "127.0.0.1:" + std::to_string(m.client_port);
  const std::string peer = scheme + "127.0.0.1:" + std::to_string(m.peer_port);
  const std::string data = (dir_.path() / m.name).string();
  const std::string log = (dir_.path() / (m.name + ".log")).string();
  // Elections ten times faster than etcd's defaults (heartbeat 100 ms, election 1 s): a loopback
  // cluster does not need the margin, and the failover tests measure poold, not etcd. A pool's
  // group commit may hold more than etcd's default 128 operations (docs/ha.md).
  std::vector<std::string> argv{kBinary,
                                "--name",
                                m.name,
                                "--data-dir",
                                data,
                                "--listen-client-urls",
                                client,
                                "--advertise-client-urls",
                                client,
                                "--listen-peer-urls",
                                peer,
                                "--initial-advertise-peer-urls",
                                peer,
                                "--initial-cluster",
                                initial_cluster_,
                                "--initial-cluster-state",
                                fresh ? "new" : "existing",
                                "--initial-cluster-token",
                                token_,
                                "--heartbeat-interval",
                                "50",
                                "--election-timeout",
                                "500",
                                "--max-txn-ops",
                                "4096"};
  if (tls_) {
    for (const std::string& a : std::vector<std::string>{"--cert-file",
                                                         tls_->cert,
                                                         "--key-file",
                                                         tls_->key,
                                                         "--trusted-ca-file",
                                                         tls_->ca,
                                                         "--client-cert-auth",
                                                         "--peer-cert-file",
                                                         tls_->cert,
                                                         "--peer-key-file",
                                                         tls_->key,
                                                         "--peer-trusted-ca-file",
                                                         tls_->ca,
                                                         "--peer-client-cert-auth",
                                                         "--listen-metrics-urls",
                                                         "http://127.0.0.1:" + std::to_string(m.metrics_port),
                                                         "--auth-token",
                                                         "simple",
                                                         "--auth-token-ttl",
                                                         std::to_string(token_ttl_)})
      argv.push_back(a);
  }
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test killed by its timeout leaves no etcd behind
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    std::vector<char*> c;
    for (std::string& s : argv) c.push_back(s.data());
    c.push_back(nullptr);
    execv(c[0], c.data());
    _exit(127);
  }
  m.pid = pid;
}

void EtcdCluster::stop(Member& m) {
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (waitpid(m.pid, &status, WNOHANG) == m.pid) {
      m.pid = -1;
      return;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ::kill(m.pid, SIGKILL);
  waitpid(m.pid, &status, 0);
  m.pid = -1;
}

void EtcdCluster::kill(int member) {
  Member& m = members_.at(static_cast<size_t>(member));
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  int status = 0;
  waitpid(m.pid, &status, 0);
  m.pid = -1;
}

void EtcdCluster::start(int member) {
  Member& m = members_.at(static_cast<size_t>(member));
  if (m.pid <= 0) launch(m, false);
}

bool EtcdCluster::healthy(int member) const {
  const Member& m = members_.at(static_cast<size_t>(member));
  std::string reply = httpGet(tls_ ? m.metrics_port : m.client_port, "/health", milliseconds(2000));
  return reply.find("\"health\":\"true\"") != std::string::npos;
}

bool EtcdCluster::waitHealthy(milliseconds limit) const {
  const auto deadline = Steady::now() + limit;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < members_.size(); ++i)
      if (members_[i].pid > 0 && !healthy(static_cast<int>(i))) all = false;
    if (all) return true;
    if (Steady::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(100));
  }
}

void EtcdCluster::enableAuth(const std::string& user, const std::string& password, const std::string& prefix,
                             const std::string& client_cert, const std::string& client_key) {
  std::string ctl = "/usr/bin/etcdctl --endpoints=" + std::string(tls_ ? "https" : "http") +
                    "://127.0.0.1:" + std::to_string(members_.at(0).client_port);
  if (tls_) ctl += " --cacert '" + tls_->ca + "' --cert '" + client_cert + "' --key '" + client_key + "'";
  const std::string rootPassword = "root-" + password;
  for (const std::string& command : std::vector<std::string>{
           "user add root:" + rootPassword, "user add " + user + ":" + password, "role add poolrun",
           "role grant-permission poolrun --prefix=true readwrite " + prefix,
           "user grant-role " + user + " poolrun", "auth enable"}) {
    const ProcessResult r = runShell("ETCDCTL_API=3 " + ctl + " " + command);
    if (r.status != 0) throw std::runtime_error("etcdctl " + command + " failed: " + r.err + r.out);
  }
}

}  // namespace poolrun::test
