// The agent's launch port (launch_server.hpp).

#include "poolrun/agent/launch_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "poolrun/agent/lease_cgroup.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/launch_credential.hpp"
#include "poolrun/common/launch_frames.hpp"
#include "poolrun/common/names.hpp"
#include "user_process.hpp"

namespace poolrun::agent {
namespace {

using common::FrameReader;
using common::sendFrame;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The variables a client may hand its daemon: Open MPI's, PMIx's and PRRTE's own.
bool forwardable(const std::string& name) {
  for (const char* prefix : {"OMPI_", "OPAL_", "PMIX_", "PRTE_", "ORTE_"})
    if (name.starts_with(prefix) && name.size() > std::strlen(prefix))
      return name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
             std::string::npos;
  return false;
}

}  // namespace

struct LaunchServer::Impl {
  LaunchServerOptions opt;
  int listen_fd = -1;
  int stop_fd = -1;  // an eventfd: written once, when the server stops (the acceptor sleeps in poll)
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread acceptor;

  std::mutex mu;  // the sessions, their daemons and the leases' locks; never held across a wait
  std::condition_variable ended;
  size_t sessions = 0;
  size_t unproven = 0;                  // sessions whose credential is not taken yet
  std::set<pid_t> daemons;              // their sessions' leaders not reaped yet, killed at the end
  std::map<std::string, int> by_lease;  // daemons running per lease
  // Per lease, held while its cgroup is made and a daemon forked into it, or while the cgroup of its
  // last daemon is ended: a new daemon never lands in a cgroup being destroyed.
  std::map<std::string, std::shared_ptr<std::mutex>> lease_locks;
  std::shared_ptr<std::mutex> leaseLock(const std::string& lease) {
    std::lock_guard lock(mu);
    auto& l = lease_locks[lease];
    if (!l) l = std::make_shared<std::mutex>();
    return l;
  }

  std::mutex key_mu;  // the key and the spent nonces (taking the key from poold holds this alone)
  std::optional<common::LaunchVerifier> verifier;
  // Apart from the key: taking it again forgets none. In the job records' folder where there is one,
  // so that a restarted agent refuses a replay too.
  std::unique_ptr<common::SpentNonces> spent;
  std::optional<steady_clock::time_point> key_asked;

  void log(const std::string& line) const {
    if (opt.log) opt.log(line);
  }
  void acceptLoop();
  // `proven` set once the client's credential is taken (it no longer counts as unproven).
  void session(int fd, const std::string& peer, bool& proven);

