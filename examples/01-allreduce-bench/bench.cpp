#include "bench.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "poolrun/common/error.hpp"

namespace poolrun::bench {
namespace {

using runtime::DataType;
using runtime::ReduceOp;

int parseInt(std::string_view text, std::string_view option, int min) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min) {
    throw badInput(std::string(option) + " '" + std::string(text) +
                   "': expected a whole number of at least " + std::to_string(min));
  }
  return v;
}

// The period of inputValue in i, and the value at (rank, i mod period).
constexpr size_t kPeriod = 143;  // 11 * 13: sums repeat every 11, max/min every 13, products every 2

template <typename T>
void fillTyped(unsigned char* out, ReduceOp op, int rank, size_t count) {
  T pattern[kPeriod];
  for (size_t j = 0; j < kPeriod; ++j) pattern[j] = static_cast<T>(inputValue(op, rank, j));
  T* p = reinterpret_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) p[i] = pattern[i % kPeriod];
}

template <typename T>
int64_t wrongTyped(const unsigned char* got, ReduceOp op, int ranks, size_t count) {
  T expected[kPeriod];
  for (size_t j = 0; j < kPeriod; ++j) {
    // Products may wrap in small integer types: reduce as the type does.
    T acc = static_cast<T>(inputValue(op, 0, j));
    for (int r = 1; r < ranks; ++r) {
      T v = static_cast<T>(inputValue(op, r, j));
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc = static_cast<T>(acc + v);
          break;
        case ReduceOp::kProd:
          if constexpr (std::is_integral_v<T>) {
            acc = static_cast<T>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
          } else {
            acc = static_cast<T>(acc * v);
          }
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
      }
    }
    if (op == ReduceOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(ranks));
    expected[j] = acc;
  }
  const T* p = reinterpret_cast<const T*>(got);
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    T e = expected[i % kPeriod];
    if (std::is_floating_point_v<T> && op == ReduceOp::kAvg) {
      // An average may be computed as a sum times 1/n: allow its rounding.
      if (std::fabs(static_cast<double>(p[i]) - static_cast<double>(e)) >
          1e-5 * std::fabs(static_cast<double>(e)))
        ++wrong;
    } else {
      if (p[i] != e) ++wrong;
    }
  }
  return wrong;
}

template <template <typename> class F, typename... A>
auto dispatch(DataType type, A&&... args) {
  switch (type) {
    case DataType::kInt8:
      return F<int8_t>::run(args...);
    case DataType::kUint8:
      return F<uint8_t>::run(args...);
    case DataType::kInt32:
      return F<int32_t>::run(args...);
    case DataType::kUint32:
      return F<uint32_t>::run(args...);
    case DataType::kInt64:
      return F<int64_t>::run(args...);
    case DataType::kUint64:
      return F<uint64_t>::run(args...);
    case DataType::kFloat32:
      return F<float>::run(args...);
    case DataType::kFloat64:
      return F<double>::run(args...);
  }
  return F<float>::run(args...);
}

template <typename T>
struct Fill {
  static int run(unsigned char* out, ReduceOp op, int rank, size_t count) {
    fillTyped<T>(out, op, rank, count);
    return 0;
  }
};
template <typename T>
struct Wrong {
  static int64_t run(const unsigned char* got, ReduceOp op, int ranks, size_t count) {
    return wrongTyped<T>(got, op, ranks, count);
  }
};

std::string timingColumns(const Timing& t, bool check) {
  char buf[96];
  char time[16];
  std::snprintf(time, sizeof time,
                t.time_us < 1e4   ? "%7.2f"
                : t.time_us < 1e6 ? "%7.1f"
                                  : "%7.0f",
                t.time_us);
  std::string wrong = check ? std::to_string(t.wrong) : "N/A";
  std::snprintf(buf, sizeof buf, "  %7s  %6.2f  %6.2f  %6s", time, t.algbw, t.busbw, wrong.c_str());
  return buf;
}

}  // namespace

