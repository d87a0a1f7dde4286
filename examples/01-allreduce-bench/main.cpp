// poolrun-allreduce-bench: allreduce bandwidth in the manner of nccl-tests' all_reduce_perf (same
// options, header and columns, so that results compare line by line), on poolrun's runtime: NCCL
// on GPU buffers or MPI on host buffers. `--baseline` also times a plain MPI_Allreduce loop of the
// same sizes, in alternation, which is how CI measures the runtime's own overhead.
//
//   poolrun -n 8 poolrun-allreduce-bench -b 8 -e 64M -f 2 -n 20 -w 5 --json bench.json

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench.hpp"

namespace {

using namespace poolrun;
using namespace poolrun::bench;
using Clock = std::chrono::steady_clock;

// The largest of every rank's value (each rank's time counts: the slowest sets the pace).
double maxOverRanks(runtime::Communicator& comm, double v) {
  runtime::Buffer b(comm, sizeof v);
  comm.copyIn(b.data(), &v, sizeof v);
  comm.allReduce(b.data(), b.data(), 1, runtime::DataType::kFloat64, runtime::ReduceOp::kMax);
  comm.copyOut(&v, b.data(), sizeof v);
  return v;
}

int64_t sumOverRanks(runtime::Communicator& comm, int64_t v) {
  runtime::Buffer b(comm, sizeof v);
  comm.copyIn(b.data(), &v, sizeof v);
  comm.allReduce(b.data(), b.data(), 1, runtime::DataType::kInt64, runtime::ReduceOp::kSum);
  comm.copyOut(&v, b.data(), sizeof v);
  return v;
}

class Bench {
 public:
  Bench(runtime::Communicator& comm, const BenchOptions& o) : comm_(comm), o_(o) {}

  Row measure(size_t bytes) {
    size_t element = runtime::sizeOf(o_.type);
    Row row;
    row.count = std::max<size_t>(bytes / element, 1);
    row.bytes = row.count * element;
    runtime::Buffer send(comm_, row.bytes), recv(comm_, row.bytes);
    std::vector<unsigned char> input;
    fillInput(input, o_.type, o_.op, comm_.rank(), row.count);
    comm_.copyIn(send.data(), input.data(), row.bytes);
    std::vector<unsigned char> host;
    if (o_.baseline) host = input;

    // Every buffer is written before it is timed, so that no loop pays for first-touch page faults.
    comm_.copyIn(recv.data(), input.data(), row.bytes);
    std::vector<unsigned char> plainOut(o_.baseline ? row.bytes : 0);
    double oop = 1e300, ip = 1e300, base = 1e300;
    for (int round = 0; round < o_.rounds; ++round) {
      auto runtimeLoop = [&] {
        oop = std::min(oop, time([&] { run(send.data(), recv.data(), row.count); }));
      };
      auto plainLoop = [&] {
        base = std::min(base, time([&] {
                          MPI_Allreduce(host.data(), plainOut.data(), static_cast<int>(row.count), mpiType(),
                                        mpiOp(), MPI_COMM_WORLD);
                        }));
      };
      // Alternating which goes first, so that neither always follows the other's traffic.
      bool plainFirst = (sizesMeasured_ + round) % 2 == 1;
      if (o_.baseline && plainFirst) plainLoop();
      runtimeLoop();
      // Out of place the inputs stay as they were, so the timed loop's own result is checked.
      if (o_.check && round == 0) row.out_of_place.wrong = verify(recv.data(), input, row.count);
      if (o_.baseline && !plainFirst) plainLoop();
      comm_.copyIn(recv.data(), input.data(), row.bytes);
      ip = std::min(ip, time([&] { run(recv.data(), recv.data(), row.count); }));
    }
    ++sizesMeasured_;
    row.out_of_place = timing(row.bytes, oop);
    row.in_place = timing(row.bytes, ip);
    if (o_.baseline) row.baseline = timing(row.bytes, base);
    if (o_.check) {
      // In place, a single timed iteration's result is the reduction of the inputs; after more, the
      // buffer holds reductions of reductions, so one more allreduce from fresh inputs is checked.
      bool single = o_.warmup + o_.iters == 1;
      row.in_place.wrong =
          single ? verify(recv.data(), input, row.count) : check(recv.data(), recv.data(), input, row.count);
    }
    return row;
  }

