// `poolrun tuner` as a user runs it: the real binary in a child process, its output and exit status.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "tuner_data.hpp"

namespace {

using poolrun::test::TempDir;

using poolrun::test::kTunerData;
const std::string kTables = POOLRUN_TUNER_TABLES;

using Result = poolrun::test::ProcessResult;
using poolrun::test::slurp;

Result poolrun(const std::string& args) {
  return poolrun::test::runShell(std::string(POOLRUN_BINARY) + " " + args);
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(TunerCliTest, ExplainPrintsATablePerPowerOfTwo) {
  Result r =
      poolrun("tuner explain --config " + kTunerData + "/h100-roce-4node.json --min-bytes 1K --max-bytes 1M");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("allreduce on 32 ranks, 4 nodes (8 per node); fabric roce"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 KiB"), std::string::npos);
  EXPECT_NE(r.out.find("1 MiB"), std::string::npos);
  EXPECT_EQ(lines(r.out), 2u + 11u);
}

TEST(TunerCliTest, ExplainJson) {
  Result r = poolrun("tuner explain --json --config " + kTunerData +
                     "/a100-8gpu-1node.json --coll allgather --min-bytes 8 --max-bytes 1G");
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["schema"], "poolrun.tuner-explain/1");
  EXPECT_EQ(doc["nranks"], 8);
  EXPECT_EQ(doc["nnodes"], 1);
  ASSERT_EQ(doc["rows"].size(), 28u);  // 2^3 .. 2^30
  for (const auto& row : doc["rows"]) {
    EXPECT_EQ(row["coll"], "allgather");
    for (const char* key : {"bytes", "algo", "proto", "channels", "time_us", "busbw_gbyte_s", "candidates"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    EXPECT_EQ(row["channels"], 0);
    EXPECT_EQ(row["candidates"][0]["algo"], row["algo"]);
    EXPECT_EQ(row["candidates"][0]["time_us"], row["time_us"]);
    for (const auto& c : row["candidates"]) {
      EXPECT_NE(c["algo"], "Tree") << "no Tree for allgather";
      EXPECT_TRUE(c.contains("time_us"));
    }
  }
}

TEST(TunerCliTest, ExplainAsAnotherShape) {
  Result one =
      poolrun("tuner explain --json --config " + kTunerData + "/h100-roce-4node.json --nranks 8 --nnodes 1");
  ASSERT_EQ(one.status, 0) << one.err;
  auto doc = nlohmann::json::parse(one.out);
  EXPECT_EQ(doc["rows"].back()["algo"], "NVLS");
}

TEST(TunerCliTest, BadInputIsOneLineAndExitTwo) {
  struct Case {
    std::string args, mentions;
  };
  const std::string cfg = kTunerData + "/h100-roce-4node.json";
  for (const Case& c : std::vector<Case>{
           {"tuner explain", "--config"},
           {"tuner explain --config /nonexistent.json", "/nonexistent.json"},
           {"tuner explain --config " + cfg + " --coll alltoall", "alltoall"},
           {"tuner explain --config " + cfg + " --nranks 4 --nnodes 8", "--nnodes 8"},
           {"tuner explain --config " + cfg + " --max-bytes 12X", "12X"},
           {"tuner explain --config " + cfg + " --min-bytes 1G --max-bytes 1M", "--min-bytes"},
           {"tuner explain --config " + cfg + " --nranks 0", "--nranks 0"},
           {"tuner explain --config " + kTunerData + "/all_gather_perf_2x4.log", "not valid JSON"},
           {"tuner explain --config " + cfg + " --frobnicate", "frobnicate"},
           {"tuner calibrate --config " + cfg, "no nccl-tests logs"},
           {"tuner calibrate --config " + cfg + " --algo Rign x.log", "Rign"},
           {"tuner calibrate --config " + cfg + " /nonexistent.log", "/nonexistent.log"},
           {"tuner calibrate --config " + cfg + " " + cfg, "no result lines"},
           {"tuner frob", "frob"}}) {
    Result r = poolrun(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.err.starts_with("poolrun: error: ")) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.substr(0, r.err.find('\n')).find(c.mentions), std::string::npos) << c.args << "\n"
                                                                                     << r.err;
  }
  Result none = poolrun("tuner");
  EXPECT_EQ(none.status, 2);
  Result help = poolrun("--help");
  EXPECT_NE(help.out.find("tuner"), std::string::npos);
}

// `poolrun tuner` on files that are not configurations: one line, exit status 2, at once (a FIFO
// without a writer must not block), and no crash on 100,000 levels of nesting.
TEST(HostileFiles, TunerCommandsRefuseThemInOneLine) {
  TempDir tmp;
  const std::string cfg = kTunerData + "/h100-roce-4node.json";
  const std::string fifo = (tmp.path() / "tuner.fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = tmp.write("big.json", "").string();
  ASSERT_EQ(truncate(big.c_str(), off_t{9} << 20), 0);
  const std::string deep =
      tmp.write("deep.json", std::string(100'000, '[') + std::string(100'000, ']')).string();
  struct Case {
    std::string args, mentions;
  };
  for (const Case& c : std::vector<Case>{
           {"tuner explain --config /dev/zero", "/dev/zero is a character device, not a regular file"},
           {"tuner explain --config " + fifo, fifo + " is a FIFO"},
           {"tuner explain --config " + tmp.path().string(), " is a directory"},
           {"tuner explain --config " + big, big + " is 9 MiB; tuner config files are at most 8 MiB"},
           {"tuner explain --config " + deep, "JSON nests deeper than 64 levels at byte 64"},
           {"tuner calibrate --config " + deep + " x.log", "JSON nests deeper than 64 levels"},
           {"tuner calibrate --config " + cfg + " /dev/zero", "/dev/zero is a character device"},
           {"tuner calibrate --config " + cfg + " " + fifo, fifo + " is a FIFO"},
       }) {
    Result r =
        poolrun::test::runShell("timeout 20 " + std::string(POOLRUN_BINARY) + " " + c.args + " </dev/null");
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.mentions), std::string::npos) << c.args << "\n" << r.err;
  }
}

// --compare with published nccl-tests output (2 x 8 H100, 31 sizes from 8 B to 8 GiB): one row per
// size with the model's cell, its prediction, the measured time (the faster of out-of-place and
// in-place) and the error, then the worst errors; --json gives the same figures.
TEST(TunerCliTest, CompareAgainstNcclTestsOutput) {
  const std::string args = "tuner explain --config " + kTables +
                           "/h100-8x2-gcp-a3mega-tcpxo.json --compare " + kTunerData +
                           "/all_reduce_perf_2x8_h100_a3mega.log";
  Result r = poolrun(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("allreduce on 16 ranks, 2 nodes: the model ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted_us  measured_us    error"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("worst error from 64 KiB: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("worst error from 256 MiB: "), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out), 2u + 31u + 2u) << r.out;
  // 8 GiB: 47535 us out-of-place, 47743 in-place.
  const size_t at = r.out.find("     8 GiB");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.substr(at, r.out.find('\n', at) - at).find("47535.0"), std::string::npos) << r.out;

  Result j = poolrun(args + " --json --min-bytes 64K --max-bytes 1G");
  ASSERT_EQ(j.status, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["nranks"], 16);
  EXPECT_EQ(doc["nnodes"], 2);
  ASSERT_EQ(doc["rows"].size(), 15u);  // 64 KiB .. 1 GiB
  for (const auto& row : doc["rows"]) {
    const double predicted = row["predicted_us"], measured = row["measured_us"], error = row["error"];
    EXPECT_GT(predicted, 0);
    EXPECT_NEAR(error, predicted / measured - 1, 1e-9);
    EXPECT_FALSE(row["forced"].get<bool>());
  }
  EXPECT_EQ(doc["rows"][0]["measured_us"], 157.6);
  EXPECT_EQ(doc["rows"].back()["measured_us"], 6737.4);
}

// A data file of nccl_tuner/data as the table: its calibration figures, busbw converted to time.
TEST(TunerCliTest, CompareAgainstADataFile) {
  const std::string table = kTables + "/a100-8x1-azure-nda100v4.json";
  Result r = poolrun("tuner explain --json --config " + table + " --compare " + table);
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["rows"].size(), 21u);
  for (const auto& row : doc["rows"]) {
    if (row["bytes"] == 1u << 30) {
      EXPECT_NEAR(row["measured_us"].get<double>(), 1073741824 * 1.75 / 228.10e3, 0.1);
    }
  }
  // Another collective than the table holds, and a shape it does not have, say so.
  Result coll = poolrun("tuner explain --config " + table + " --compare " + table + " --coll allgather");
  EXPECT_EQ(coll.status, 2);
  EXPECT_NE(coll.err.find("no allgather figures (it has allreduce; use --coll)"), std::string::npos)
      << coll.err;
  Result shape =
      poolrun("tuner explain --config " + table + " --compare " + table + " --nranks 16 --nnodes 2");
  EXPECT_EQ(shape.status, 2);
  EXPECT_NE(shape.err.find("no allreduce figures of the shape asked for"), std::string::npos) << shape.err;
}

// A table that measured several algorithms at one size names the fastest; --compare says whether
// the model picks it (the 2, 4 and 6 H100 table: Ring, Tree and NVLS forced at 256 MiB on 4 GPUs).
TEST(TunerCliTest, CompareJudgesTheChoiceWhereSeveralAlgorithmsWereMeasured) {
  const std::string table = kTables + "/h100-nx1-nvswitch-slices.json";
  const std::string args =
      "tuner explain --config " + table + " --compare " + table + " --nranks 4 --nnodes 1";
  Result r = poolrun(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(
      r.out.find("choices where the table measured several:\n  256 MiB: model NVLS/Simple, fastest of 3 "
                 "algorithms NVLS (1120.5 us): agrees"),
      std::string::npos)
      << r.out;
  Result j = poolrun(args + " --json");
  ASSERT_EQ(j.status, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["choices"].size(), 7u);  // 6 sizes by algorithm, 256 MiB by protocol too
  EXPECT_EQ(doc["choices"][0]["measured_best"], "NVLS");
  EXPECT_EQ(doc["choices"][0]["measured"], 3);
  EXPECT_TRUE(doc["choices"][0]["agrees"].get<bool>());
  EXPECT_EQ(doc["choices"].back()["forced"], "proto");
  EXPECT_EQ(doc["choices"].back()["measured_best"], "Simple");
}

// Tables that are not tables: one line naming the file and what is wrong, exit status 2.
TEST(TunerCliTest, CompareRefusesBadTablesInOneLine) {
  TempDir tmp;
  const std::string cfg = kTables + "/a100-8x1-azure-nda100v4.json";
  const std::string empty = tmp.write("empty.txt", "").string();
  const std::string blank = tmp.write("blank.txt", "\n  \n\t\n").string();
  const std::string garbage = tmp.write("garbage.txt", "hello\nsize busbw\n1 2 3\n").string();
  const std::string binary =
      tmp.write("binary.bin", std::string("\xff\xfe\x00\x01\x89PNG\r\n\x1a\n", 12)).string();
  const std::string badJson = tmp.write("bad.json", "{\"schema\": \"\xff\xfe\"}").string();
  const std::string noFigures = kTunerData + "/a100-8gpu-1node.json";
  const std::string huge = tmp.write("huge.log", "").string();
  ASSERT_EQ(truncate(huge.c_str(), off_t{65} << 20), 0);
  const std::string twoShapes =
      tmp.write("two.log", slurp(kTunerData + "/all_reduce_perf_1x8_ring_ll128.log") +
                               slurp(kTunerData + "/all_reduce_perf_2x8_h100_a3mega.log"))
          .string();
  struct Case {
    std::string table, mentions;
  };
  for (const Case& c : std::vector<Case>{
           {empty, empty + ": is empty"},
           {blank, blank + ": is empty"},
           {garbage, garbage + ": no result lines found"},
           {binary, binary + ": no result lines found"},
           {badJson, "not valid JSON"},
           {noFigures, noFigures + ": holds no calibration figures"},
           {huge, huge + " is 65 MiB; comparison table files are at most 64 MiB"},
           {twoShapes,
            "figures of several shapes (ranks x nodes: 8x1, 16x2); choose one with --nranks and --nnodes"},
           {"/dev/zero", "/dev/zero is a character device"},
           {"/nonexistent.log", "/nonexistent.log"},
       }) {
    Result r =
        poolrun::test::runShell("timeout 20 " + std::string(POOLRUN_BINARY) + " tuner explain --config " +
                                cfg + " --compare " + c.table + " </dev/null");
    EXPECT_EQ(r.status, 2) << c.table << "\n" << r.err;
    EXPECT_TRUE(r.err.starts_with("poolrun: error: ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.table << "\n" << r.err;
    EXPECT_NE(r.err.find(c.mentions), std::string::npos) << c.table << "\n" << r.err;
  }
}

TEST(TunerCliTest, CalibrateWritesMeasuredFiguresThatExplainThenUses) {
  TempDir tmp;
  const auto cfg = tmp.path() / "tuner.json";
  std::filesystem::copy_file(kTunerData + "/a100-8gpu-1node.json", cfg);
  const std::string before = poolrun("tuner explain --json --config " + cfg.string()).out;
  Result r = poolrun("tuner calibrate --config " + cfg.string() + " " + kTunerData +
                     "/all_reduce_perf_1x8_ring_ll128.log");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(
      r.out.find("25 figures from 1 log (25 with a forced algorithm and protocol; 25 added, 0 replaced)"),
      std::string::npos)
      << r.out;
  auto doc = nlohmann::json::parse(slurp(cfg));
  EXPECT_EQ(doc["calibration"].size(), 25u);
  EXPECT_EQ(doc["comment"].get<std::string>().substr(0, 8), "One 8x A");  // other keys kept

  // The measured Ring/LL128 figures (38 us floor, 205 GB/s) now rank with the model's.
  auto explained = nlohmann::json::parse(poolrun("tuner explain --json --config " + cfg.string()).out);
  bool measuredChosen = false;
  for (const auto& row : explained["rows"]) {
    for (const auto& c : row["candidates"]) {
      if (c["algo"] == "Ring" && c["proto"] == "LL128" && row["bytes"].get<long>() <= (128l << 20)) {
        EXPECT_EQ(c["source"], "measured") << row["bytes"];
      }
    }
    measuredChosen = measuredChosen || row["source"] == "measured";
  }
  EXPECT_TRUE(measuredChosen);
  EXPECT_NE(nlohmann::json::parse(before)["rows"], explained["rows"]);

  // Again: replaced, not duplicated. And the unforced allgather log adds figures that rank nothing.
  Result again = poolrun("tuner calibrate --config " + cfg.string() + " " + kTunerData +
                         "/all_reduce_perf_1x8_ring_ll128.log " + kTunerData + "/all_gather_perf_2x4.log");
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("25 replaced"), std::string::npos) << again.out;
  EXPECT_NE(again.err.find("poolrun: warning: "), std::string::npos) << again.err;  // the wrong-result line
  EXPECT_EQ(nlohmann::json::parse(slurp(cfg))["calibration"].size(), 32u);
}

TEST(TunerCliTest, CalibrateToStandardOutputWithOverrides) {
  TempDir tmp;
  Result r = poolrun("tuner calibrate --config " + kTunerData +
                     "/h100-ib-4node.json -o - --algo Ring --proto Simple " + kTunerData +
                     "/all_gather_perf_2x4.log");
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["calibration"].size(), 7u);
  EXPECT_EQ(doc["calibration"][0]["algo"], "Ring");
  EXPECT_EQ(doc["calibration"][0]["nnodes"], 2);
  EXPECT_NE(r.err.find("written to stdout"), std::string::npos) << r.err;
}

}  // namespace