  struct Request {
    std::string command;
    common::LaunchGrant grant;
    UserAccount user;
    std::vector<std::string> env;
  };
  struct Daemon {
    pid_t pid = -1;
    int in = -1, out = -1, err = -1;  // its stdin, stdout and stderr, this side
    int exited = -1;                  // its pidfd: readable once it has ended
  };
  std::optional<Request> readRequest(int fd, FrameReader& in,
                                     const std::function<void(const std::string&)>& refuse);
  std::optional<Daemon> start(const Request& r, const std::function<void(const std::string&)>& refuse);
  int relay(int fd, FrameReader& in, Daemon& d, bool& clientGone);
  static bool toDaemon(FrameReader& in, Daemon& d);
  void end(const std::string& lease, Daemon& d);
  // The grant of `credential`, or throws saying why it is refused.
  common::LaunchGrant take(const std::string& credential);
  void endLease(const std::string& lease);
};

LaunchServer::LaunchServer(LaunchServerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(options);
  const size_t colon = m.opt.listen.rfind(':');
  if (colon == std::string::npos)
    throw Error(ErrorCode::kBadInput,
                "--launch-listen '" + common::printable(m.opt.listen) + "': expected HOST:PORT");
  std::string host = m.opt.listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = m.opt.listen.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535 ||
      getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0)
    throw Error(ErrorCode::kBadInput,
                "--launch-listen '" + common::printable(m.opt.listen) +
                    "': expected HOST:PORT, HOST an address of this node, PORT 0 to 65535");
  m.listen_fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (m.listen_fd >= 0) setsockopt(m.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound = m.listen_fd >= 0 && bind(m.listen_fd, found->ai_addr, found->ai_addrlen) == 0 &&
                     listen(m.listen_fd, 128) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (!bound) {
    if (m.listen_fd >= 0) close(m.listen_fd);
    throw Error(ErrorCode::kIo, "cannot listen for launches at " + m.opt.listen + ": " + std::strerror(err) +
                                    " (poold-agent --launch-listen HOST:PORT)");
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  m.port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  try {
    m.spent = m.opt.confinement.records.empty() ? std::make_unique<common::SpentNonces>()
                                                : std::make_unique<common::SpentNonces>(
                                                      m.opt.confinement.records / "launch-nonces",
                                                      std::chrono::duration_cast<std::chrono::seconds>(
                                                          std::chrono::system_clock::now().time_since_epoch())
                                                          .count());
  } catch (...) {
    close(m.listen_fd);
    throw;
  }
  m.stop_fd = eventfd(0, EFD_CLOEXEC);
  if (m.stop_fd < 0) {
    close(m.listen_fd);
    throw Error(ErrorCode::kIo, std::string("cannot make an eventfd: ") + std::strerror(errno));
  }
  m.acceptor = std::thread([&m] { m.acceptLoop(); });
}

LaunchServer::~LaunchServer() {
  Impl& m = *impl_;
  m.stopping = true;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t woken = write(m.stop_fd, &one, sizeof one);  // an eventfd always takes it
  m.acceptor.join();
  close(m.listen_fd);
  close(m.stop_fd);
  std::unique_lock lock(m.mu);
  for (pid_t pid : m.daemons) kill(-pid, SIGKILL);
  m.ended.wait(lock, [&] { return m.sessions == 0; });
}

int LaunchServer::port() const {
  return impl_->port;
}

void LaunchServer::Impl::acceptLoop() {
  while (!stopping) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(p, 2, -1) <= 0 || p[1].revents != 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (EMFILE, ENFILE) or memory: the connection waits in the backlog, and the
      // loop does not spin on it.
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
        std::this_thread::sleep_for(milliseconds(100));
      continue;
    }
    // A client that stops reading cannot hold its session's thread for ever: a send waits 30 s.
    const timeval sendLimit{30, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &sendLimit, sizeof sendLimit);
    char host[INET6_ADDRSTRLEN] = "?";
    if (addr.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host, sizeof host);
    else if (addr.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, host, sizeof host);
    std::unique_lock lock(mu);
    // Connections that have shown no credential yet have a small share of the sessions: a flood of
    // idle ones cannot take the launches of jobs.
    const std::string full = sessions >= opt.max_sessions ? std::to_string(sessions) + " launches"
                             : unproven >= kMaxUnproven
                                 ? std::to_string(unproven) + " connections that have shown no credential yet"
                                 : "";
    if (!full.empty()) {
      lock.unlock();
      sendFrame(fd, common::kLaunchFrameRefused,
                "node " + opt.node + "'s agent has " + full + ", the most it takes: try again");
      close(fd);
      continue;
    }
    ++sessions;
    ++unproven;
    try {
      std::thread([this, fd, peer = std::string(host)] {
        bool proven = false;
        try {
          session(fd, peer, proven);
        } catch (const std::exception& e) {
          log("poold-agent: a launch from " + peer + " failed: " + e.what());
        }
        close(fd);
        std::lock_guard done(mu);
        if (!proven) --unproven;
        --sessions;
        ended.notify_all();
      }).detach();
    } catch (const std::exception& e) {  // no thread to be had (the node's task limit)
      --sessions;
      --unproven;
      lock.unlock();
      log(std::string("poold-agent: cannot take a launch now: ") + e.what());
      close(fd);
    }
  }
}

