// Files and texts a hostile or careless user gives the tuner (POOLRUN_TUNER_CONFIG,
// NCCL_TUNER_CONFIG_FILE, `poolrun tuner --config`): devices, FIFOs, folders, files over the limit and
// JSON nested 100,000 levels deep fail at once with a ConfigError naming the file. And the cache that
// parses a configuration once per process, however many communicators NCCL inits.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "poolrun/tuner/config.hpp"
#include "support/blocking.hpp"
#include "support/temp_dir.hpp"
#include "tuner_data.hpp"

namespace poolrun::tuner {
namespace {

constexpr int kDeep = 100'000;
using poolrun::test::kTunerData;

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string slurp(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::string out;
  char buf[4096];
  for (ssize_t n; fd >= 0 && (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  if (fd >= 0) ::close(fd);
  return out;
}

std::string errorOf(const std::function<void()>& read, const std::filesystem::path& unblock = {}) {
  return test::errorOf<ConfigError>(read, unblock);
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

class HostileFiles : public ::testing::Test {
 protected:
  std::filesystem::path fifo() {
    std::filesystem::path p = tmp_.path() / "tuner.fifo";
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p;
  }
  std::filesystem::path sparse(off_t size) {
    std::filesystem::path p = tmp_.write("big.json", "");
    EXPECT_EQ(::truncate(p.c_str(), size), 0);
    return p;
  }
  test::TempDir tmp_;
};

TEST_F(HostileFiles, CharacterDeviceIsRefused) {
  EXPECT_HAS(errorOf([] { loadConfig("/dev/zero"); }),
             "tuner config: /dev/zero is a character device, not a regular file");
  EXPECT_HAS(errorOf([] { loadExampleCsvFile("/dev/zero"); }),
             "tuner rules: /dev/zero is a character device, not a regular file");
}

TEST_F(HostileFiles, FifoIsRefusedWithoutBlocking) {
  std::filesystem::path p = fifo();
  EXPECT_HAS(errorOf([&] { loadConfig(p.string()); }, p), p.string() + " is a FIFO, not a regular file");
  EXPECT_HAS(errorOf([&] { loadExampleCsvFile(p.string()); }, p), p.string() + " is a FIFO");
}

TEST_F(HostileFiles, FolderIsRefused) {
  EXPECT_HAS(errorOf([&] { loadConfig(tmp_.path().string()); }), " is a directory, not a regular file");
}

TEST_F(HostileFiles, FileOverTheLimitIsRefusedBeforeItIsRead) {
  std::filesystem::path p = sparse(off_t{9} << 20);
  EXPECT_HAS(errorOf([&] { loadConfig(p.string()); }),
             p.string() + " is 9 MiB; tuner config files are at most 8 MiB");
  EXPECT_HAS(errorOf([&] { loadExampleCsvFile(p.string()); }), "tuner rules files are at most 8 MiB");
  EXPECT_HAS(errorOf([&] { readConfigFile(p.string(), "nccl-tests log", 4 << 20); }),
             "nccl-tests log files are at most 4 MiB");
}

TEST_F(HostileFiles, MissingFileIsNamed) {
  EXPECT_HAS(errorOf([] { loadConfig("/nonexistent/tuner.json"); }),
             "tuner config: /nonexistent/tuner.json: no such file");
}

TEST_F(HostileFiles, Nested100000DeepIsRefusedInAFileAndInTheEnvironment) {
  const std::string good = slurp(kTunerData + "/h100-ib-4node.json");
  const std::string inComment =
      good.substr(0, good.rfind('}')) + ", \"comment\": " + repeat("[", kDeep) + repeat("]", kDeep) + "}";
  for (const std::string& deep :
       {repeat("[", kDeep) + repeat("]", kDeep), repeat("{\"x-a\":", kDeep) + "1" + repeat("}", kDeep),
        inComment, repeat("[", kDeep)}) {
    std::filesystem::path p = tmp_.write("deep.json", deep);
    EXPECT_HAS(errorOf([&] { loadConfig(p.string()); }),
               "tuner config " + p.string() + ": JSON nests deeper than 64 levels at byte ");
    if (deep.front() == '{') {
      EXPECT_HAS(errorOf([&] { loadConfig(deep); }),
                 "tuner config POOLRUN_TUNER_CONFIG: JSON nests deeper than 64 levels");
    }
  }
  // 64 levels are read (and fail on what they hold, not on their depth).
  EXPECT_HAS(errorOf([&] { loadConfig(repeat("{\"x-a\":", 64) + "1" + repeat("}", 64)); }),
             "missing field 'schema'");
}

TEST_F(HostileFiles, NumberBeyondADoubleIsAConfigError) {
  EXPECT_HAS(errorOf([] { parseConfig(R"({"schema": 1e999})", "t.json"); }),
             "tuner config t.json: unusable JSON: number overflow parsing '1e999'");
}

// ---- parsing once per process --------------------------------------------------------------------------

class ConfigCacheTest : public ::testing::Test {
 protected:
  // Rules that force `algo` on every allreduce.
  std::string config(const std::string& algo) {
    std::string c = slurp(kTunerData + "/h100-ib-4node.json");
    return c.substr(0, c.rfind('}')) + R"(, "rules": [{"coll": "allreduce", "algo": ")" + algo +
           R"(", "proto": "Simple"}]})";
  }
  static std::optional<Algo> algoOf(const TunerConfig& c) { return c.rules.at(0).algo; }
  static void setMtime(const std::filesystem::path& p, timespec t) {
    timespec times[2] = {t, t};
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
  }
  static timespec mtimeOf(const std::filesystem::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0);
    return st.st_mtim;
  }
  test::TempDir tmp_;
  ConfigCache cache_;
};

