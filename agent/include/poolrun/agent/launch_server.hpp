#pragma once

// The agent's launch port (docs/launch.md): mpirun's remote shell on a poold pool (poolrun-rsh)
// asks the agent of a node to start the job's daemon there, showing a launch credential poold
// signed for that lease, node and user (common/launch_credential.hpp). The agent checks it with
// poold's public key and no call to poold, runs the command as the lease's owner inside the
// lease's cgroup, relays its standard streams and exit status as ssh would, and when the last
// daemon of the lease on the node ends, kills what is left in the cgroup and removes it.
//
// The wire, over TCP: the client sends one JSON line, {"credential", "command", "env"}, then frames;
// the agent answers with frames. A frame is a type byte, a 4-byte big-endian length and the bytes:
//   client: 'I' stdin bytes, 'C' stdin closed;
//   agent:  'O' stdout bytes, 'E' stderr bytes, 'X' the exit status (decimal: 128+N for signal N),
//           'R' the reason it refused (the connection closes after it).
// A client that goes away ends its daemon (SIGTERM to its session, SIGKILL 2 s later).

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <sys/types.h>

#include "poolrun/agent/jobs.hpp"

namespace poolrun::agent {

inline constexpr size_t kMaxLaunchHeaderBytes = 256 * 1024;
// Connections that have shown no credential yet, at most (the rest of max_sessions is for launches).
inline constexpr size_t kMaxUnproven = 64;  // the request line (frames: launch_frames.hpp)

struct LaunchServerOptions {
  std::string node;
  std::string listen = "0.0.0.0:7141";  // HOST:PORT; port 0: any free one (port() says which)
  // poold's public launch key (PEM): asked at the first launch, and again, at most once a minute,
  // when a credential is signed by another key (poold's key changed). Throws where poold cannot be
  // asked (the launch is then refused, saying so).
  std::function<std::string()> launch_key;
  // The confinement of detached jobs (JobRunnerOptions' cgroup fields): daemons go into their
  // lease's cgroup the same way. Its `cgroup` nullopt: unconfined. Its `records`: where a
  // detached job's launcher of a lease runs here, its cgroup is left to end with the launcher.
  JobRunnerOptions confinement;
  bool allow_root = false;     // a lease of root may start daemons (poold --allow-root-jobs's twin)
  uid_t min_uid = 1000;        // a user below it (a system account, but root) may not
  bool node_hostname = false;  // daemons take the node's name as their host name (a simulated node)
  size_t max_sessions = 512;
  std::chrono::milliseconds header_timeout{10000};
  std::function<void(const std::string&)> log;  // one line per event; from any thread
};

class LaunchServer {
 public:
  // Listens at options.listen. Throws poolrun::Error: kBadInput for an address that is not
  // HOST:PORT, kIo where it cannot be bound.
  explicit LaunchServer(LaunchServerOptions options);
  // Stops listening and ends the daemons still running (SIGKILL to their sessions).
  ~LaunchServer();
  LaunchServer(const LaunchServer&) = delete;
  LaunchServer& operator=(const LaunchServer&) = delete;
  int port() const;
  // Lease `lease` has ended (poold lists it no more on the node): its cgroup here is ended now,
  // whatever runs in it (its daemons, a detached job's launcher), under the lease's lock so that no
  // daemon is started into it meanwhile. Returns the processes killed; throws poolrun::Error (kIo)
  // where some outlived the wait. Without confinement: nothing to end, 0.
  size_t leaseEnded(const std::string& lease);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace poolrun::agent
