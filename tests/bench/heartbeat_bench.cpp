// poold taking the heartbeats of a large pool while clients acquire and release: one poold on
// 127.0.0.1, NODES agent nodes of 8 GPUs registered through POST /v1/nodes/NAME/register, most of
// them held by long leases of 8 nodes whose processes their heartbeats name (a busy pool), the rest free for
// CLIENTS threads that acquire and release 8 GPUs as fast as they can. Phase A: the clients alone;
// phase B: the same with every node's heartbeat every INTERVAL seconds, paced by SENDERS threads
// (each with its own connection). A and B alternate ROUNDS times (A B A B ...), so that what the
// machine gives the run as it goes (other loads, a virtual machine's stolen time) falls on both
// alike; each round's B/A is of adjacent phases. Prints what it measured: heartbeats per second
// achieved, their latency, lease operations per second in A and B, each round's ratio B/A and their
// median, and the CPU time per heartbeat of poold and of its sender. Measures only; asserts nothing
// about time.
//
// The senders stand for 12,500 agents on other machines, whose CPU a real poold's host never pays.
// Here they share the 2 cores with poold and the clients, so each is made cheap without changing
// what poold sees: every node's request is written out once, whole, before the run; a sender writes
// it and goes back to sleep, and reads the reply only when it next writes on that connection (one
// wake-up a heartbeat rather than two). The reply's arrival time is the kernel's receive time stamp
// (SO_TIMESTAMPNS), so the latency is poold's, not the sender's sleep.
//
//
// With --tls yes, poold serves HTTPS (a certificate of a test CA) and everything speaks TLS to it:
// the clients through poolrun's TLS module, the senders through OpenSSL on their own connections
// (one handshake each, then kept alive, as agents do); a reply's arrival is still the kernel's
// time stamp of its first TLS record.
//
//   heartbeat_bench [--nodes 12500] [--interval 5] [--seconds 20] [--rounds 3] [--clients 16]
//                   [--senders 16] [--held 0.9] [--sync normal|full] [--tls no|yes]

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "poold_process.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "sample_heartbeat.hpp"
#include "support/loopback.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"
#include "support/test_pki.hpp"

namespace poolrun::pool {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kAdminToken = "tok-root-0123456789";
constexpr const char* kUserToken = "tok-alice-0123456789";
constexpr int kGpusPerNode = 8;
constexpr int kNodesPerHeldLease = 8;  // the long leases: jobs of 64 GPUs

struct Options {
  int nodes = 12500;
  int interval_s = 5;
  int seconds = 20;
  int rounds = 3;
  int clients = 16;
  int senders = 16;
  double held = 0.9;  // share of the nodes held by long leases (their GPUs run a process each)
  std::string sync = "normal";
  bool tls = false;
};

// --tls yes: the CA the clients trust, and the senders' TLS context (trusting it too).
std::string g_ca;
SSL_CTX* g_tls = nullptr;

// What the clients are opened with: the token, and the CA under --tls.
ClientOptions clientOptions(const std::string& token) {
  ClientOptions co;
  co.token = token;
  co.ca_file = g_ca;
  return co;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "heartbeat_bench: %s needs a value (see the comment at the top of the source)\n",
              a.c_str());
      exit(2);
    }
    std::string v = argv[++i];
    if (a == "--nodes")
      o.nodes = std::stoi(v);
    else if (a == "--interval")
      o.interval_s = std::stoi(v);
    else if (a == "--seconds")
      o.seconds = std::stoi(v);
    else if (a == "--rounds")
      o.rounds = std::max(1, std::stoi(v));
    else if (a == "--clients")
      o.clients = std::stoi(v);
    else if (a == "--senders")
      o.senders = std::stoi(v);
    else if (a == "--held")
      o.held = std::stod(v);
    else if (a == "--sync")
      o.sync = v;
    else if (a == "--tls")
      o.tls = v == "yes";
    else {
      fprintf(stderr, "heartbeat_bench: unknown option '%s' (see the comment at the top of the source)\n",
              a.c_str());
      exit(2);
    }
  }
  return o;
}

