#pragma once

// Reservations (docs/reservations.md): nodes kept for a window of time. No lease that would run
// into the window is placed on them (the scheduler plans around it, as Slurm's backfill does);
// inside the window only the users and accounts it names lease them, with --reservation NAME, and
// their leases end with it. A reservation that names nobody is a maintenance window: its nodes are
// drained at its start.

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

struct Reservation {
  std::string name;
  std::vector<std::string> nodes;  // sorted, each once
  TimePoint start{}, end{};
  std::vector<std::string> users, accounts;  // who may lease its nodes inside it; none: maintenance
  std::string created_by;
  TimePoint created{};
  bool drained = false;  // a maintenance window's nodes drained at its start
  bool maintenance() const { return users.empty() && accounts.empty(); }
  bool holds(std::string_view node) const;  // one of its nodes
  bool operator==(const Reservation&) const = default;
};

inline constexpr size_t kMaxReservations = 10'000;
inline constexpr size_t kMaxReservedNodes = 100'000;  // nodes a reservation keeps
inline constexpr size_t kMaxReservedUsers = 1'000;    // users, and accounts, a reservation names
inline constexpr std::chrono::seconds kMaxReservationLength{366 * 86'400};
// A start this far before now is taken as now (a clock a little behind poold's); earlier is the past.
inline constexpr std::chrono::seconds kReservationStartSlack{60};

}  // namespace poolrun::pool