TEST_F(ConfigCacheTest, AnUnchangedFileIsParsedOnce) {
  std::filesystem::path p = tmp_.write("tuner.json", config("Ring"));
  auto first = cache_.load(p.string());
  auto second = cache_.load(p.string());
  EXPECT_EQ(cache_.parses(), 1u);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(algoOf(*second), Algo::kRing);
}

TEST_F(ConfigCacheTest, AFileRewrittenOrReplacedIsReadAgain) {
  std::filesystem::path p = tmp_.write("tuner.json", config("Ring"));
  EXPECT_EQ(algoOf(*cache_.load(p.string())), Algo::kRing);
  // Rewritten in place to the same size, its modification time put back: the same identity (inode,
  // size, mtime), so the first parse stands. This is what shows the cache keys on the file's identity.
  const timespec mtime = mtimeOf(p);
  tmp_.write("tuner.json", config("Tree"));
  setMtime(p, mtime);
  EXPECT_EQ(algoOf(*cache_.load(p.string())), Algo::kRing);
  EXPECT_EQ(cache_.parses(), 1u);
  // A new modification time: read again.
  setMtime(p, {mtime.tv_sec + 1, mtime.tv_nsec});
  EXPECT_EQ(algoOf(*cache_.load(p.string())), Algo::kTree);
  EXPECT_EQ(cache_.parses(), 2u);
  // Replaced by another file (another inode) of the same size and time: read again.
  std::filesystem::path other = tmp_.write("other.json", config("NVLSTree"));
  std::filesystem::path same = tmp_.write("same.json", config("Ring"));
  setMtime(same, mtimeOf(p));
  std::filesystem::rename(same, p);
  EXPECT_EQ(algoOf(*cache_.load(p.string())), Algo::kRing);
  EXPECT_EQ(cache_.parses(), 3u);
  // Another size.
  std::filesystem::rename(other, p);
  EXPECT_EQ(algoOf(*cache_.load(p.string())), Algo::kNvlsTree);
  EXPECT_EQ(cache_.parses(), 4u);
}

TEST_F(ConfigCacheTest, TextIsParsedOnceAndFailuresAreRemembered) {
  const std::string text = config("Ring");
  auto first = cache_.load(text);
  EXPECT_EQ(first.get(), cache_.load(text).get());
  EXPECT_EQ(cache_.parses(), 1u);
  EXPECT_EQ(algoOf(*cache_.load("  " + text)), Algo::kRing);
  EXPECT_EQ(cache_.parses(), 2u);  // "  TEXT" is another value of the variable
  std::filesystem::path bad = tmp_.write("bad.json", "{\"schema\": 1}");
  std::string e1 = errorOf([&] { cache_.load(bad.string()); });
  std::string e2 = errorOf([&] { cache_.load(bad.string()); });
  EXPECT_HAS(e1, bad.string());
  EXPECT_EQ(e1, e2);
  EXPECT_EQ(cache_.parses(), 3u);
  // A file that is not there is looked for again each time (it may be created).
  std::string missing = (tmp_.path() / "later.json").string();
  EXPECT_HAS(errorOf([&] { cache_.load(missing); }), "no such file");
  tmp_.write("later.json", config("Tree"));
  EXPECT_EQ(algoOf(*cache_.load(missing)), Algo::kTree);
  // CSV rules are cached apart from JSON of the same path.
  std::filesystem::path csv = tmp_.write("rules.conf", "allreduce,0,100,ring,simple,-1,-1,-1\n");
  EXPECT_EQ(cache_.loadExampleCsv(csv.string()).get(), cache_.loadExampleCsv(csv.string()).get());
  EXPECT_FALSE(cache_.loadExampleCsv(csv.string())->has_hardware);
}

TEST_F(ConfigCacheTest, ThreadsLoadingAtOnceParseOnce) {
  std::filesystem::path p = tmp_.write("tuner.json", config("Ring"));
  std::vector<std::shared_ptr<const TunerConfig>> got(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = cache_.load(p.string()); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g.get(), got[0].get());
  EXPECT_EQ(cache_.parses(), 1u);
}

}  // namespace
}  // namespace poolrun::tuner