std::string nodeName(int i) {
  char buf[32];
  snprintf(buf, sizeof buf, "hb%05d", i + 1);
  return buf;
}

volatile pid_t g_poold = -1;

// The pid of the poold this process started: its child whose command is poold.
// A process's resident memory (VmRSS), in MiB; 0 where it cannot be read.
double residentMiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmRSS:")) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return 0;
}

pid_t pooldPid() {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    size_t close = stat.rfind(')');
    if (close == std::string::npos || stat.find("(poold)") == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == getpid()) return std::stoi(name);
  }
  return -1;
}

// utime + stime of `pid`, in seconds.
double cpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int f = 3; f <= 15 && rest >> field; ++f)
    if (f == 14 || f == 15) ticks += std::stod(field);
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

struct Collected {
  std::mutex mu;
  std::string first_error;
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.empty()) first_error = what;
  }
};

// Acquire+release pairs per second of `clients` threads over `seconds`.
double leasePhase(const std::string& uri, const Options& o, Collected& errors) {
  std::atomic<bool> stop{false};
  std::atomic<long> pairs{0};
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (int c = 0; c < o.clients; ++c)
    threads.emplace_back([&] {
      auto pool = openPool(uri, clientOptions(kUserToken));
      LeaseRequest r;
      r.gpus = kGpusPerNode;
      r.gpus_per_node = kGpusPerNode;
      try {
        while (!stop) {
          Lease l = pool->acquire(r);
          pool->release(l.id);
          ++pairs;
        }
      } catch (const std::exception& e) {
        errors.fail(std::string("a client: ") + e.what());
      }
    });
  std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
  stop = true;
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return 2.0 * static_cast<double>(pairs) / secs;  // operations: an acquire and a release each
}

struct HeartbeatRun {
  long sent = 0;
  double seconds = 0;
  std::vector<double> latency_ms;
  std::vector<double> lateness_ms;  // how far behind its schedule each heartbeat was sent
};

// Every node's heartbeat once per interval, spread evenly, until `stop`.
struct Beat {
  std::string request;  // the whole HTTP request: POST /v1/nodes/NAME/heartbeat, headers, body
};

