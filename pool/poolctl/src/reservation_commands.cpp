// poolctl reserve, reservations and unreserve (docs/reservations.md): nodes kept for a window.

#include <iomanip>

#include "poolctl.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/json.hpp"

namespace poolrun::pool::ctl {

namespace {

std::vector<std::string> listOption(std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> out;
  const std::string text = takeOption(args, name);
  size_t from = 0;
  while (from < text.size()) {
    size_t comma = text.find(',', from);
    if (comma == std::string::npos) comma = text.size();
    if (comma > from) out.push_back(text.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}

// --start: "now", a time (2026-12-08T06:00:00Z), a day (2026-12-08, UTC), or +DURATION from now.
std::optional<TimePoint> startOption(const std::string& text) {
  if (text.empty() || text == "now") return std::nullopt;
  if (text[0] == '+')
    return std::chrono::time_point_cast<TimePoint::duration>(std::chrono::system_clock::now() +
                                                             durationSeconds("--start", text.substr(1)));
  if (text.find_first_not_of("0123456789smhd") == std::string::npos)
    throw badInput(
        "--start '" + common::printable(text) +
        "': give a time (2026-12-08T06:00:00Z), a day (2026-12-08), now, or +2h for two hours from now");
  return timeOption("--start", text);
}

std::string forText(const Reservation& r) {
  if (r.maintenance()) return "maintenance (nobody)";
  std::string out;
  for (const std::string& u : r.users) out += (out.empty() ? "" : ",") + u;
  for (const std::string& a : r.accounts) out += (out.empty() ? "account " : ",account ") + a;
  return out;
}

std::string nodesText(const std::vector<std::string>& nodes) {
  std::string out;
  for (size_t i = 0; i < nodes.size() && i < 8; ++i) out += (out.empty() ? "" : ",") + nodes[i];
  return nodes.size() > 8 ? out + ",... (" + std::to_string(nodes.size()) + ")" : out;
}

}  // namespace

int reserveCommand(const Command& c) {
  std::vector<std::string> args = c.args;
  PoolControl::ReservationRequest r;
  r.nodes = takeOption(args, "--nodes");
  const std::string start = takeOption(args, "--start"), duration = takeOption(args, "--duration");
  r.name = takeOption(args, "--name");
  r.users = listOption(args, "--users");
  r.accounts = listOption(args, "--accounts");
  if (!args.empty())
    throw badInput("reserve takes --nodes, --start, --duration, --users, --accounts and --name (got '" +
                   common::printable(args[0]) + "')");
  if (r.nodes.empty()) throw badInput("reserve needs --nodes NODES (n[01-04],n07)");
  if (duration.empty()) throw badInput("reserve needs --duration D (3600, 90m, 12h, 2d)");
  r.start = startOption(start);
  r.duration = durationSeconds("--duration", duration);
  if (r.duration <= std::chrono::seconds(0) || r.duration > kMaxReservationLength)
    throw badInput("--duration '" + common::printable(duration) +
                   "': give a length from 1 s to 366 days (90m, 12h, 2d)");
  if (r.name.empty()) {
    const std::string when = common::rfc3339(r.start.value_or(
        std::chrono::time_point_cast<TimePoint::duration>(std::chrono::system_clock::now())));
    r.name = "r" + when.substr(0, 4) + when.substr(5, 2) + when.substr(8, 2) + "-" + when.substr(11, 2) +
             when.substr(14, 2);
  }
  const Reservation made = c.pool().reserve(r);
  if (c.json) {
    std::cout << toJson(made).dump(2) << "\n";
    return 0;
  }
  std::cout << "reservation " << made.name << ": " << made.nodes.size()
            << (made.nodes.size() == 1 ? " node" : " nodes") << " (" << nodesText(made.nodes) << ") from "
            << common::rfc3339(made.start) << " to " << common::rfc3339(made.end) << " for " << forText(made)
            << "\n";
  return 0;
}

int reservationsCommand(const Command& c) {
  if (!c.args.empty()) throw badInput("reservations takes no arguments");
  const std::vector<Reservation> list = c.pool().reservations();
  if (c.json) {
    printJsonList(list);
    return 0;
  }
  if (list.empty()) {
    std::cout << "no reservations\n";
    return 0;
  }
  std::cout << std::left << std::setw(20) << "NAME" << std::setw(26) << "START" << std::setw(26) << "END"
            << std::setw(7) << "NODES"
            << "FOR\n";
  for (const Reservation& r : list)
    std::cout << std::setw(20) << r.name << std::setw(26) << common::rfc3339(r.start) << std::setw(26)
              << common::rfc3339(r.end) << std::setw(7) << r.nodes.size() << forText(r)
              << (r.drained ? " (nodes drained)" : "") << "\n";
  return 0;
}

int unreserveCommand(const Command& c) {
  if (c.args.size() != 1) throw badInput("unreserve takes the reservation's name");
  c.pool().unreserve(c.args[0]);
  std::cout << "reservation " << c.args[0] << " removed\n";
  return 0;
}

}  // namespace poolrun::pool::ctl
