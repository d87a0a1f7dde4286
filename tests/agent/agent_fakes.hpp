#pragma once

// What the agent's loop tests put behind its seams: a link to poold that records every call and
// answers as a test scripts it, a sampler over a topology whose NIC port states and GPU samples a
// test changes between rounds, and a clock that never waits.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "poolrun/agent/agent.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"

namespace poolrun::test {

// Every call the agent made, and how to answer the next ones. `on_register` and `on_heartbeat`
// get the call's number (1, 2, ...) and may throw.
struct LinkScript {
  std::vector<std::string> calls;  // "open TOKEN", "register", "heartbeat"
  std::vector<pool::NodeRegistration> registrations;
  std::vector<pool::Heartbeat> heartbeats;
  std::function<void(int)> on_register = [](int) {};
  std::function<pool::HeartbeatReply(int)> on_heartbeat = [](int) { return pool::HeartbeatReply{}; };
  std::function<std::string()> token = [] { return std::string("tok-node-0123456789"); };
  int count(const std::string& call) const;
};

class RecordingLink : public pool::AgentLink {
 public:
  explicit RecordingLink(std::shared_ptr<LinkScript> script) : script_(std::move(script)) {}
  void registerNode(const pool::NodeRegistration& registration) override;
  pool::HeartbeatReply heartbeat(const pool::Heartbeat& heartbeat) override;
  std::string describe() const override { return "http://test"; }

 private:
  std::shared_ptr<LinkScript> script_;
};

// A factory that opens a RecordingLink on `script`, recording "open TOKEN".
agent::LinkFactory recordingLinks(std::shared_ptr<LinkScript> script);

// The node's samples: every GPU of the topology with readings, every port in the state `ports`
// names (the topology's own where absent). A test edits the fields between rounds.
struct StubNode {
  explicit StubNode(const topo::NodeTopology& topology);
  agent::NodeSamples sample() const;
  agent::Sampler sampler();

  topo::NodeTopology topology;
  std::map<std::string, topo::PortState> ports;  // "mlx5_3:1" -> state
  std::map<size_t, std::vector<topo::GpuProcess>> processes;
  std::set<size_t> lost;                 // GPUs the sampler reports as NVML no longer listing them
  std::map<size_t, topo::MigState> mig;  // GPUs whose MIG state the sampler reports (the others: not known)
  bool nvml_ok = true;
  mutable int samples = 0;
};

// A clock at a fixed start whose sleep only records its delay and moves the time on; it says stop
// after `rounds` sleeps. `random` is the jitter's draw.
struct FakeTime {
  std::chrono::steady_clock::time_point now{};
  std::vector<std::chrono::milliseconds> sleeps;
  int rounds = 1;
  double random = 0.5;
  std::function<void(int)> after_sleep = [](int) {};  // the sleep's number (1, 2, ...)
  agent::AgentClock clock();
};

// Lines of `text` that contain `needle`.
int countLines(const std::string& text, const std::string& needle);

}  // namespace poolrun::test
