// The allreduce benchmark's command line, sizes, bandwidth arithmetic, data check and table.

#include <gtest/gtest.h>

#include <cmath>

#include "bench.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/tuner/calibrate.hpp"

namespace poolrun::bench {
namespace {

using runtime::DataType;
using runtime::ReduceOp;

BenchOptions parse(std::vector<std::string> args) {
  return parseBenchOptions(args);
}

TEST(BenchOptionsTest, SizeSuffixes) {
  EXPECT_EQ(parseSize("8", "-b"), 8u);
  EXPECT_EQ(parseSize("64K", "-b"), 65536u);
  EXPECT_EQ(parseSize("64k", "-b"), 65536u);
  EXPECT_EQ(parseSize("32M", "-e"), 32u << 20);
  EXPECT_EQ(parseSize("1G", "-e"), size_t{1} << 30);
  for (const char* bad : {"", "K", "12X", "1.5M", "-8", "8 M", "99999999999G"}) {
    try {
      parseSize(bad, "-b");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("-b '") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(BenchOptionsTest, TheOptionsOfAllReducePerf) {
  BenchOptions o = parse({"-b", "8",      "-e", "128M", "-f", "2", "-n",        "3",   "-w",     "1",
                          "-d", "double", "-o", "max",  "-c", "0", "--backend", "mpi", "--json", "out.json"});
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 128u << 20);
  EXPECT_EQ(o.iters, 3);
  EXPECT_EQ(o.warmup, 1);
  EXPECT_EQ(o.type, DataType::kFloat64);
  EXPECT_EQ(o.op, ReduceOp::kMax);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.backend, runtime::BackendChoice::kMpi);
  EXPECT_EQ(o.json, "out.json");
  BenchOptions joined = parse({"-b8", "-e1M", "--json=x.json", "-dint8"});
  EXPECT_EQ(joined.min_bytes, 8u);
  EXPECT_EQ(joined.max_bytes, 1u << 20);
  EXPECT_EQ(joined.type, DataType::kInt8);
  EXPECT_EQ(joined.json, "x.json");
  BenchOptions defaults = parse({});
  EXPECT_EQ(defaults.min_bytes, 32u << 20);
  EXPECT_EQ(defaults.iters, 20);
  EXPECT_EQ(defaults.warmup, 5);
  EXPECT_TRUE(defaults.check);
  BenchOptions base = parse({"--baseline"});
  EXPECT_EQ(base.backend, runtime::BackendChoice::kMpi);
  EXPECT_EQ(base.rounds, 3);
}

TEST(BenchOptionsTest, BadOptionsSayWhatIsWrong) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {{"-d", "half"}, "-d 'half': use int8"},
           {{"-o", "xor"}, "-o 'xor': use sum"},
           {{"-f", "1"}, "-f '1'"},
           {{"-n", "0"}, "-n '0'"},
           {{"-b", "1M", "-e", "1K"}, "-e 1024 is below -b 1048576"},
           {{"--backend", "gloo"}, "backend 'gloo': use nccl, mpi or auto"},
           {{"--baseline", "--backend", "nccl"}, "--baseline times plain MPI_Allreduce"},
           {{"-b"}, "-b needs a value"},
           {{"--frobnicate"}, "unknown option '--frobnicate'"},
       }) {
    try {
      parse(c.args);
      ADD_FAILURE() << "accepted " << c.says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

TEST(BenchOptionsTest, SizesWalkLikeAllReducePerf) {
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 64 << 20;
  o.factor = 2;
  auto s = sizes(o);
  ASSERT_EQ(s.size(), 24u);
  EXPECT_EQ(s.front(), 8u);
  EXPECT_EQ(s.back(), 64u << 20);
  o.factor = 8;
  EXPECT_EQ(sizes(o).back(), 16u << 20) << "a step past -e is not taken";
  o.min_bytes = o.max_bytes = 1000;
  EXPECT_EQ(sizes(o), std::vector<size_t>{1000});
}

TEST(BenchMathTest, BusBandwidthIsAlgbwTimesTwoNMinusOneOverN) {
  EXPECT_DOUBLE_EQ(algBandwidth(1'000'000'000, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(busBandwidth(2.0, 8), 3.5);
  EXPECT_DOUBLE_EQ(busBandwidth(2.0, 2), 2.0);
  EXPECT_DOUBLE_EQ(busBandwidth(2.0, 1), 0.0);
  EXPECT_DOUBLE_EQ(algBandwidth(8, 0), 0.0);
}

// The expected result of every op and type: what the ranks' inputs reduce to, element by element.
TEST(BenchDataTest, TheCheckKnowsTheAnswerAndCatchesAWrongElement) {
  for (DataType type : {DataType::kInt8, DataType::kUint8, DataType::kInt32, DataType::kUint32,
                        DataType::kInt64, DataType::kUint64, DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
      const int ranks = 8;
      const size_t count = 1000;
      // Reduce the ranks' inputs by hand, in double, then store in the type.
      std::vector<unsigned char> got;
      fillInput(got, type, op, 0, count);
      std::vector<double> acc(count);
      for (size_t i = 0; i < count; ++i) {
        double a = inputValue(op, 0, i);
        for (int r = 1; r < ranks; ++r) {
          double v = inputValue(op, r, i);
          a = op == ReduceOp::kProd  ? a * v
              : op == ReduceOp::kMax ? std::max(a, v)
              : op == ReduceOp::kMin ? std::min(a, v)
                                     : a + v;
        }
        if (op == ReduceOp::kAvg)
          a = type == DataType::kFloat32 || type == DataType::kFloat64 ? a / ranks : std::trunc(a / ranks);
        acc[i] = a;
      }
      // Products reach 2^8 = 256, which wraps in 8-bit types: compare those through the check itself.
      bool wraps = op == ReduceOp::kProd && runtime::sizeOf(type) == 1;
      std::vector<unsigned char> want;
      fillInput(want, DataType::kFloat64, op, 0, count);
      auto* w = reinterpret_cast<double*>(want.data());
      for (size_t i = 0; i < count; ++i) w[i] = acc[i];
      std::vector<unsigned char> typed(count * runtime::sizeOf(type));
      auto store = [&](auto* p) {
        for (size_t i = 0; i < count; ++i) {
          using T = std::remove_pointer_t<decltype(p)>;
          p[i] = wraps ? static_cast<T>(static_cast<uint64_t>(acc[i])) : static_cast<T>(acc[i]);
        }
      };
      switch (type) {
        case DataType::kInt8:
          store(reinterpret_cast<int8_t*>(typed.data()));
          break;
        case DataType::kUint8:
          store(reinterpret_cast<uint8_t*>(typed.data()));
          break;
        case DataType::kInt32:
          store(reinterpret_cast<int32_t*>(typed.data()));
          break;
        case DataType::kUint32:
          store(reinterpret_cast<uint32_t*>(typed.data()));
          break;
        case DataType::kInt64:
          store(reinterpret_cast<int64_t*>(typed.data()));
          break;
        case DataType::kUint64:
          store(reinterpret_cast<uint64_t*>(typed.data()));
          break;
        case DataType::kFloat32:
          store(reinterpret_cast<float*>(typed.data()));
          break;
        case DataType::kFloat64:
          store(reinterpret_cast<double*>(typed.data()));
          break;
      }
      std::string name = std::string(runtime::toString(type)) + "/" + std::string(runtime::toString(op));
      EXPECT_EQ(countWrong(typed, type, op, ranks, count), 0) << name;
      typed[runtime::sizeOf(type) * 18 - 1] ^= 0x40;  // one element off: its top byte
      EXPECT_EQ(countWrong(typed, type, op, ranks, count), 1) << name;
      EXPECT_GT(countWrong(got, type, op, ranks, count), 0)
          << name << ": a rank's own input is not the result";
    }
  }
}

TEST(BenchTableTest, ColumnsOfAllReducePerf) {
  std::string header = tableHeader();
  for (const char* column : {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                             "out-of-place", "in-place", "(B)", "(elements)", "(us)", "(GB/s)"}) {
    EXPECT_NE(header.find(column), std::string::npos) << column;
  }
  Row row;
  row.bytes = 1048576;
  row.count = 262144;
  row.out_of_place = {123.45, 8.49, 14.86, 0};
  row.in_place = {120.0, 8.74, 15.29, 0};
  EXPECT_EQ(tableRow(row, DataType::kFloat32, ReduceOp::kSum, true),
            "     1048576        262144     float     sum      -1   123.45    8.49   14.86       0   120.00  "
            "  8.74   "
            "15.29       0\n");
  EXPECT_NE(tableRow(row, DataType::kFloat32, ReduceOp::kSum, false).find("N/A"), std::string::npos);
}

TEST(BenchTableTest, OutputReadsAsNcclTestsOutput) {
  // The whole output of a 2-node, 4-rank run, as rank 0 prints it, read by calibrate's reader of
  // nccl-tests logs: every row, with the ranks and nodes of the "# Using devices" lines.
  BenchOptions o = parse({"-b", "1K", "-e", "1M", "-f", "1024"});
  std::vector<std::string> nodes{"sim01", "sim01", "sim02", "sim02"};
  std::vector<runtime::RankDevice> devices{{101, 0, "[0000:07:00] NVIDIA H100 80GB HBM3"},
                                           {102, 1, "[0000:0f:00] NVIDIA H100 80GB HBM3"},
                                           {201, 0, "[0000:07:00] NVIDIA H100 80GB HBM3"},
                                           {202, 1, "[0000:0f:00] NVIDIA H100 80GB HBM3"}};
  std::string text = preamble(o, "nccl", nodes, devices) + tableHeader();
  for (size_t bytes : sizes(o)) {
    Row row;
    row.bytes = bytes;
    row.count = bytes / 4;
    row.out_of_place = {50.0 + static_cast<double>(bytes) / 1e4, 1.0, 1.5, 0};
    row.in_place = {49.0 + static_cast<double>(bytes) / 1e4, 1.0, 1.5, 0};
    text += tableRow(row, DataType::kFloat32, ReduceOp::kSum, true);
  }
  text += "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5 \n#\n";
  EXPECT_NE(text.find("# nThread 1 nGpus 1 minBytes 1024 maxBytes 1048576 step: 1024(factor) warmup iters: 5 "
                      "iters: 20 agg iters: 1 validation: 1 graph: 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("#  Rank  2 Group  0 Pid    201 on      sim02 device  0 [0000:07:00] NVIDIA H100"),
            std::string::npos)
      << text;
  tuner::ParsedLog log = tuner::parseNcclTestsLog(text, "bench.txt", {});
  ASSERT_EQ(log.measurements.size(), 2u) << text;
  for (const tuner::Measurement& m : log.measurements) {
    EXPECT_EQ(m.coll, tuner::Coll::kAllReduce);
    EXPECT_EQ(m.nranks, 4);
    EXPECT_EQ(m.nnodes, 2);
  }
  EXPECT_EQ(log.measurements[1].bytes, 1048576u);
  EXPECT_NEAR(log.measurements[1].time_us, 49.0 + 1048576 / 1e4, 0.01)
      << "(printed to 0.01 us) the faster of out-of-place and in-place";

  // A rank on host memory (the MPI backend) makes the log no measure of NCCL: refused, naming the
  // line and the rank.
  devices[3] = {202, -1, "host memory"};
  const std::string cpu = preamble(o, "nccl", nodes, devices) + tableHeader();
  try {
    tuner::parseNcclTestsLog(cpu, "bench.txt", {});
    ADD_FAILURE() << "a log of a rank on host memory was taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(": rank 3 ran on host memory (CPU buffers, MPI), not on a GPU"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace poolrun::bench