common::LaunchGrant LaunchServer::Impl::take(const std::string& credential) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::lock_guard lock(key_mu);
  // poold's key, asked at the first launch and again where a credential names another (at most once
  // a minute: a stranger's credentials must not make the agent call poold at their pace). What
  // failed is logged, not told to a client that showed no good credential.
  auto askKey = [&] {
    key_asked = steady_clock::now();
    try {
      verifier.emplace(opt.launch_key());
    } catch (const std::exception& e) {
      log(std::string("poold-agent: cannot get poold's launch key: ") + e.what());
      throw Error(ErrorCode::kIo,
                  "the agent of node " + opt.node + " cannot get poold's launch key now: try again");
    }
  };
  const bool mayAsk = !key_asked || steady_clock::now() - *key_asked >= std::chrono::minutes(1);
  if (!verifier) {
    if (!key_asked || steady_clock::now() - *key_asked >= std::chrono::seconds(5)) askKey();
    if (!verifier) throw Error(ErrorCode::kIo, "the agent has no launch key of poold's yet: try again");
  }
  try {
    return verifier->take(credential, opt.node, now, *spent);
  } catch (const Error& e) {
    if (!mayAsk || std::string(e.what()).find("signed with key") == std::string::npos) throw;
  }
  askKey();
  return verifier->take(credential, opt.node, now, *spent);
}

namespace {

// Whether a detached job's launcher of `lease` runs on this node (its record in the agent's job
// records: "PID START LEASE"): its cgroup is then the launcher's too, ended with it (jobs.hpp).
bool launcherOf(const std::filesystem::path& records, const std::string& lease) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(records, ec)) {
    if (entry.path().extension() != ".job") continue;
    std::ifstream in(entry.path());
    std::string pid, start, held;
    if (in >> pid >> start >> held && held == lease) return true;
  }
  return false;
}

}  // namespace

void LaunchServer::Impl::endLease(const std::string& lease) {
  if (!opt.confinement.cgroup || launcherOf(opt.confinement.records, lease)) return;
  try {
    LeaseCgroup cgroup(opt.confinement.cgroup_mounts, *opt.confinement.cgroup, opt.confinement.cgroup_parent,
                       lease, {});
    if (const size_t killed = cgroup.destroy(std::chrono::seconds(5)); killed > 0)
      log("poold-agent: lease " + lease + ": " + std::to_string(killed) +
          " processes outlived the job's daemon on node " + opt.node + ", killed");
  } catch (const Error& e) {
    log("poold-agent: lease " + lease + ": its cgroup on node " + opt.node + " is left: " + e.what());
  }
}

size_t LaunchServer::leaseEnded(const std::string& lease) {
  const JobRunnerOptions& c = impl_->opt.confinement;
  if (!c.cgroup) return 0;
  const std::shared_ptr<std::mutex> leaseMu = impl_->leaseLock(lease);
  std::lock_guard leaseHeld(*leaseMu);
  return LeaseCgroup(c.cgroup_mounts, *c.cgroup, c.cgroup_parent, lease, {}).destroy(std::chrono::seconds(5));
}

