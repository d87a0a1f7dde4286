// poolrun-rsh: Open MPI's remote shell on a poold pool (docs/launch.md). Started by mpirun as
//
//   poolrun-rsh [ssh-style options] HOST COMMAND...
//
// it asks the agent of node HOST to run COMMAND there (the job's daemon), showing the launch
// credential poold signed for that node, and relays the daemon's standard streams and exit status
// as ssh would. The nodes' agents and credentials are in the file $POOLRUN_LAUNCH_FILE, which the
// launcher wrote into the job's directory. Exit status: the daemon's, or 255 (as ssh) where the
// agent cannot be reached or refuses; that line is also appended to $POOLRUN_LAUNCH_FAILURES, for
// the launcher to name the node.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "poolrun/common/launch_frames.hpp"
#include "poolrun/topo/version.hpp"

extern char** environ;

namespace {

using poolrun::common::FrameReader;
using poolrun::common::sendAll;
using poolrun::common::sendFrame;

constexpr int kUnreachable = 255;  // ssh's status for a connection that failed

// `lost`: the daemon may have run, and its agent went away under it (the node or the agent went
// down), not a launch refused or failed.
int fail(const std::string& host, const std::string& why, bool lost = false) {
  const std::string line =
      (lost ? "poolrun: lost the job's daemon on node " : "poolrun: cannot start the job's daemon on node ") +
      host + ": " + why;
  std::cerr << line << "\n";
  if (const char* record = std::getenv("POOLRUN_LAUNCH_FAILURES"); record != nullptr && *record)
    std::ofstream(record, std::ios::app) << line << "\n";
  return kUnreachable;
}

bool writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A connected socket to HOST:PORT within 10 s, or -1 with `why`.
int connectTo(const std::string& address, std::string& why) {
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &found); e != 0) {
    why = "cannot resolve " + host + ": " + gai_strerror(e);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = ETIMEDOUT;
      socklen_t len = sizeof err;
      if (poll(&p, 1, 10000) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
    }
    if (errno != 0 && errno != EISCONN) {
      why = std::string(std::strerror(errno));
      close(fd);
      fd = -1;
    }
    errno = 0;
  }
  freeaddrinfo(found);
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::cout << poolrun::topo::versionText("poolrun-rsh");
    return 0;
  }
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;  // the options Open MPI passes for ssh
  if (i + 1 >= argc) {
    std::cerr << "usage: poolrun-rsh HOST COMMAND... (Open MPI's remote shell on a poold pool, started by "
                 "poolrun; see docs/launch.md)\n";
    return 2;
  }
  const std::string host = argv[i++];
  std::string command;
  for (; i < argc; ++i) command += std::string(command.empty() ? "" : " ") + argv[i];
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // mpirun gone: so is this, and with it the daemon
  std::signal(SIGPIPE, SIG_IGN);

  const char* file = std::getenv("POOLRUN_LAUNCH_FILE");
  if (file == nullptr || *file == '\0') return fail(host, "POOLRUN_LAUNCH_FILE is not set (poolrun sets it)");
  std::ifstream launchFile(file);
  std::stringstream text;
  text << launchFile.rdbuf();
  const nlohmann::json launch = nlohmann::json::parse(text.str(), nullptr, false);
  if (!launchFile || !launch.is_object() || !launch.contains("nodes") || !launch["nodes"].is_object())
    return fail(host, std::string("the launch file ") + file + " cannot be read or is no launch file");
  const nlohmann::json& nodes = launch["nodes"];
  if (!nodes.contains(host) || !nodes[host].is_object() ||
      !nodes[host].value("agent", nlohmann::json()).is_string())
    return fail(host, "it is not a node of this job with an agent that starts daemons (launch file " +
                          std::string(file) + ")");
  const std::string agent = nodes[host]["agent"].get<std::string>();
  std::string why;
  const int fd = connectTo(agent, why);
  if (fd < 0) return fail(host, "its agent at " + agent + " cannot be reached: " + why);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  nlohmann::json request = {{"credential", nodes[host].value("credential", "")}, {"command", command}};
  request["env"] = nlohmann::json::object();
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    for (const char* prefix : {"OMPI_", "OPAL_", "PMIX_", "PRTE_", "ORTE_"})
      if (eq != std::string::npos && entry.starts_with(prefix))
        request["env"][entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  const std::string header = request.dump() + "\n";
  if (!sendAll(fd, header.data(), header.size()))
    return fail(host, "its agent at " + agent + " closed the connection: " + std::strerror(errno));
  // The relay: stdin to the agent, its frames to stdout and stderr, until the exit frame.
  FrameReader in;
  bool stdinOpen = true;
  char buf[65536];
  for (;;) {
    pollfd p[2] = {{fd, POLLIN, 0}, {stdinOpen ? 0 : -1, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return fail(host, std::string("poll: ") + std::strerror(errno));
    }
    if (p[1].revents != 0) {
      const ssize_t n = read(0, buf, sizeof buf);
      if (n > 0) {
        sendFrame(fd, poolrun::common::kLaunchFrameStdin, buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        sendFrame(fd, poolrun::common::kLaunchFrameStdinClosed, buf, 0);
        stdinOpen = false;
      }
    }
    if (p[0].revents == 0) continue;
    if (!in.fill(fd))
      return fail(host,
                  "its agent at " + agent +
                      " closed the connection before the daemon ended (the node or its agent "
                      "went down)",
                  true);
    bool tooLong = false;
    while (auto frame = in.next(tooLong)) {
      const auto& [type, body] = *frame;
      if (type == poolrun::common::kLaunchFrameStdout) writeAll(1, body);
      if (type == poolrun::common::kLaunchFrameStderr) writeAll(2, body);
      if (type == poolrun::common::kLaunchFrameRefused) return fail(host, "its agent refused: " + body);
      if (type == poolrun::common::kLaunchFrameExit) {
        const int status = std::atoi(body.c_str());
        return status >= 0 && status <= 255 ? status : kUnreachable;
      }
    }
    if (tooLong) return fail(host, "its agent at " + agent + " sent a frame longer than 1 MiB");
  }
}