 private:
  void run(const void* in, void* out, size_t count) { comm_.allReduce(in, out, count, o_.type, o_.op); }

  // Seconds per iteration, the slowest rank's.
  template <typename F>
  double time(F&& iteration) {
    for (int i = 0; i < o_.warmup; ++i) iteration();
    comm_.synchronize();
    comm_.barrier();
    auto start = Clock::now();
    for (int i = 0; i < o_.iters; ++i) iteration();
    comm_.synchronize();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count() / o_.iters;
    return maxOverRanks(comm_, seconds);
  }

  Timing timing(size_t bytes, double seconds) const {
    Timing t;
    t.time_us = seconds * 1e6;
    t.algbw = algBandwidth(bytes, seconds);
    t.busbw = busBandwidth(t.algbw, comm_.size());
    return t;
  }

  // One more allreduce from fresh input, its result checked on every rank; wrong elements of all ranks.
  int64_t check(void* in, void* out, const std::vector<unsigned char>& input, size_t count) {
    comm_.copyIn(in, input.data(), input.size());
    run(in, out, count);
    return verify(out, input, count);
  }

  // Wrong elements in `out` (the reduction of every rank's input), over all ranks.
  int64_t verify(const void* out, const std::vector<unsigned char>& input, size_t count) {
    std::vector<unsigned char> got(input.size());
    comm_.copyOut(got.data(), out, got.size());
    return sumOverRanks(comm_, countWrong(got, o_.type, o_.op, comm_.size(), count));
  }

  MPI_Datatype mpiType() const {
    switch (o_.type) {
      case runtime::DataType::kInt8:
        return MPI_INT8_T;
      case runtime::DataType::kUint8:
        return MPI_UINT8_T;
      case runtime::DataType::kInt32:
        return MPI_INT32_T;
      case runtime::DataType::kUint32:
        return MPI_UINT32_T;
      case runtime::DataType::kInt64:
        return MPI_INT64_T;
      case runtime::DataType::kUint64:
        return MPI_UINT64_T;
      case runtime::DataType::kFloat32:
        return MPI_FLOAT;
      case runtime::DataType::kFloat64:
        return MPI_DOUBLE;
    }
    return MPI_BYTE;
  }
  MPI_Op mpiOp() const {
    switch (o_.op) {
      case runtime::ReduceOp::kProd:
        return MPI_PROD;
      case runtime::ReduceOp::kMax:
        return MPI_MAX;
      case runtime::ReduceOp::kMin:
        return MPI_MIN;
      default:
        return MPI_SUM;
    }
  }

