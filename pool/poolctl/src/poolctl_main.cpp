// poolctl: look at and administer a GPU pool (local, sim:FILE or a poold). See pool/README.md.

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include "poolctl.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "poolrun/pool/queue_wait.hpp"
#include "poolrun/topo/version.hpp"

namespace {

using namespace poolrun;
using namespace poolrun::pool;
using namespace poolrun::pool::ctl;

// poolctl's commands by name.
const std::map<std::string, int (*)(const Command&)>& commands() {
  static const std::map<std::string, int (*)(const Command&)> table{{"status", statusCommand},
                                                                    {"nodes", nodesCommand},
                                                                    {"leases", leasesCommand},
                                                                    {"queue", queueCommand},
                                                                    {"quota", quotaCommand},
                                                                    {"fairshare", fairshareCommand},
                                                                    {"reserve", reserveCommand},
                                                                    {"reservations", reservationsCommand},
                                                                    {"unreserve", unreserveCommand},
                                                                    {"register", registerCommand},
                                                                    {"drain", drainOrResumeCommand},
                                                                    {"resume", drainOrResumeCommand},
                                                                    {"fail", failCommand},
                                                                    {"renew", leaseCommand},
                                                                    {"release", leaseCommand},
                                                                    {"shrink", leaseCommand},
                                                                    {"acquire", acquireCommand},
                                                                    {"top", topCommandOf},
                                                                    {"mig", migCommand},
                                                                    {"node-token", nodeTokenCommand},
                                                                    {"jobs", jobsCommand},
                                                                    {"job", jobCommand},
                                                                    {"cancel", cancelCommand},
                                                                    {"history", historyCommand},
                                                                    {"usage", usageCommand},
                                                                    {"events", eventsCommand}};
  return table;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  ClientOptions copt;
  std::string uri = std::getenv("POOLRUN_POOL") ? std::getenv("POOLRUN_POOL") : "local";
  std::string tokenFile;
  bool asJson = false;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw badInput(a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h" || (a == "help" && rest.empty())) {
      // After a command (or `help COMMAND`), that command's help.
      std::string command = !rest.empty() ? rest[0] : a == "help" && i + 1 < args.size() ? args[i + 1] : "";
      const char* help = commandHelp(command);
      if (help == nullptr && !command.empty())
        throw badInput("no command '" + common::printable(command) + "' to give the help of");
      std::cout << (help != nullptr ? help : kUsage);
      return 0;
    } else if (a == "--version") {
      std::cout << topo::versionText("poolctl");
      return 0;
    } else if (a == "--pool") {
      uri = value();
    } else if (a == "--token-file") {
      tokenFile = value();
    } else if (a == "--ca") {
      copt.ca_file = value();
    } else if (a == "--json") {
      asJson = true;
    } else if (a == "--state" && !rest.empty() && (rest[0] == "jobs" || rest[0] == "history")) {
      rest.push_back(a);  // after these commands, a job state (--state RUNNING), theirs
      rest.push_back(value());
    } else if (a == "--state") {
      copt.state_dir = value();
    } else if (a == "--owner") {
      copt.owner = value();
      common::checkOwner(copt.owner, "--owner");
    } else if (a == "--role") {
      copt.role = value();
      if (copt.role != "user" && copt.role != "admin")
        throw badInput("--role '" + common::printable(copt.role) + "': use user or admin");
    } else {
      rest.push_back(a);
    }
  }
  if (rest.empty()) throw badInput("no command given");
  if (!tokenFile.empty())
    copt.token = readClientToken(tokenFile, "your token");
  else if (const char* t = std::getenv("POOLRUN_TOKEN"))
    copt.token = t;
  if (const char* ca = std::getenv("POOLRUN_CA"); copt.ca_file.empty() && ca != nullptr) copt.ca_file = ca;

  const std::string cmd = rest[0];
  std::vector<std::string> cargs(rest.begin() + 1, rest.end());
  auto handler = commands().find(cmd);
  if (handler == commands().end()) throw badInput("unknown command '" + cmd + "'");
  std::unique_ptr<PoolControl> opened;
  Command command{cmd, std::move(cargs), asJson, uri, copt, [&]() -> PoolControl& {
                    if (!opened) opened = openPoolControl(uri, copt);
                    return *opened;
                  }};
  return handler->second(command);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const PoolError& e) {
    if (e.failure() == PoolFailure::kInterrupted) {
      std::cerr << "poolctl: " << e.what() << "\n";
      return 128 + e.signal();
    }
    std::cerr << "poolctl: error: " << e.what() << "\n";
    switch (e.failure()) {
      case PoolFailure::kNeverFits:
      case PoolFailure::kTimeout:
        return 3;
      case PoolFailure::kUnauthorized:
      case PoolFailure::kForbidden:
        return 4;
      case PoolFailure::kGone:
        return 5;
      default:
        return e.code() == ErrorCode::kBadInput ? 2 : 1;
    }
  } catch (const Error& e) {
    std::cerr << "poolctl: error: " << e.what() << "\n";
    if (e.code() == ErrorCode::kBadInput) {
      std::cerr << kUsage;
      return 2;
    }
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "poolctl: error: " << e.what() << "\n";
    return 1;
  }
}
