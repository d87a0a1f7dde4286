// poolctl's administrators' commands: register, drain, resume, fail, mig and node-token.

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "poolctl.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/pool/membership.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "poolrun/pool/request_options.hpp"
#include "poolrun/topo/sources.hpp"

namespace poolrun::pool::ctl {

using nlohmann::json;

int registerCommand(const Command& c) {
  std::vector<topo::ClusterNode> nodes;
  if (c.args.size() == 2 && c.args[0] == "--cluster") {
    nodes = topo::readClusterFile(c.args[1]).nodes;
  } else if (c.args.empty()) {
    nodes.push_back(thisNode());
  } else {
    throw badInput("register takes [--cluster FILE]");
  }
  c.pool().registerNodes(nodes);
  if (c.json)
    std::cout << json{{"registered", nodes.size()}}.dump() << "\n";
  else
    std::cout << "registered " << nodes.size() << " node(s) in " << c.pool().describe() << "\n";
  return 0;
}

// drain NODE, resume NODE.
int drainOrResumeCommand(const Command& c) {
  const std::string& node = c.one("NODE");
  common::checkNodeName(node);
  c.name == "drain" ? c.pool().drain(node) : c.pool().resume(node);
  if (!c.json) std::cout << node << ": " << (c.name == "drain" ? "draining" : "up") << "\n";
  return 0;
}

// fail NODE:GPU, or fail NODE: every GPU of the node.
int failCommand(const Command& c) {
  const std::string& spec = c.one("NODE:GPU (or NODE)");
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos) {
    common::checkNodeName(spec, "fail");
    const std::vector<NodeInfo> nodes = c.pool().nodes();
    auto n = std::find_if(nodes.begin(), nodes.end(), [&](const NodeInfo& i) { return i.name == spec; });
    if (n == nodes.end())
      throw Error(ErrorCode::kNotFound, "no node '" + spec + "' in the pool (see `poolctl nodes`)");
    for (const GpuInfo& g : n->gpus) c.pool().failGpu(spec, g.index);
    if (!c.json) std::cout << spec << ": " << n->gpus.size() << " GPUs failed\n";
    return 0;
  }
  std::string node = spec.substr(0, colon);
  common::checkNodeName(node);
  size_t index = number("fail GPU index", spec.substr(colon + 1), kGpuIndexRange);
  c.pool().failGpu(node, index);
  if (!c.json) std::cout << spec << ": failed\n";
  return 0;
}

