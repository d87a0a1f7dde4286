#include "agent_fakes.hpp"

#include <algorithm>
#include <sstream>

namespace poolrun::test {

int LinkScript::count(const std::string& call) const {
  return static_cast<int>(
      std::count_if(calls.begin(), calls.end(), [&](const std::string& c) { return c.rfind(call, 0) == 0; }));
}

void RecordingLink::registerNode(const pool::NodeRegistration& registration) {
  script_->calls.push_back("register");
  script_->on_register(script_->count("register"));
  script_->registrations.push_back(registration);
}

pool::HeartbeatReply RecordingLink::heartbeat(const pool::Heartbeat& heartbeat) {
  script_->calls.push_back("heartbeat");
  script_->heartbeats.push_back(heartbeat);
  return script_->on_heartbeat(script_->count("heartbeat"));
}

agent::LinkFactory recordingLinks(std::shared_ptr<LinkScript> script) {
  return [script]() -> std::unique_ptr<pool::AgentLink> {
    script->calls.push_back("open " + script->token());
    return std::make_unique<RecordingLink>(script);
  };
}

StubNode::StubNode(const topo::NodeTopology& t) : topology(t) {}

agent::NodeSamples StubNode::sample() const {
  ++samples;
  agent::NodeSamples s;
  s.nvml_ok = nvml_ok;
  for (const topo::Gpu& g : topology.gpus) {
    topo::GpuSample x;
    x.index = g.index;
    x.uuid = g.uuid;
    x.pci = g.pci.str();
    x.time = std::chrono::system_clock::now();
    if (lost.count(g.index) != 0) {
      x.error = "NVML does not list the GPU at " + x.pci;
    } else {
      x.sm_utilization = 0.5;
      x.memory_utilization = 0.25;
      x.memory_used_bytes = uint64_t{40} << 30;
      x.memory_total_bytes = uint64_t{80} << 30;
      x.temperature_c = 55;
      x.power_w = 400;
      x.ecc_uncorrected_volatile = 0;
      if (auto it = processes.find(g.index); it != processes.end()) x.processes = it->second;
    }
    s.gpus.push_back(x);
  }
  for (const topo::Nic& n : topology.nics) {
    for (const topo::NicPort& p : n.ports) {
      topo::NicPortSample x;
      x.nic = n.name;
      x.port = p.port;
      auto it = ports.find(n.name + ":" + std::to_string(p.port));
      x.state = it == ports.end() ? p.state : it->second;
      x.rate_gbps = p.rate_gbps;
      x.time = std::chrono::system_clock::now();
      s.nics.push_back(x);
    }
  }
  if (!mig.empty()) {
    s.mig.resize(topology.gpus.size());
    for (const auto& [gpu, state] : mig) s.mig.at(gpu) = state;
  }
  return s;
}

agent::Sampler StubNode::sampler() {
  return [this] { return sample(); };
}

agent::AgentClock FakeTime::clock() {
  return {[this](std::chrono::milliseconds d) {
            sleeps.push_back(d);
            now += d;
            after_sleep(static_cast<int>(sleeps.size()));
            return static_cast<int>(sleeps.size()) < rounds;
          },
          [this] { return now; }, [this] { return random; }};
}

int countLines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) ++n;
  return n;
}

}  // namespace poolrun::test