// One sender's connection to poold: a request written whole, its reply read when the next request
// is due (or at the end). Throws std::runtime_error naming what went wrong.
class LazyLink {
 public:
  explicit LazyLink(int port) : fd_(test::connectLoopback(port)) {
    if (fd_ < 0) throw std::runtime_error(std::string("cannot connect to poold: ") + strerror(errno));
    const int on = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    if (g_tls == nullptr) return;
    ssl_ = SSL_new(g_tls);
    SSL_set_fd(ssl_, fd_);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), "127.0.0.1");
    if (SSL_connect(ssl_) != 1) {
      char why[256];
      ERR_error_string_n(ERR_get_error(), why, sizeof why);
      throw std::runtime_error(std::string("TLS handshake with poold: ") + why);
    }
  }
  ~LazyLink() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    close(fd_);
  }
  LazyLink(const LazyLink&) = delete;
  LazyLink& operator=(const LazyLink&) = delete;

  // Writes `request` whole; the reply to the one before must have been taken.
  void send(const std::string& request) {
    sent_ = std::chrono::system_clock::now();
    if (ssl_ != nullptr) {
      size_t written = 0;
      if (SSL_write_ex(ssl_, request.data(), request.size(), &written) != 1 || written != request.size())
        throw std::runtime_error("sending a heartbeat over TLS failed");
      return;
    }
    for (size_t done = 0; done < request.size();) {
      const ssize_t n = ::send(fd_, request.data() + done, request.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(std::string("sending a heartbeat: ") + strerror(errno));
      done += static_cast<size_t>(n);
    }
  }

  // The reply to the request sent last: its status and body (as far as `want` needs it), and the
  // milliseconds from the write to its arrival.
  struct Reply {
    int status = 0;
    std::string body;
    double latency_ms = 0;
  };
  Reply take() {
    Reply r;
    std::optional<std::chrono::system_clock::time_point> arrived;
    size_t end = std::string::npos, length = 0;
    while (true) {
      if (end == std::string::npos && (end = in_.find("\r\n\r\n")) != std::string::npos) {
        const size_t at = lower(in_.substr(0, end)).find("content-length:");
        if (in_.compare(0, 9, "HTTP/1.1 ") != 0 || at == std::string::npos)
          throw std::runtime_error("poold's reply is not HTTP/1.1 with a length: " + in_.substr(0, 80));
        r.status = std::atoi(in_.c_str() + 9);
        length = std::strtoul(in_.c_str() + at + 15, nullptr, 10);
      }
      if (end != std::string::npos && in_.size() >= end + 4 + length) break;
      read(arrived);
    }
    r.body = in_.substr(end + 4, length);
    in_.erase(0, end + 4 + length);
    r.latency_ms = std::chrono::duration<double, std::milli>(arrived.value_or(sent_) - sent_).count();
    return r;
  }

 private:
  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  // Appends what the socket holds (waiting up to 30 s), noting the first arrival time stamp.
  void read(std::optional<std::chrono::system_clock::time_point>& arrived) {
    if (ssl_ != nullptr && SSL_pending(ssl_) == 0) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 30000) != 1) throw std::runtime_error("poold sent no reply to a heartbeat in 30 s");
    }
    if (ssl_ != nullptr) {
      // The time stamp of the first record's bytes, peeked before OpenSSL reads them.
      if (!arrived) {
        char one;
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
        iovec v{&one, 1};
        msghdr m{};
        m.msg_iov = &v;
        m.msg_iovlen = 1;
        m.msg_control = control;
        m.msg_controllen = sizeof control;
        if (recvmsg(fd_, &m, MSG_PEEK | MSG_DONTWAIT) > 0) arrived = stampOf(m);
      }
      char data[16384];
      size_t n = 0;
      if (SSL_read_ex(ssl_, data, sizeof data, &n) != 1 || n == 0)
        throw std::runtime_error("poold closed a heartbeat connection (TLS)");
      in_.append(data, n);
      return;
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 30000) != 1) throw std::runtime_error("poold sent no reply to a heartbeat in 30 s");
    char data[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    iovec v{data, sizeof data};
    msghdr m{};
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd_, &m, 0);
    if (n <= 0) throw std::runtime_error("poold closed a heartbeat connection");
    if (!arrived) arrived = stampOf(m);
    in_.append(data, static_cast<size_t>(n));
  }

  // The kernel's receive time stamp of a message read with recvmsg (SO_TIMESTAMPNS), if it has one.
  static std::optional<std::chrono::system_clock::time_point> stampOf(msghdr& m) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_TIMESTAMPNS) continue;
      timespec ts{};
      std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
      return std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
    }
    return std::nullopt;
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string in_;
  std::chrono::system_clock::time_point sent_;
};