// The launch request: its JSON line, read within the header timeout, its credential taken, its
// user known here. nullopt where the client went or it was refused (`refuse` has said why).
std::optional<LaunchServer::Impl::Request> LaunchServer::Impl::readRequest(
    int fd, FrameReader& in, const std::function<void(const std::string&)>& refuse) {
  const auto deadline = steady_clock::now() + opt.header_timeout;
  size_t newline = std::string::npos;
  while ((newline = in.buffered().find('\n')) == std::string::npos) {
    if (in.buffered().size() > kMaxLaunchHeaderBytes) {
      refuse("the launch request is longer than " + std::to_string(kMaxLaunchHeaderBytes) + " bytes");
      return std::nullopt;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0 || stopping) {
      refuse("the launch request did not come within the agent's time");
      return std::nullopt;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<long long>(left, 200))) > 0 && !in.fill(fd))
      return std::nullopt;
  }
  const nlohmann::json doc = nlohmann::json::parse(in.buffered().substr(0, newline), nullptr, false);
  in.buffered().erase(0, newline + 1);
  if (!doc.is_object() || !doc.contains("credential") || !doc["credential"].is_string() ||
      !doc.contains("command") || !doc["command"].is_string()) {
    refuse("the launch request is no JSON object with a credential and a command");
    return std::nullopt;
  }
  Request r;
  r.command = doc["command"].get<std::string>();
  if (r.command.empty() || r.command.find('\0') != std::string::npos) {
    refuse("the launch request's command is empty or holds a NUL byte");
    return std::nullopt;
  }
  try {
    r.grant = take(doc["credential"].get<std::string>());
  } catch (const Error& e) {
    refuse(std::string(e.what()) + " (node " + opt.node + ")");
    return std::nullopt;
  }
  std::optional<UserAccount> user = lookUpUser(r.grant.user);
  if (!user) {
    refuse("user " + r.grant.user + " of lease " + r.grant.lease + " is not known on node " + opt.node +
           " (its password database has no such user)");
    return std::nullopt;
  }
  if (user->uid == 0 && !opt.allow_root) {
    refuse("lease " + r.grant.lease +
           " is root's, whose daemons this agent does not start "
           "(poold-agent --allow-root-launches)");
    return std::nullopt;
  }
  if (user->uid != 0 && user->uid < opt.min_uid) {
    refuse("lease " + r.grant.lease + " is " + r.grant.user + "'s, uid " + std::to_string(user->uid) +
           ", a system account whose daemons this agent does not start (poold-agent --launch-min-uid " +
           std::to_string(opt.min_uid) + ")");
    return std::nullopt;
  }
  if (geteuid() != 0 && geteuid() != user->uid) {
    refuse("poold-agent on node " + opt.node + " runs as uid " + std::to_string(geteuid()) +
           " and starts daemons of that user alone, not of " + r.grant.user + ": run poold-agent as root");
    return std::nullopt;
  }
  r.user = std::move(*user);
  // The daemon's environment: the login's, the node's name, and Open MPI's variables the client sent.
  r.env = r.user.login_env;
  r.env.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  r.env.push_back("POOLRUN_NODE=" + opt.node);
  r.env.push_back("POOLRUN_LEASE=" + r.grant.lease);
  if (doc.contains("env") && doc["env"].is_object() && doc["env"].size() <= 1024)
    for (const auto& [name, value] : doc["env"].items())
      if (forwardable(name) && value.is_string() &&
          value.get_ref<const std::string&>().find('\0') == std::string::npos)
        r.env.push_back(name + "=" + value.get<std::string>());
  return r;
}