  runtime::Communicator& comm_;
  const BenchOptions& o_;
  int sizesMeasured_ = 0;
};

nlohmann::ordered_json toJson(const Timing& t, bool check) {
  nlohmann::ordered_json j = {{"time_us", t.time_us}, {"algbw_gbyte_s", t.algbw}, {"busbw_gbyte_s", t.busbw}};
  j["wrong"] = check ? nlohmann::ordered_json(t.wrong) : nlohmann::ordered_json(nullptr);
  return j;
}

// The runtime's time over plain MPI's, summed over the sizes of 1 MiB and above (where the aim is
// under 5% overhead); nullopt without a baseline or such sizes.
std::optional<double> largeRatio(const std::vector<Row>& rows) {
  double runtime = 0, plain = 0;
  for (const Row& r : rows) {
    if (r.baseline && r.bytes >= (1u << 20)) {
      runtime += r.out_of_place.time_us;
      plain += r.baseline->time_us;
    }
  }
  if (plain <= 0) return std::nullopt;
  return runtime / plain;
}

int runBench(int argc, char** argv) {
  BenchOptions o;
  try {
    o = parseBenchOptions(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "poolrun-allreduce-bench: error: " << e.what() << "\n";
    return 2;
  }
  if (o.help) {
    std::cout << usage();
    return 0;
  }
  runtime::Runtime rt(&argc, &argv, {.backend = o.backend});
  runtime::Communicator& comm = rt.world();
  bool root = comm.rank() == 0;
  if (root) {
    std::printf(
        "%s", preamble(o, std::string(runtime::toString(comm.backend())), rt.nodes(), rt.devices()).c_str());
    std::printf("%s", tableHeader().c_str());
    std::fflush(stdout);
  }
  Bench bench(comm, o);
  std::vector<Row> rows;
  double busbwSum = 0;
  int64_t wrong = 0;
  for (size_t bytes : sizes(o)) {
    Row row = bench.measure(bytes);
    busbwSum += row.out_of_place.busbw + row.in_place.busbw;
    wrong += row.out_of_place.wrong + row.in_place.wrong;
    if (root) {
      std::printf("%s", tableRow(row, o.type, o.op, o.check).c_str());
      std::fflush(stdout);
    }
    rows.push_back(row);
  }
  double avgBusbw = rows.empty() ? 0 : busbwSum / (2.0 * static_cast<double>(rows.size()));
  if (root) {
    std::printf("# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %g \n#\n",
                static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED", avgBusbw);
    if (o.baseline) {
      std::printf(
          "# Runtime (MPI backend) against plain MPI_Allreduce, out-of-place, fastest of %d rounds:\n",
          o.rounds);
      for (const Row& r : rows) {
        std::printf("# %12zu B  runtime %10.2f us  plain %10.2f us  ratio %.3f\n", r.bytes,
                    r.out_of_place.time_us, r.baseline->time_us,
                    r.out_of_place.time_us / r.baseline->time_us);
      }
      if (auto large = largeRatio(rows)) {
        std::printf("# Overhead at 1 MiB and above: runtime/plain %.3f (sum of times over those sizes)\n",
                    *large);
      }
    }
  }
  if (root && !o.json.empty()) {
    nlohmann::ordered_json doc;
    doc["schema"] = "poolrun.bench/1";
    doc["collective"] = "allreduce";
    doc["backend"] = runtime::toString(comm.backend());
    doc["ranks"] = comm.size();
    std::vector<std::string> nodes = rt.nodes();
    std::sort(nodes.begin(), nodes.end());
    doc["nodes"] = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
    doc["type"] = runtime::toString(o.type);
    doc["redop"] = runtime::toString(o.op);
    doc["iters"] = o.iters;
    doc["warmup"] = o.warmup;
    doc["rounds"] = o.rounds;
    doc["check"] = o.check;
    nlohmann::ordered_json jrows = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json j = {{"bytes", r.bytes}, {"count", r.count}};
      j["out_of_place"] = toJson(r.out_of_place, o.check);
      j["in_place"] = toJson(r.in_place, o.check);
      if (r.baseline) {
        j["baseline_mpi"] = toJson(*r.baseline, false);
        j["overhead_ratio"] = r.out_of_place.time_us / r.baseline->time_us;
      }
      jrows.push_back(j);
    }
    doc["rows"] = jrows;
    doc["avg_busbw_gbyte_s"] = avgBusbw;
    if (auto large = largeRatio(rows)) doc["overhead_ratio_1mib_and_above"] = *large;
    doc["wrong"] = wrong;
    std::ofstream out(o.json);
    out << doc.dump(2) << "\n";
    if (!out) {
      std::cerr << "poolrun-allreduce-bench: error: cannot write --json " << o.json
                << " (check the folder exists)\n";
      return 1;
    }
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runBench(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "poolrun-allreduce-bench: error: " << e.what() << "\n";
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks may be waiting
    return 1;
  }
}
