#pragma once

// What poolctl's commands share (one file per group of commands: look.cpp, lease_commands.cpp,
// admin.cpp, events.cpp; help.cpp for the words, poolctl_main.cpp for the options and the table).
// Private to poolctl.

#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/common/options.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/limits.hpp"

namespace poolrun::pool::ctl {

// One command's call: its name, its arguments, --json, the pool's URI and the client's options, and
// the pool, opened at the first use (once the command's arguments are known to be good).
struct Command {
  std::string name;
  std::vector<std::string> args;
  bool json = false;
  const std::string& uri;
  const ClientOptions& options;
  std::function<PoolControl&()> pool;

  // The only argument, naming `what` where there is none or more.
  const std::string& one(const std::string& what) const {
    if (args.size() != 1) throw badInput(name + " needs exactly one " + what);
    return args[0];
  }
};

// The text of `option` as a number within `range`; else kBadInput naming both.
template <typename T>
T number(const std::string& option, const std::string& text, Range<T> range) {
  return common::parseOption<T>(option, text, range.min, range.max);
}

// A duration as a person writes it: a whole number of seconds, or with s, m, h or d (90s, 30m, 1h,
// 7d; at most 12 digits); kBadInput naming `option` otherwise.
std::chrono::seconds durationSeconds(const std::string& option, const std::string& text);

// A list as a JSON array of toJson's documents, printed.
template <typename T>
void printJsonList(const std::vector<T>& items) {
  nlohmann::json out = nlohmann::json::array();
  for (const T& item : items) out.push_back(toJson(item));
  std::cout << out.dump(2) << "\n";
}

// help.cpp
extern const char* const kUsage;
// `poolctl help COMMAND`, `poolctl COMMAND --help`; nullptr for a command poolctl does not have.
const char* commandHelp(const std::string& command);

// look.cpp: status, nodes, leases, queue, quota, top.
int statusCommand(const Command& c);
int nodesCommand(const Command& c);
int leasesCommand(const Command& c);
int queueCommand(const Command& c);
int fairshareCommand(const Command& c);
int reserveCommand(const Command& c);  // reservation_commands.cpp
int reservationsCommand(const Command& c);
int unreserveCommand(const Command& c);
// queue --explain: each waiting request's factors and weighted sum (fairshare_command.cpp).
void printQueueFactors(const std::vector<QueueInfo>& queue, PoolControl& pool);
int quotaCommand(const Command& c);
int topCommandOf(const Command& c);

// lease_commands.cpp: acquire; renew, shrink, release LEASE.
int acquireCommand(const Command& c);
int leaseCommand(const Command& c);

// admin.cpp: register; drain, resume NODE; fail NODE[:GPU]; mig NODE:GPU.
int registerCommand(const Command& c);
int drainOrResumeCommand(const Command& c);
int failCommand(const Command& c);
int migCommand(const Command& c);
// node-token create [--expires DURATION] | list | revoke NODE.
int nodeTokenCommand(const Command& c);

// job_commands.cpp: jobs [--user U] [--state S] [--name N]; job ID; cancel ID... | --name N |
// --user U [--signal SIG]; history [--since T] [--until T] [--user U] [--state S] [--name N] [--csv].
int jobsCommand(const Command& c);
int jobCommand(const Command& c);
int cancelCommand(const Command& c);
int historyCommand(const Command& c);
// The value of option `name` (kBadInput where it has none), taken out of `args`; "" where absent.
std::string takeOption(std::vector<std::string>& args, const std::string& name);
// --since/--until: an RFC 3339 time (2026-12-01T08:00:00Z), a day (2026-12-01, from its midnight
// UTC), or a duration before now (90m, 12h, 7d); kBadInput naming `option` otherwise.
TimePoint timeOption(const std::string& option, const std::string& text);
// A CSV field (RFC 4180): quoted where it holds a comma, a quote or a line break.
std::string csvField(const std::string& text);
// `v` with `digits` after the point.
std::string decimal(double v, int digits);
// What a job's leases used, in a line: "2.00 GPU-h allocated, 0.80 used (40.0%), 0.10 idle, 0.500 kWh".
std::string usageLine(const UsageTotals& t);
// usage_command.cpp: usage [--by owner|account|job|node|gpu-model] [--since T] [--until T]
// [--format table|csv|json].
int usageCommand(const Command& c);
// A signal by name (TERM, SIGTERM, usr1) or number (1 to 64); nullopt for anything else.
std::optional<int> signalNumber(const std::string& text);

// events.cpp: poold's event log.
int eventsCommand(const Command& c);

}  // namespace poolrun::pool::ctl
