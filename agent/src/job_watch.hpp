#pragma once

// What wakes the agent's loop for its detached jobs between heartbeats (docs/jobs.md): a thread
// that long-polls GET /v1/nodes/NAME/jobs/wait on a link of its own and calls `wake` the moment
// poold has a launcher for the node to start or a cancel's signal to send. The agent's loop then
// asks for the work (one path alone makes launchers' credentials) and says handled().

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "poolrun/pool/agent_link.hpp"

namespace poolrun::agent {

class JobWatch {
 public:
  using OpenLink = std::function<std::unique_ptr<pool::AgentLink>()>;
  // `interval`: the agent's heartbeat interval, the longest pause after a failed poll or one that
  // poold answered at once (its long polls all taken: the heartbeats then carry the news).
  JobWatch(OpenLink open, std::string node, std::chrono::milliseconds interval, std::function<void()> wake);
  // Tells the thread to stop. A poll in flight is not waited for: it ends with its answer (by 5 s),
  // touching nothing of the agent's, or with the process.
  ~JobWatch();
  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;

  // The loop has asked for the work since the last wake: the thread polls again.
  void handled();

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace poolrun::agent