// Forks the daemon of `r`: its own session, in the lease's cgroup (made by the first daemon of the
// lease here), as the user. Counted in by_lease before its cgroup is made (end() counts it out);
// the lease's lock held meanwhile. nullopt where it could not start (`refuse` has said why).
std::optional<LaunchServer::Impl::Daemon> LaunchServer::Impl::start(
    const Request& r, const std::function<void(const std::string&)>& refuse) {
  const std::shared_ptr<std::mutex> leaseMu = leaseLock(r.grant.lease);
  std::unique_lock leaseHeld(*leaseMu);
  {
    std::lock_guard lock(mu);
    ++by_lease[r.grant.lease];
  }
  Daemon d;
  auto fail = [&](const std::string& why) {
    leaseHeld.unlock();
    end(r.grant.lease, d);
    refuse(why);
    return std::nullopt;
  };
  std::optional<LeaseCgroup> cgroup;
  if (opt.confinement.cgroup) {
    pool::JobLaunch units;
    units.gpus = r.grant.units;
    try {
      cgroup.emplace(opt.confinement.cgroup_mounts, *opt.confinement.cgroup, opt.confinement.cgroup_parent,
                     r.grant.lease, confinementOf(opt.confinement, units));
    } catch (const Error& e) {
      return fail("cannot confine lease " + r.grant.lease + " on node " + opt.node + ": " + e.what());
    }
  }
  std::vector<std::string> args = {"/bin/sh", "-c", r.command}, env = r.env;
  ChildPlan plan;
  plan.uid = r.user.uid;
  plan.gid = r.user.gid;
  plan.groups = r.user.groups;
  plan.cwd = access(r.user.home.c_str(), X_OK) == 0 ? r.user.home.c_str() : "/";
  plan.new_session = true;
  plan.hostname = opt.node_hostname ? opt.node.c_str() : nullptr;
  plan.point(args, env, cgroup ? &cgroup->procsFiles() : nullptr);
  // Its stdin, stdout and stderr, and the pipe its exec closes (what it wrote before: why it failed).
  int pipes[4][2] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
  for (auto& p : pipes)
    if (pipe2(p, O_CLOEXEC) != 0) {
      const std::string why = std::string("the agent cannot make a pipe: ") + std::strerror(errno);
      for (auto& q : pipes)
        for (int f : q)
          if (f >= 0) close(f);
      return fail(why);
    }
  auto& [stdinPipe, outPipe, errPipe, status] = pipes;
  plan.stdio[0] = stdinPipe[0];
  plan.stdio[1] = outPipe[1];
  plan.stdio[2] = errPipe[1];
  {
    std::lock_guard lock(mu);
    d.pid = fork();
    if (d.pid == 0) {
      close(status[0]);
      runChild(plan, status[1]);
    }
    if (d.pid > 0) daemons.insert(d.pid);
  }
  for (int f : {stdinPipe[0], outPipe[1], errPipe[1], status[1]}) close(f);
  d.in = stdinPipe[1];
  d.out = outPipe[0];
  d.err = errPipe[0];
  // What the daemon does not read of its stdin is dropped, never waited for (as the relay's comment says).
  fcntl(d.in, F_SETFL, fcntl(d.in, F_GETFL) | O_NONBLOCK);
  std::string failed;
  char buf[4096];
  for (ssize_t n; d.pid > 0 && (n = read(status[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    failed.append(buf, static_cast<size_t>(n));
  }
  close(status[0]);
  if (d.pid > 0 && failed.empty()) {
    d.exited = static_cast<int>(syscall(SYS_pidfd_open, d.pid, 0));  // -1 before Linux 5.3: polled
    return d;
  }
  const std::string why = d.pid < 0 ? std::string("cannot fork: ") + std::strerror(errno) : failed;
  if (d.pid > 0) {
    waitpid(d.pid, nullptr, 0);
    std::lock_guard lock(mu);
    daemons.erase(d.pid);
  }
  return fail(why + " (on node " + opt.node + ", as " + r.grant.user + ")");
}

// The daemon's streams to the client and the client's stdin to it, until the daemon has ended and
// its streams closed (or a second after its end: what it left running may hold them), or the client
// goes (the daemon's session then gets SIGTERM, and SIGKILL 2 s later). Its exit status.
// The client's frames read so far given to daemon `d`: stdin bytes (what its full pipe does not
// take is dropped: never waited for), stdin's end. False where a frame is longer than allowed.
bool LaunchServer::Impl::toDaemon(FrameReader& in, Daemon& d) {
  bool tooLong = false;
  while (auto frame = in.next(tooLong)) {
    if (frame->first == common::kLaunchFrameStdin && d.in >= 0) {
      const ssize_t w = write(d.in, frame->second.data(), frame->second.size());
      (void)w;
    } else if (frame->first == common::kLaunchFrameStdinClosed && d.in >= 0) {
      close(std::exchange(d.in, -1));
    }
  }
  return !tooLong;
}

int LaunchServer::Impl::relay(int fd, FrameReader& in, Daemon& d, bool& clientGone) {
  std::optional<int> exitStatus;
  std::optional<steady_clock::time_point> exitedAt, killAt;
  char buf[65536];
  // Frames that came with the request line, before the first look at the socket.
  if (!toDaemon(in, d)) {
    clientGone = true;
    kill(-d.pid, SIGTERM);
    killAt = steady_clock::now() + std::chrono::seconds(2);
  }
  for (;;) {
    if (!exitStatus) {
      int st = 0;
      if (waitpid(d.pid, &st, WNOHANG) == d.pid) {
        exitStatus = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        exitedAt = steady_clock::now();
        if (d.exited >= 0) close(d.exited);
        d.exited = -1;
        std::lock_guard lock(mu);
        daemons.erase(d.pid);  // reaped: its pid may be another's from now on, never signalled again
      }
    }
    const auto now = steady_clock::now();
    if (exitStatus && ((d.out < 0 && d.err < 0) || now - *exitedAt > std::chrono::seconds(1))) break;
    if (!exitStatus && ((killAt && now >= *killAt) || stopping)) kill(-d.pid, SIGKILL);
    // Asleep until something happens: the daemon's end wakes its pidfd (where there is none, a look
    // every 50 ms); a kill or the second after the end, their own time.
    int timeout = d.exited >= 0 || exitStatus ? -1 : 50;
    auto until = [&](steady_clock::time_point t) {
      const int ms = static_cast<int>(
          std::max<long long>(0, std::chrono::duration_cast<milliseconds>(t - now).count() + 1));
      timeout = timeout < 0 ? ms : std::min(timeout, ms);
    };
    if (exitedAt) until(*exitedAt + std::chrono::seconds(1));
    if (killAt) until(*killAt);
    if (stopping) timeout = 50;
    pollfd p[4] = {
        {clientGone ? -1 : fd, POLLIN, 0}, {d.out, POLLIN, 0}, {d.err, POLLIN, 0}, {d.exited, POLLIN, 0}};
    if (poll(p, 4, timeout) < 0 && errno != EINTR) break;
    if (p[0].revents != 0) {
      const bool alive = in.fill(fd) && toDaemon(in, d);
      if (!alive) {  // the client has gone: so does its daemon
        clientGone = true;
        if (!exitStatus) kill(-d.pid, SIGTERM);
        killAt = steady_clock::now() + std::chrono::seconds(2);
      }
    }
    for (int i : {1, 2}) {
      if (p[i].revents == 0) continue;
      int& stream = i == 1 ? d.out : d.err;
      const ssize_t n = read(stream, buf, sizeof buf);
      if (n > 0 && !clientGone)
        sendFrame(fd, i == 1 ? common::kLaunchFrameStdout : common::kLaunchFrameStderr, buf,
                  static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        close(stream);
        stream = -1;
      }
    }
  }
  if (!exitStatus) {  // the client went, or the agent stops: killed above; reaped here
    kill(-d.pid, SIGKILL);
    waitpid(d.pid, nullptr, 0);
    std::lock_guard lock(mu);
    daemons.erase(d.pid);
    exitStatus = 128 + SIGKILL;
  }
  return *exitStatus;
}

// The daemon `d` of `lease` is done with (or never started): its descriptors closed, and the
// lease's cgroup ended where it was the lease's last daemon here, under the lease's lock.
void LaunchServer::Impl::end(const std::string& lease, Daemon& d) {
  for (int* f : {&d.in, &d.out, &d.err, &d.exited})
    if (*f >= 0) close(std::exchange(*f, -1));
  const std::shared_ptr<std::mutex> leaseMu = leaseLock(lease);
  std::lock_guard leaseHeld(*leaseMu);
  std::unique_lock lock(mu);
  const bool last = --by_lease[lease] == 0;
  if (last) by_lease.erase(lease);
  lock.unlock();
  if (last) endLease(lease);
}

void LaunchServer::Impl::session(int fd, const std::string& peer, bool& proven) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto refuse = [&](const std::string& why) {
    log("poold-agent: refused a launch from " + peer + ": " + why);
    sendFrame(fd, common::kLaunchFrameRefused, why);
  };
  FrameReader in;
  const std::optional<Request> r = readRequest(fd, in, refuse);
  if (!r) return;
  {
    std::lock_guard lock(mu);
    --unproven;
    proven = true;
  }
  std::optional<Daemon> d = start(*r, refuse);
  if (!d) return;
  log("poold-agent: started a daemon of lease " + r->grant.lease + " for " + r->grant.user + " (from " +
      peer + ")");
  bool clientGone = false;
  const int status = relay(fd, in, *d, clientGone);
  if (!clientGone) sendFrame(fd, common::kLaunchFrameExit, std::to_string(status));
  log("poold-agent: a daemon of lease " + r->grant.lease + " ended (exit status " + std::to_string(status) +
      ")");
  end(r->grant.lease, *d);
}

}  // namespace poolrun::agent
