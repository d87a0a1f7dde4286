#pragma once

// The allreduce benchmark's pure parts: its command line (the options of nccl-tests'
// all_reduce_perf), the sizes it walks, the bandwidth arithmetic, the data it checks and the table
// it prints. main.cpp runs them on a poolrun communicator.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/runtime/communicator.hpp"
#include "poolrun/runtime/runtime.hpp"

namespace poolrun::bench {

struct BenchOptions {
  size_t min_bytes = 32 << 20;                           // -b (nccl-tests' defaults)
  size_t max_bytes = 32 << 20;                           // -e
  int factor = 2;                                        // -f
  int iters = 20;                                        // -n
  int warmup = 5;                                        // -w
  runtime::DataType type = runtime::DataType::kFloat32;  // -d
  runtime::ReduceOp op = runtime::ReduceOp::kSum;        // -o
  bool check = true;                                     // -c
  runtime::BackendChoice backend = runtime::BackendChoice::kAuto;
  std::string json;       // --json FILE
  bool baseline = false;  // --baseline: also time a plain MPI_Allreduce loop (MPI backend only)
  int rounds = 1;         // --rounds: alternating timed rounds, the fastest kept
  bool help = false;
};

// Throws poolrun::Error (kBadInput) naming the option and its value, and saying what it takes.
BenchOptions parseBenchOptions(const std::vector<std::string>& args);
// "8", "64K", "32M", "1G" (1024-based, either case). Throws poolrun::Error (kBadInput).
size_t parseSize(std::string_view text, std::string_view option);
// min, min*f, ... up to max (max itself not added when the walk skips it, as nccl-tests does).
std::vector<size_t> sizes(const BenchOptions& o);
std::string usage();

// GB/s (1e9 bytes per second) of `bytes` moved in `seconds`.
double algBandwidth(size_t bytes, double seconds);
// Bus bandwidth of an allreduce: algbw * 2(n-1)/n, what each link carries in a ring.
double busBandwidth(double algbw, int ranks);

// The value rank `rank` puts at element `i`, and the reduction of every rank's value: small
// integers that are exact in every type, periodic in i so that checking costs O(count).
double inputValue(runtime::ReduceOp op, int rank, size_t i);
// Fills `out` (count elements of `type`) with rank's input.
void fillInput(std::vector<unsigned char>& out, runtime::DataType type, runtime::ReduceOp op, int rank,
               size_t count);
// Elements of `got` that differ from the reduction over `ranks` ranks.
int64_t countWrong(const std::vector<unsigned char>& got, runtime::DataType type, runtime::ReduceOp op,
                   int ranks, size_t count);

struct Timing {
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = 0;
};
struct Row {
  size_t bytes = 0;
  size_t count = 0;
  Timing out_of_place, in_place;
  std::optional<Timing> baseline;
};

// The lines before the table, as nccl-tests' all_reduce_perf prints them (program, parameters,
// "# Using devices" with one line per rank), so that tools that read nccl-tests output (and
// `poolrun tuner calibrate`) read the bench's. `nodes` and `devices` are indexed by rank.
std::string preamble(const BenchOptions& o, const std::string& backend, const std::vector<std::string>& nodes,
                     const std::vector<runtime::RankDevice>& devices);
std::string tableHeader();
std::string tableRow(const Row& row, runtime::DataType type, runtime::ReduceOp op, bool check);

}  // namespace poolrun::bench
