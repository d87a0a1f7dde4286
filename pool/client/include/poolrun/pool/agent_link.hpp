#pragma once

// The agent's side of the agent protocol (agent_protocol.hpp), over a poold's HTTP API: what
// poold-agent links, and nothing of the pools' engine.

#include <chrono>
#include <memory>
#include <string>

#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

struct ClientOptions;  // client.hpp
struct NodeJobWork;    // job_json.hpp
struct JobReport;

// The agent's side of the protocol, over a poold's HTTP API. Errors are poolrun::Error: kIo where
// poold cannot be reached (the agent retries), PoolError kUnauthorized/kForbidden for a token poold
// refuses, kBadInput for a document it refuses.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  virtual void registerNode(const NodeRegistration& registration) = 0;
  virtual HeartbeatReply heartbeat(const Heartbeat& heartbeat) = 0;
  // Detached jobs (docs/jobs.md): what node `node` is to start or signal, asked where a heartbeat's
  // reply says `jobs`, and what became of one of its jobs. A link that carries no jobs throws
  // kUnsupported.
  virtual NodeJobWork jobWork(const std::string& node);
  virtual void reportJob(const std::string& node, const std::string& id, const JobReport& report);
  // Waits up to `wait` (poold answers by 5 s) until node `node` has jobs to start or signal: true
  // where it has (ask jobWork), false where it has none yet. poold answers at once where its long
  // polls are all taken; the caller then waits for its heartbeats.
  virtual bool awaitJobs(const std::string& node, std::chrono::milliseconds wait);
  // poold's public launch key (PEM) with which the agent checks launch credentials
  // (launch_credential.hpp). A link of a pool without one throws kUnsupported.
  virtual std::string launchKey(const std::string& node);
  virtual std::string describe() const = 0;
};

// `uri` is http://HOST:PORT or https://HOST:PORT (with options' CA and client certificate). Throws
// kBadInput for another kind of pool, and as tlsClient for a wrong TLS file.
std::unique_ptr<AgentLink> openAgentLink(const std::string& uri, const ClientOptions& options);
std::unique_ptr<AgentLink> openAgentLink(const std::string& uri, const std::string& token);

// A node's join (agent_protocol.hpp): join token `token` and the node's own `credential`, sent to the
// poold at `uri` for node `node`, with no token of the pool's. True for a new join; false where poold
// had taken this one already (the same token, node and credential: the first reply was lost). Errors
// as AgentLink's: kIo where poold cannot be reached (try again), PoolError kForbidden for a refused
// join (poold's message says why and what to do), kBadInput.
bool joinPool(const std::string& uri, const ClientOptions& options, const std::string& node,
              const std::string& token, const std::string& credential);

}  // namespace poolrun::pool