// poolctl mig NODE:GPU --profiles A,B [--wait SECONDS]: asks for the layout, and with --wait
// follows it until the agent has made it (0) or failed to, or the time ran out (1).
int migCommand(const Command& c) {
  const std::vector<std::string>& args = c.args;
  std::string spec;
  std::vector<std::string> profiles;
  std::optional<std::chrono::seconds> wait;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw badInput(args[i] + " needs a value");
      return args[++i];
    };
    if (args[i] == "--profiles") {
      std::string list = value();
      common::checkText(list, 1024, "--profiles");
      for (size_t at = 0; at <= list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        LeaseRequest named;
        setMigProfile(named, list.substr(at, comma - at), "--profiles");
        if (named.mig_or_larger)
          throw badInput("--profiles '" + common::printable(list) + "': name each profile (no '+')");
        profiles.push_back(named.mig_profile);
        at = comma + 1;
      }
    } else if (args[i] == "--wait") {
      wait = std::chrono::seconds(number("--wait", value(), Range<int64_t>{1, 86'400}));
    } else if (spec.empty() && !args[i].starts_with("-")) {
      spec = args[i];
    } else {
      throw badInput("mig: unexpected '" + common::printable(args[i]) + "' (see poolctl help mig)");
    }
  }
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || profiles.empty())
    throw badInput("mig needs NODE:GPU and --profiles PROFILE[,PROFILE...] (3g.40gb,3g.40gb, say)");
  const std::string node = spec.substr(0, colon);
  common::checkNodeName(node);
  const size_t gpu = number("mig GPU index", spec.substr(colon + 1), kGpuIndexRange);
  c.pool().setMigLayout(node, gpu, profiles);
  std::string layout;
  for (const std::string& p : profiles) layout += (layout.empty() ? "" : ",") + p;
  if (!wait) {
    if (c.json)
      std::cout << json{{"node", node}, {"index", gpu}, {"mig_layout", profiles}}.dump() << "\n";
    else
      std::cout << spec << ": MIG layout " << layout
                << " asked; the node's agent makes it once no lease holds the GPU or its instances\n";
    return 0;
  }
  const auto end = std::chrono::steady_clock::now() + *wait;
  for (;;) {
    for (const NodeInfo& n : c.pool().nodes()) {
      if (n.name != node || gpu >= n.gpus.size() || !n.gpus[gpu].mig_layout.empty()) continue;
      const GpuInfo& g = n.gpus[gpu];
      if (c.json) {
        std::cout << toJson(n).dump(2) << "\n";
      } else if (g.state == GpuState::kFailed) {
        std::cerr << "poolctl: " << spec << ": " << g.failed_reason << "\n";
      } else {
        std::cout << spec << ": MIG layout " << layout << " made: " << g.mig_instances.size()
                  << " instances\n";
        for (const MigInstanceInfo& m : g.mig_instances)
          std::cout << "  " << gpu << "/" << m.gpu_instance << "." << m.compute_instance << "  " << m.profile
                    << "  " << m.uuid << "\n";
      }
      return g.state == GpuState::kFailed ? 1 : 0;
    }
    if (std::chrono::steady_clock::now() >= end) {
      std::cerr
          << "poolctl: " << spec << ": the MIG layout " << layout << " is not made after " << wait->count()
          << " s (a lease still holds the GPU or one of its instances, or its agent is silent; `poolctl "
             "nodes` shows which); the request stays\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace poolrun::pool::ctl

namespace poolrun::pool::ctl {
namespace {

// A join token's life: 1 s to Membership::kMaxTokenLife.
std::chrono::seconds tokenLife(const std::string& option, const std::string& text) {
  const int64_t seconds = durationSeconds(option, text).count();
  if (seconds < 1 || seconds > Membership::kMaxTokenLife.count())
    throw badInput(option + " " + text + ": a join token lives 1s to " +
                   std::to_string(Membership::kMaxTokenLife.count() / 86'400) + "d");
  return std::chrono::seconds(seconds);
}

}  // namespace

std::chrono::seconds durationSeconds(const std::string& option, const std::string& text) {
  const std::string_view units = "smhd";
  const bool unit = !text.empty() && units.find(text.back()) != std::string_view::npos;
  const std::string digits = unit ? text.substr(0, text.size() - 1) : text;
  const int64_t scale = !unit || text.back() == 's' ? 1
                        : text.back() == 'm'        ? 60
                        : text.back() == 'h'        ? 3600
                                                    : 86'400;
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw badInput(option + " '" + common::printable(text) +
                   "': expected a duration such as 90s, 30m, 1h or 7d");
  return std::chrono::seconds(std::stoll(digits) * scale);  // 12 digits times a day: far inside int64
}

namespace {

int createNodeToken(const Command& c) {
  std::chrono::seconds life{3600};
  for (size_t i = 1; i < c.args.size(); ++i) {
    if (c.args[i] == "--expires" && i + 1 < c.args.size())
      life = tokenLife("--expires", c.args[++i]);
    else
      throw badInput("node-token create: unexpected '" + common::printable(c.args[i]) +
                     "' (it takes [--expires DURATION])");
  }
  const JoinTokenMade t = c.pool().createJoinToken(life);
  if (c.json) {
    std::cout << json{{"token", t.token}, {"id", t.id}, {"expires", t.expires}}.dump() << "\n";
    return 0;
  }
  // The token alone on stdout, for `$(poolctl node-token create)`; what it is on stderr.
  std::cout << t.token << "\n";
  std::cerr << "poolctl: join token " << t.id << ", good once until " << t.expires
            << ": on the new node, poold-agent --pool " << c.uri << " --join TOKEN --token-file FILE\n";
  return 0;
}

int listNodeTokens(const Command& c) {
  if (c.args.size() != 1) throw badInput("node-token list takes no argument");
  const NodeTokens all = c.pool().nodeTokens();
  if (c.json) {
    json tokens = json::array(), nodes = json::array();
    for (const JoinTokenInfo& t : all.tokens)
      tokens.push_back({{"id", t.id},
                        {"created_by", t.created_by},
                        {"created", t.created},
                        {"expires", t.expires},
                        {"state", t.state},
                        {"node", t.node},
                        {"used", t.used}});
    for (const JoinedNode& n : all.nodes)
      nodes.push_back({{"node", n.node},
                       {"joined", n.joined},
                       {"token", n.token},
                       {"revoked_by", n.revoked_by},
                       {"revoked", n.revoked}});
    std::cout << json{{"tokens", tokens}, {"nodes", nodes}}.dump(2) << "\n";
    return 0;
  }
  std::cout << "join tokens (" << all.tokens.size() << "):\n";
  for (const JoinTokenInfo& t : all.tokens)
    std::cout << "  " << t.id << "  " << t.state << "  made by " << t.created_by << " at " << t.created
              << ", expires " << t.expires << (t.node.empty() ? "" : ", used by " + t.node + " at " + t.used)
              << "\n";
  std::cout << "joined nodes (" << all.nodes.size() << "):\n";
  for (const JoinedNode& n : all.nodes)
    std::cout << "  " << n.node << "  joined " << n.joined << " with token " << n.token
              << (n.revoked_by.empty() ? "" : ", revoked by " + n.revoked_by + " at " + n.revoked) << "\n";
  return 0;
}

}  // namespace

// node-token create [--expires DURATION] | list | revoke NODE.
int nodeTokenCommand(const Command& c) {
  const std::string what = c.args.empty() ? "" : c.args[0];
  if (what == "create") return createNodeToken(c);
  if (what == "list") return listNodeTokens(c);
  if (what == "revoke") {
    if (c.args.size() != 2) throw badInput("node-token revoke needs exactly one NODE");
    const std::string& node = c.args[1];
    common::checkNodeName(node);
    c.pool().revokeNode(node);
    if (c.json)
      std::cout << json{{"revoked", node}}.dump() << "\n";
    else
      std::cout << node << ": credential revoked; the node's next request is refused\n";
    return 0;
  }
  throw badInput("node-token needs create, list or revoke (see poolctl help node-token)");
}

}  // namespace poolrun::pool::ctl