size_t parseSize(std::string_view text, std::string_view option) {
  auto bad = [&] {
    return badInput(std::string(option) + " '" + std::string(text) +
                    "': a size is a number of bytes with an optional K, M or G suffix (1024-based), e.g. 8, "
                    "64K, 32M, 1G");
  };
  if (text.empty()) throw bad();
  size_t multiplier = 1;
  switch (text.back()) {
    case 'K':
    case 'k':
      multiplier = size_t{1} << 10;
      break;
    case 'M':
    case 'm':
      multiplier = size_t{1} << 20;
      break;
    case 'G':
    case 'g':
      multiplier = size_t{1} << 30;
      break;
    default:
      break;
  }
  std::string_view digits = multiplier == 1 ? text : text.substr(0, text.size() - 1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) throw bad();
  if (v > (uint64_t{1} << 40) / multiplier) {
    throw badInput(std::string(option) + " '" + std::string(text) + "': at most 1024G");
  }
  return static_cast<size_t>(v * multiplier);
}

std::string usage() {
  return "usage: poolrun-allreduce-bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
         "                               [-d TYPE] [-o OP] [-c 0|1] [--backend nccl|mpi|auto] [--json FILE]\n"
         "                               [--baseline] [--rounds N]\n"
         "Allreduce bandwidth as nccl-tests' all_reduce_perf measures it, through poolrun's runtime.\n"
         "  -b, -e      smallest and largest size in bytes, K/M/G suffixes (default 32M, 32M)\n"
         "  -f          multiply the size by FACTOR each step (default 2)\n"
         "  -n, -w      timed and warm-up iterations per size (default 20, 5)\n"
         "  -d          int8 uint8 int32 uint32 int64 uint64 float double (default float)\n"
         "  -o          sum prod max min avg (default sum)\n"
         "  -c          check the results (default 1); #wrong counts wrong elements over all ranks\n"
         "  --backend   nccl (GPU buffers), mpi (host buffers), auto (default: nccl where every rank has a "
         "GPU)\n"
         "  --json      also write a poolrun.bench/1 document to FILE\n"
         "  --baseline  also time a plain MPI_Allreduce loop of the same sizes (MPI backend), in "
         "alternation\n"
         "  --rounds    timed rounds per size, the fastest kept (default 1; 3 with --baseline)\n";
}

BenchOptions parseBenchOptions(const std::vector<std::string>& args) {
  BenchOptions o;
  bool roundsGiven = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    std::string value;
    bool takesValue = a == "-b" || a == "-e" || a == "-f" || a == "-n" || a == "-w" || a == "-d" ||
                      a == "-o" || a == "-c" || a == "-r" || a == "--backend" || a == "--json" ||
                      a == "--rounds";
    // --name=value and -bVALUE forms.
    if (a.starts_with("--") && a.find('=') != std::string::npos) {
      value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
    } else if (!a.starts_with("--") && a.size() > 2 && a[0] == '-') {
      value = a.substr(2);
      a = a.substr(0, 2);
    } else if (takesValue) {
      if (i + 1 >= args.size()) throw badInput(a + " needs a value\n" + usage());
      value = args[++i];
    }
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "-b") {
      o.min_bytes = parseSize(value, a);
    } else if (a == "-e") {
      o.max_bytes = parseSize(value, a);
    } else if (a == "-f") {
      o.factor = parseInt(value, a, 2);
    } else if (a == "-n") {
      o.iters = parseInt(value, a, 1);
    } else if (a == "-w") {
      o.warmup = parseInt(value, a, 0);
    } else if (a == "-c") {
      o.check = parseInt(value, a, 0) != 0;
    } else if (a == "-r") {
      parseInt(value, a, -1);  // the root: allreduce has none; accepted for command lines of nccl-tests
    } else if (a == "-d") {
      auto t = runtime::dataTypeFromString(value);
      if (!t)
        throw badInput("-d '" + value + "': use int8, uint8, int32, uint32, int64, uint64, float or double");
      o.type = *t;
    } else if (a == "-o") {
      auto op = runtime::reduceOpFromString(value);
      if (!op) throw badInput("-o '" + value + "': use sum, prod, max, min or avg");
      o.op = *op;
    } else if (a == "--backend") {
      o.backend = runtime::backendChoiceFromString(value);
    } else if (a == "--json") {
      if (value.empty()) throw badInput("--json needs a file name");
      o.json = value;
    } else if (a == "--baseline") {
      o.baseline = true;
    } else if (a == "--rounds") {
      o.rounds = parseInt(value, a, 1);
      roundsGiven = true;
    } else {
      throw badInput("unknown option '" + args[i] + "'\n" + usage());
    }
  }
  if (o.min_bytes == 0) throw badInput("-b 0: the smallest size is at least 1 byte");
  if (o.max_bytes < o.min_bytes) {
    throw badInput("-e " + std::to_string(o.max_bytes) + " is below -b " + std::to_string(o.min_bytes) +
                   ": the largest size must be at least the smallest");
  }
  if (o.baseline && o.backend == runtime::BackendChoice::kNccl) {
    throw badInput("--baseline times plain MPI_Allreduce on host buffers: use it with --backend mpi");
  }
  if (o.baseline) o.backend = runtime::BackendChoice::kMpi;
  if (o.baseline && !roundsGiven) o.rounds = 3;
  return o;
}

