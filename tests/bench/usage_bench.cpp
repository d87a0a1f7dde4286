// The usage ledger at a site's size (issue 44's aim: a report over 1,000,000 lease rows in under a
// second): a report by owner, node and job, with and without a range; the accounting interval's
// checkpoint over that many rows; the SQLite state file's write and load of them; the memory they
// take. 1,000,000 ended rows of 1,000 owners, 100 accounts and 12,500 nodes over 30 days.
// Prints, asserts nothing (label bench).

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <random>

#include "poolrun/pool/state.hpp"
#include "poolrun/pool/store.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

constexpr size_t kRows = 1'000'000;

TimePoint base() {
  return TimePoint(std::chrono::hours(24 * 20'000));
}

// Each of the rows, made one at a time (so that what the ledger takes is what RSS grows by).
template <typename F>
void eachRow(F f) {
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < kRows; ++i) {
    UsageRecord r;
    r.id = i + 1;
    r.lease = "L" + std::to_string(10'000'000'000'000'000ULL + i);
    r.job = i % 3 == 0 ? "J" + std::to_string(i / 3) : "";
    const size_t owner = rng() % 1000;
    r.owner = "user" + std::to_string(owner);
    r.account = "acct" + std::to_string(owner % 100);
    r.node = "node" + std::to_string(rng() % 12'500);
    r.model = "NVIDIA H100 80GB HBM3";
    r.start = base() + std::chrono::seconds(rng() % (30 * 86'400));
    r.end = r.start + std::chrono::seconds(60 + rng() % 86'400);
    r.gpus = 8;
    r.allocated_s = 8.0 * std::chrono::duration<double>(r.end - r.start).count();
    r.used_s = r.allocated_s * 0.6;
    r.idle_s = r.allocated_s * 0.1;
    r.energy_j = r.allocated_s * 500;
    r.ended = "released";
    f(r);
  }
}

PoolState& ledger() {
  static PoolState* state = [] {
    auto* s = new PoolState;
    struct rusage before {};
    getrusage(RUSAGE_SELF, &before);
    eachRow([&](const UsageRecord& r) { s->loadUsage(r); });
    s->finishUsageLoad();
    struct rusage after {};
    getrusage(RUSAGE_SELF, &after);
    std::printf("ledger of %zu rows: max RSS grew by %ld MiB\n", kRows,
                (after.ru_maxrss - before.ru_maxrss) / 1024);
    return s;
  }();
  return *state;
}

void BM_UsageReport(benchmark::State& st) {
  const PoolState& s = ledger();
  UsageQuery q;
  q.by = static_cast<UsageBy>(st.range(0));
  if (st.range(1) == 1) {
    q.since = base() + std::chrono::hours(24 * 10);
    q.until = base() + std::chrono::hours(24 * 17);
  }
  size_t lines = 0;
  for (auto _ : st) lines = s.usage().report(q, base() + std::chrono::hours(24 * 40)).size();
  st.counters["lines"] = static_cast<double>(lines);
}
// by owner, account, job, node; all time (0) or one week (1)
BENCHMARK(BM_UsageReport)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Iterations(3)->Unit(benchmark::kMillisecond);

// The accounting interval's work over the whole ledger when nothing is old enough to fold: within
// the hour (0: the running rows alone), and an hour apart (1: days and retention walk every row).
void BM_UsageCheckpoint(benchmark::State& st) {
  PoolState& s = ledger();
  static TimePoint at = base() + std::chrono::hours(24 * 31);
  for (auto _ : st) {
    at += st.range(0) == 1 ? std::chrono::minutes(61) : std::chrono::minutes(1);
    s.accountUsage(at);
    benchmark::DoNotOptimize(s.takeDirty());
  }
}
BENCHMARK(BM_UsageCheckpoint)->Arg(1)->Arg(0)->Iterations(5)->Unit(benchmark::kMillisecond);

// The state file: the rows written in one transaction, then a whole load (poold's start).
void BM_UsageStore(benchmark::State& st) {
  test::TempDir dir;
  PoolState& s = ledger();
  Dirty all;
  s.usage().forEach([&](const UsageRecord& r) { all.usage.insert(r.id); });
  all.counters = true;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      Store store(dir.path() / "pool.sqlite", Durability::kNormal);
      store.begin();
      store.write(s, all);
      store.commit();
    }
    const auto t1 = std::chrono::steady_clock::now();
    PoolState loaded;
    Store(dir.path() / "pool.sqlite", Durability::kNormal).load(loaded);
    const auto t2 = std::chrono::steady_clock::now();
    st.counters["write_s"] = std::chrono::duration<double>(t1 - t0).count();
    st.counters["load_s"] = std::chrono::duration<double>(t2 - t1).count();
    st.counters["rows"] = static_cast<double>(loaded.usage().size());
    st.counters["file_MiB"] =
        static_cast<double>(std::filesystem::file_size(dir.path() / "pool.sqlite")) / (1 << 20);
  }
}
BENCHMARK(BM_UsageStore)->Iterations(1)->Unit(benchmark::kSecond);

// Fair share (docs/fairshare.md): an accounts file of Arg accounts, one user each, parsed and
// checked (poold reads it at start and at each change).
void BM_AccountsFile(benchmark::State& state) {
  std::string text;
  for (int64_t i = 0; i < state.range(0); ++i)
    text += "[accounts.a" + std::to_string(i) + "]\nshares = " + std::to_string(1 + i % 9) +
            "\nusers = [\"u" + std::to_string(i) + "\"]\n";
  for (auto _ : state) benchmark::DoNotOptimize(parseAccounts(text, "bench"));
  state.counters["MiB"] = static_cast<double>(text.size()) / (1 << 20);
}
BENCHMARK(BM_AccountsFile)->Arg(1'000)->Arg(100'000)->Iterations(3)->Unit(benchmark::kMillisecond);

// Every fair-share factor of a tree of 1,000 accounts (100 under the root, 9 under each) and 10,000
// users with decayed usage: what a scheduling pass computes first where the pool has accounts.
void BM_FairShareFactors(benchmark::State& state) {
  std::string text;
  for (int a = 0; a < 1000; ++a) {
    text += "[accounts.a" + std::to_string(a) + "]\nshares = " + std::to_string(1 + a % 7) + "\n";
    if (a % 10 != 0) text += "parent = \"a" + std::to_string(a - a % 10) + "\"\n";
    text += "users = [";
    for (int u = 0; u < 10; ++u)
      text += std::string(u ? ", " : "") + "\"u" + std::to_string(a * 10 + u) + "\"";
    text += "]\n";
  }
  const Accounts accounts = parseAccounts(text, "bench");
  DecayedUsage usage;
  for (int u = 0; u < 10'000; ++u)
    usage.push_back({{"a" + std::to_string(u / 10), "u" + std::to_string(u)}, 3600.0 * (u % 97)});
  for (auto _ : state) {
    FairShare shares(accounts, usage);
    benchmark::DoNotOptimize(shares.rows().data());
  }
  state.SetLabel("1,000 accounts, 10,000 users");
}
BENCHMARK(BM_FairShareFactors)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace poolrun::pool

BENCHMARK_MAIN();