void heartbeatSenders(int port, const Options& o, const std::vector<Beat>& beats, std::atomic<bool>& stop,
                      HeartbeatRun& run, Collected& errors) {
  std::vector<std::thread> threads;
  std::mutex mu;
  auto start = Clock::now();
  const auto interval = std::chrono::duration<double>(o.interval_s);
  for (int s = 0; s < o.senders; ++s)
    threads.emplace_back([&, s] {
      std::vector<double> latency, lateness;
      long sent = 0;
      const size_t total = beats.size();
      auto check = [&](const LazyLink::Reply& reply) {
        if (reply.status != 200 || reply.body.find("\"register_again\":false") == std::string::npos)
          throw std::runtime_error("poold answers a heartbeat with " + std::to_string(reply.status) + ": " +
                                   reply.body);
        latency.push_back(reply.latency_ms);
        ++sent;
      };
      try {
        LazyLink link(port);
        bool pending = false;
        for (long round = 0; !stop; ++round)
          for (size_t n = static_cast<size_t>(s); n < total && !stop; n += static_cast<size_t>(o.senders)) {
            auto due = start + std::chrono::duration_cast<Clock::duration>(
                                   interval * (static_cast<double>(round) +
                                               static_cast<double>(n) / static_cast<double>(total)));
            std::this_thread::sleep_until(due);
            if (stop) break;
            if (pending) check(link.take());
            lateness.push_back(std::chrono::duration<double, std::milli>(Clock::now() - due).count());
            link.send(beats[n].request);
            pending = true;
          }
        if (pending) check(link.take());
      } catch (const std::exception& e) {
        errors.fail(std::string("a heartbeat sender: ") + e.what());
      }
      std::lock_guard<std::mutex> lock(mu);
      run.sent += sent;
      run.latency_ms.insert(run.latency_ms.end(), latency.begin(), latency.end());
      run.lateness_ms.insert(run.lateness_ms.end(), lateness.begin(), lateness.end());
    });
  for (auto& t : threads) t.join();
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

int run(const Options& o) {
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  const std::string interval = std::to_string(o.interval_s);
  // The node timeout is long enough that phase A (no heartbeats) keeps every node up.
  std::vector<std::string> pooldOptions{"--sync", o.sync,           "--heartbeat-interval",
                                        interval, "--node-timeout", "86400"};
  std::optional<test::TestPki> pki;
  if (o.tls) {
    pki.emplace();
    const test::CertFiles server = pki->issue("server", "/CN=poold", "DNS:localhost,IP:127.0.0.1");
    pooldOptions.insert(pooldOptions.end(),
                        {"--tls-cert", server.cert.string(), "--tls-key", server.key.string()});
    g_ca = pki->caCert().string();
    g_tls = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(g_tls, TLS1_2_VERSION);
    SSL_CTX_set_verify(g_tls, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_load_verify_locations(g_tls, g_ca.c_str(), nullptr) != 1) {
      fprintf(stderr, "heartbeat_bench: cannot load the test CA %s\n", g_ca.c_str());
      return 1;
    }
  }
  test::PooldProcess poold(dir.path() / "state", tokens, pooldOptions);
  printf("poold at %s\n", poold.uri().c_str());
  const pid_t pid = pooldPid();
  // Interrupted (Ctrl-C, a timeout), the bench takes its poold along.
  g_poold = pid;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    signal(sig, [](int) {
      if (g_poold > 0) kill(g_poold, SIGKILL);
      _exit(130);
    });
  Collected errors;

  // Register the nodes, several at a time (as agents starting together would).
  auto topology = std::make_shared<const topo::NodeTopology>(test::synthetic({}));
  const std::string hash = topologyHash(*topology);
  auto t = Clock::now();
  {
    std::vector<std::thread> threads;
    for (int s = 0; s < o.senders; ++s)
      threads.emplace_back([&, s] {
        try {
          auto link = openAgentLink(poold.uri(), clientOptions(kAdminToken));
          for (int n = s; n < o.nodes; n += o.senders) {
            NodeRegistration r;
            r.node.name = nodeName(n);
            r.node.topology = topology;
            r.node.levels.switch_name = "leaf" + std::to_string(n / 500);
            r.agent_version = "poold-agent bench";
            link->registerNode(r);
          }
        } catch (const std::exception& e) {
          errors.fail(std::string("registering: ") + e.what());
        }
      });
    for (auto& th : threads) th.join();
  }
  if (!errors.first_error.empty()) {
    fprintf(stderr, "heartbeat_bench: %s\n", errors.first_error.c_str());
    return 1;
  }
  printf("registered %d nodes (%d GPUs) in %.1f s; poold resident %.0f MiB\n", o.nodes,
         o.nodes * kGpusPerNode, std::chrono::duration<double>(Clock::now() - t).count(), residentMiB(pid));

  // The long leases of the busy part of the pool (whole nodes, an hour each).
  const int held = static_cast<int>(o.held * o.nodes) / kNodesPerHeldLease * kNodesPerHeldLease;
  std::vector<std::string> holder(static_cast<size_t>(o.nodes));
  t = Clock::now();
  {
    std::vector<std::thread> threads;
    std::atomic<int> next{0};
    std::mutex mu;
    for (int s = 0; s < o.senders; ++s)
      threads.emplace_back([&] {
        try {
          auto pool = openPool(poold.uri(), clientOptions(kUserToken));
          LeaseRequest r;
          r.gpus = kGpusPerNode * kNodesPerHeldLease;
          r.gpus_per_node = kGpusPerNode;
          r.ttl = std::chrono::seconds(3600);
          r.wait = std::chrono::seconds(0);
          while ((next += kNodesPerHeldLease) <= held) {
            Lease l = pool->acquire(r);
            std::lock_guard<std::mutex> lock(mu);
            for (const GpuRef& g : l.gpus) holder.at(std::stoul(g.node.substr(2)) - 1) = l.id;
          }
        } catch (const std::exception& e) {
          errors.fail(std::string("holding: ") + e.what());
        }
      });
    for (auto& th : threads) th.join();
  }
  if (!errors.first_error.empty()) {
    fprintf(stderr, "heartbeat_bench: %s\n", errors.first_error.c_str());
    return 1;
  }
  printf(
      "%d nodes held by %d long leases of %d GPUs in %.1f s; %d nodes (%d GPUs) free for the clients; "
      "poold resident %.0f MiB\n",
      held, held / kNodesPerHeldLease, kNodesPerHeldLease * kGpusPerNode,
      std::chrono::duration<double>(Clock::now() - t).count(), o.nodes - held,
      (o.nodes - held) * kGpusPerNode, residentMiB(pid));

  std::vector<Beat> beats;
  size_t documentBytes = 0;
  for (int n = 0; n < o.nodes; ++n) {
    const std::string body =
        toJson(bench::heartbeatOf(nodeName(n), *topology, hash, holder[static_cast<size_t>(n)], n)).dump();
    documentBytes = body.size();
    beats.push_back({"POST /v1/nodes/" + nodeName(n) +
                     "/heartbeat HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(poold.port()) +
                     "\r\nAccept: application/json\r\nAuthorization: Bearer " + kAdminToken +
                     "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\n\r\n" + body});
  }
  printf("a heartbeat document: %zu bytes (8 GPUs, 8 NIC ports)\n", documentBytes);

  // One round of heartbeats before the phases, so that both see every node's samples.
  {
    std::atomic<bool> stop{false};
    HeartbeatRun warm;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::seconds(o.interval_s));
      stop = true;
    });
    t = Clock::now();
    heartbeatSenders(poold.port(), o, beats, stop, warm, errors);
    stopper.join();
    printf("warm-up: %ld heartbeats\n", warm.sent);
  }

  // A and B in turn; B's heartbeats gathered over its rounds.
  std::vector<double> opsA, opsB, ratios;
  double cpuA = 0, cpuB = 0;
  HeartbeatRun hb;
  for (int round = 1; round <= o.rounds; ++round) {
    printf("round %d, phase A: clients alone (poold pid %d)\n", round, static_cast<int>(pid));
    fflush(stdout);
    const double cpu0 = cpuSeconds(pid);
    opsA.push_back(leasePhase(poold.uri(), o, errors));
    const double cpu1 = cpuSeconds(pid);
    printf("round %d, phase B: clients and heartbeats (poold pid %d)\n", round, static_cast<int>(pid));
    fflush(stdout);
    std::atomic<bool> stop{false};
    HeartbeatRun sent;
    std::thread senders([&] { heartbeatSenders(poold.port(), o, beats, stop, sent, errors); });
    opsB.push_back(leasePhase(poold.uri(), o, errors));
    stop = true;
    senders.join();
    const double cpu2 = cpuSeconds(pid);
    cpuA += cpu1 - cpu0;
    cpuB += cpu2 - cpu1;
    hb.sent += sent.sent;
    hb.seconds += sent.seconds;
    hb.latency_ms.insert(hb.latency_ms.end(), sent.latency_ms.begin(), sent.latency_ms.end());
    hb.lateness_ms.insert(hb.lateness_ms.end(), sent.lateness_ms.begin(), sent.lateness_ms.end());
    ratios.push_back(opsB.back() / std::max(opsA.back(), 1.0));
  }
  const double cpu2 = cpuSeconds(pid), own2 = cpuSeconds(getpid());

  // Heartbeats alone, for poold's CPU time per heartbeat without the clients.
  HeartbeatRun alone;
  printf("phase: heartbeats alone (poold pid %d)\n", static_cast<int>(pid));
  fflush(stdout);
  {
    std::atomic<bool> stopAlone{false};
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::seconds(std::max(5, o.seconds / 2)));
      stopAlone = true;
    });
    heartbeatSenders(poold.port(), o, beats, stopAlone, alone, errors);
    stopper.join();
  }
  const double cpu3 = cpuSeconds(pid), own3 = cpuSeconds(getpid());

  if (!errors.first_error.empty()) {
    fprintf(stderr, "heartbeat_bench: %s\n", errors.first_error.c_str());
    return 1;
  }
  cpu_set_t cpus;
  sched_getaffinity(0, sizeof cpus, &cpus);
  const double target = static_cast<double>(o.nodes) / o.interval_s;
  printf("transport: %s\n", o.tls ? "HTTPS (TLS, kept-alive connections)" : "plain HTTP");
  printf("cores: %d online, %d usable by this process (poold, the clients and the senders share them)\n",
         static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), CPU_COUNT(&cpus));
  printf(
      "pool: %d nodes, %d GPUs, %d held; %d clients acquiring+releasing %d GPUs; sync=%s; %d s per phase\n",
      o.nodes, o.nodes * kGpusPerNode, held, o.clients, kGpusPerNode, o.sync.c_str(), o.seconds);
  printf("heartbeats: target %.0f/s, sent %.0f/s (%ld in %.1f s) by %d senders\n", target,
         static_cast<double>(hb.sent) / hb.seconds, hb.sent, hb.seconds, o.senders);
  printf("heartbeat latency: median %.2f ms, p99 %.2f ms, max %.2f ms; sent behind schedule: p99 %.1f ms\n",
         percentile(hb.latency_ms, 0.5), percentile(hb.latency_ms, 0.99), percentile(hb.latency_ms, 1.0),
         percentile(hb.lateness_ms, 0.99));
  const double sumA = std::accumulate(opsA.begin(), opsA.end(), 0.0);
  const double sumB = std::accumulate(opsB.begin(), opsB.end(), 0.0);
  std::string rounds;
  for (size_t r = 0; r < ratios.size(); ++r) {
    char buf[96];
    snprintf(buf, sizeof buf, "%s%.0f/%.0f = %.2f", r ? ", " : "", opsB[r], opsA[r], ratios[r]);
    rounds += buf;
  }
  std::vector<double> sorted = ratios;
  printf("lease ops/s (acquire or release), B/A per round: %s; median B/A %.2f (A %.0f, B %.0f on average)\n",
         rounds.c_str(), percentile(sorted, 0.5), sumA / static_cast<double>(opsA.size()),
         sumB / static_cast<double>(opsB.size()));
  printf("poold CPU: A %.2f s, B %.2f s; B-A per heartbeat %.0f us\n", cpuA, cpuB,
         1e6 * (cpuB - cpuA * (sumB / std::max(sumA, 1.0))) / std::max(static_cast<double>(hb.sent), 1.0));
  const double aloneSent = std::max(static_cast<double>(alone.sent), 1.0);
  printf(
      "heartbeats alone: %.0f/s, latency median %.2f ms, p99 %.2f ms, CPU per heartbeat: poold %.0f us, "
      "its sender %.0f us\n",
      static_cast<double>(alone.sent) / alone.seconds, percentile(alone.latency_ms, 0.5),
      percentile(alone.latency_ms, 0.99), 1e6 * (cpu3 - cpu2) / aloneSent, 1e6 * (own3 - own2) / aloneSent);
  return 0;
}

}  // namespace
}  // namespace poolrun::pool

int main(int argc, char** argv) {
  try {
    return poolrun::pool::run(poolrun::pool::parse(argc, argv));
  } catch (const std::exception& e) {
    fprintf(stderr, "heartbeat_bench: %s\n", e.what());
    return 1;
  }
}