std::vector<size_t> sizes(const BenchOptions& o) {
  std::vector<size_t> out;
  for (size_t s = o.min_bytes; s <= o.max_bytes; s *= static_cast<size_t>(o.factor)) {
    out.push_back(s);
    if (s > o.max_bytes / static_cast<size_t>(o.factor)) break;
  }
  return out;
}

double algBandwidth(size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0;
}

double busBandwidth(double algbw, int ranks) {
  return ranks > 0 ? algbw * 2.0 * (ranks - 1) / ranks : 0;
}

double inputValue(ReduceOp op, int rank, size_t i) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<double>((i * 7 + static_cast<size_t>(rank) * 3) % 11);
    case ReduceOp::kProd:
      return static_cast<double>(1 + (i + static_cast<size_t>(rank)) % 2);
    case ReduceOp::kMax:
    case ReduceOp::kMin:
      return static_cast<double>((i * 5 + static_cast<size_t>(rank) * 3) % 13);
  }
  return 0;
}

void fillInput(std::vector<unsigned char>& out, DataType type, ReduceOp op, int rank, size_t count) {
  out.resize(count * runtime::sizeOf(type));
  dispatch<Fill>(type, out.data(), op, rank, count);
}

int64_t countWrong(const std::vector<unsigned char>& got, DataType type, ReduceOp op, int ranks,
                   size_t count) {
  return dispatch<Wrong>(type, got.data(), op, ranks, count);
}

std::string preamble(const BenchOptions& o, const std::string& backend, const std::vector<std::string>& nodes,
                     const std::vector<runtime::RankDevice>& devices) {
  std::string out = "# poolrun-allreduce-bench, backend " + backend + ", in nccl-tests' output format\n";
  out += "# Collective test starting: all_reduce_perf\n";
  char line[512];
  std::snprintf(
      line, sizeof line,
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d iters: %d agg "
      "iters: 1 validation: %d graph: 0\n#\n# Using devices\n",
      o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters, o.check ? 1 : 0);
  out += line;
  for (size_t r = 0; r < nodes.size(); ++r) {
    const runtime::RankDevice d = r < devices.size() ? devices[r] : runtime::RankDevice{};
    std::snprintf(line, sizeof line, "#  Rank %2zu Group  0 Pid %6d on %10s device %2d %s\n", r, d.pid,
                  nodes[r].c_str(), d.device, d.label.c_str());
    out += line;
  }
  return out + "#\n";
}

std::string tableHeader() {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "#%58s%-38s%s\n"
                "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n"
                "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
                "", "out-of-place", "in-place", "size", "count", "type", "redop", "root", "time", "algbw",
                "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "", "",
                "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return buf;
}

std::string tableRow(const Row& row, DataType type, ReduceOp op, bool check) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
                std::string(runtime::toString(type)).c_str(), std::string(runtime::toString(op)).c_str(), -1);
  return buf + timingColumns(row.out_of_place, check) + timingColumns(row.in_place, check) + "\n";
}

}  // namespace poolrun::bench
