#pragma once

// The pieces poolctl's views share (view_text.cpp): numbers, states and notes as text, columns
// aligned and cut to a width. Private to poolctl.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/poolctl_top.hpp"

namespace poolrun::pool::view {

using std::chrono::seconds;

inline constexpr size_t kShownProcesses = 4;  // foreign processes named per GPU; the rest are counted

seconds since(Clock::time_point t, Clock::time_point now);
// Bytes as GiB with one decimal ("79.6"), or whole GiB from 10 on where `compact` ("61").
std::string gib(uint64_t bytes, bool compact = false);
std::string percent(std::optional<double> fraction);
std::string rounded(std::optional<double> value, const char* unit);
std::optional<uint64_t> totalMemory(const GpuInfo& g);
// "61.2/79.6" (GiB); "-/79.6" where the use is not known.
std::string memoryText(const GpuInfo& g, bool compact);
std::optional<double> memoryFraction(const GpuInfo& g);
// Why a GPU failed and since when, or the processes that make it foreign.
std::string gpuNote(const GpuInfo& g, Clock::time_point now);
// "up", "unreachable" (an up node whose agent went quiet), "draining,unreachable", "down".
std::string nodeStateText(const NodeInfo& n);
std::string agentText(const NodeInfo& n);
std::string heartbeatText(const NodeInfo& n, Clock::time_point now);

struct GpuCounts {
  int free = 0, leased = 0, failed = 0, foreign = 0, mig = 0;
};
GpuCounts countGpus(const NodeInfo& n);

// Which of a node's GPUs get a line: all of a node with an agent (their readings), only the
// leased, failed or foreign ones of a node without (nothing else is known of the others).
bool gpuShown(const NodeInfo& n, const GpuInfo& g);
// Characters (UTF-8 code points) in `s`.
size_t shownWidth(const std::string& s);
std::string rightTrimmed(std::string s);
// Rows of cells as lines, each column as wide as its widest cell (counted in characters), two
// spaces apart; the last cell of a row is not padded.
std::vector<std::string> alignColumns(const std::vector<std::vector<std::string>>& rows);
// A bar of `width` characters in all, "[#####.....]", with `label` written over its right end
// where it fits ("[#####...87%]"); "-" where `fraction` is not known.
std::string bar(std::optional<double> fraction, size_t width, const std::string& label);
std::string leaseNote(const Lease& l, Clock::time_point now);
std::string idleText(const Lease& l, Clock::time_point now);
std::string orDash(const std::string& s);
// "14 MIG instances (9 free, 5 leased), ": where the pool has any (with those unusable with their GPU).
std::string migText(const PoolStatus& s);
// "6 MPS shares on 2 GPUs, ": where the pool has any.
std::string mpsText(const PoolStatus& s);

}  // namespace poolrun::pool::view
