// Preemption end to end with real Open MPI and a real preemptor (poolctl acquire of a higher
// priority), on the simulated cluster as a sim: pool and as a poold's (ranks run here: --simulate):
// a job that checkpoints on SIGTERM is requeued and resumes from its checkpoint once the preemptor
// has gone; a job that ignores the signal is killed at its deadline and ends with exit status 75,
// its lease given back. The pool's grace is 4 s (POOLRUN_PREEMPT_GRACE, poold --preempt-grace) and
// any lease may be preempted at once (POOLRUN_MIN_RUNTIME=0, --min-runtime 0).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "poold_process.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using poolrun::test::slurp;

enum class PoolKind { kSim, kPoold };

std::string name(PoolKind kind) {
  return kind == PoolKind::kSim ? "Sim" : "Poold";
}
void PrintTo(PoolKind kind, std::ostream* os) {
  *os << name(kind);
}

class PreemptionTest : public ::testing::TestWithParam<PoolKind> {
 protected:
  // The pool's quotas file, if any (POOLRUN_QUOTAS, poold --quotas).
  virtual std::string quotas() const { return ""; }

  void SetUp() override {
    std::filesystem::create_directories(tmp_.path() / "ready");
    if (!quotas().empty()) quotas_ = tmp_.write("quotas", quotas());
    if (GetParam() == PoolKind::kSim) {
      pool_ = "sim:" + cluster_;
      return;
    }
    std::vector<std::string> args{"--cluster", cluster_, "--preempt-grace", "4", "--min-runtime", "0"};
    if (!quotas_.empty()) args.insert(args.end(), {"--quotas", quotas_.string()});
    poold_ = std::make_unique<poolrun::test::PooldProcess>(
        tmp_.path() / "poold", tmp_.writeSecret("tokens", poolrun::test::kTokens), args);
    pool_ = poold_->uri() + " --simulate";
  }

  // The variables of every command: the test's own state directory, the user (a sim: pool's owner,
  // a poold's token), the embedded pool's preemption times, Open MPI as root.
  std::string env(const std::string& user = "alice") const {
    return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 USER=" + user +
           (poold_ ? " POOLRUN_TOKEN=tok-" + user + "-0123456789"
                   : std::string(" POOLRUN_PREEMPT_GRACE=4 POOLRUN_MIN_RUNTIME=0") +
                         (quotas_.empty() ? "" : " POOLRUN_QUOTAS=" + quotas_.string())) +
           " POOLRUN_STATE_DIR=" + (tmp_.path() / "state").string() +
           " READY=" + (tmp_.path() / "ready").string() + " ";
  }

  // poolrun in the background: its standard error goes to the file err.
  pid_t startJob(const std::string& args, const std::string& program,
                 const std::string& shape = "-n 2 --gpus-per-node 1") {
    return poolrun::test::spawnShell(env() + "timeout 90 " + POOLRUN_BINARY + " --pool " + pool_ + " " +
                                     shape + " --job-dir " + job().string() + " " + args + " " + program +
                                     " >" + (tmp_.path() / "out").string() + " 2>" + err().string());
  }

  // poolctl as bob: `acquire` blocks until the GPUs are granted.
  poolrun::test::ProcessResult poolctl(const std::string& args) {
    std::string pool = poold_ ? poold_->uri() : pool_;
    return poolrun::test::runShell(env("bob") + "timeout 60 " + POOLCTL_BINARY + " --pool " + pool + " " +
                                   args);
  }
  // Bob's request for every GPU of the cluster, of a higher priority: it preempts the job. Its lease.
  std::string preemptEveryGpu() {
    poolrun::test::ProcessResult r = poolctl("--json acquire -n 16 --priority 10 --ttl 120");
    EXPECT_EQ(r.status, 0) << r.err << slurp(err());
    return r.status == 0 ? json::parse(r.out).value("id", "") : "";
  }

  json leases() {
    poolrun::test::ProcessResult r = poolctl("leases --json");
    EXPECT_EQ(r.status, 0) << r.err;
    return r.status == 0 ? json::parse(r.out) : json::array();
  }

  // Waits (bounded) until the job's standard error says `what`.
  bool saidWithin(const std::string& what, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (slurp(err()).find(what) == std::string::npos && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(100ms);
    return slurp(err()).find(what) != std::string::npos;
  }

  std::filesystem::path job() const { return tmp_.path() / "job"; }
  std::filesystem::path err() const { return tmp_.path() / "err"; }

  poolrun::test::TempDir tmp_;
  const std::string cluster_ = (poolrun::test::sourceDir() / "clusters/sim-ib.toml").string();
  std::unique_ptr<poolrun::test::PooldProcess> poold_;
  std::string pool_;  // as --pool takes it
  std::filesystem::path quotas_;
};

// Alice has no guarantee: all she holds is borrowed. Bob is guaranteed the whole cluster.
class QuotaReclaimTest : public PreemptionTest {
  std::string quotas() const override {
    return "owner alice guaranteed=0\nowner bob guaranteed=16 limit=16\n";
  }
};

// Bob takes back what alice borrowed, at the same priority, though her job is not --preemptible.
TEST_P(QuotaReclaimTest, AnOwnerWithinItsGuaranteeTakesBackBorrowedGpus) {
  const std::string rank =
      tmp_.write("rank.sh",
                 R"sh(trap 'echo stopped > $POOLRUN_JOB_DIR/stopped.$OMPI_COMM_WORLD_RANK; exit 0' TERM
touch $READY/$OMPI_COMM_WORLD_RANK
while true; do sleep 0.1; done
)sh")
          .string();
  poolrun::test::Reaped running{startJob("", "sh " + rank)};
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "ready", 2, 60s)) << slurp(err());
  poolrun::test::ProcessResult q = poolctl("--json quota");
  ASSERT_EQ(q.status, 0) << q.err;
  json use = json::parse(q.out);
  ASSERT_EQ(use.size(), 2u) << q.out;
  EXPECT_EQ(use[0].value("used", -1), 2) << q.out;
  EXPECT_EQ(use[0].value("borrowed", -1), 2) << q.out;

  poolrun::test::ProcessResult r = poolctl("--json acquire -n 16 --ttl 120");  // priority 0, as alice's
  ASSERT_EQ(r.status, 0) << r.err << slurp(err());
  int status = running.wait();
  const std::string text = slurp(err());
  EXPECT_EQ(status, 75) << text;
  EXPECT_NE(text.find("(16 GPUs, within the guarantee of 16 GPUs of owner bob): these GPUs were borrowed "
                      "beyond its owner's guarantee"),
            std::string::npos)
      << text;
  EXPECT_EQ(slurp(job() / "stopped.0"), "stopped\n") << "the ranks got SIGTERM\n" << text;
  json held = leases();
  ASSERT_EQ(held.size(), 1u) << held.dump();
  EXPECT_EQ(held[0].value("owner", ""), "bob");
  // Bob is at his limit: one GPU more waits; alone over it is refused (exit status 3).
  poolrun::test::ProcessResult over = poolctl("acquire -n 17 --wait 0");
  EXPECT_EQ(over.status, 3) << over.err;
  EXPECT_NE(over.err.find("owner bob may hold at most 16 GPUs (its quota's limit)"), std::string::npos)
      << over.err;
  EXPECT_EQ(poolctl("release " + held[0].value("id", "")).status, 0);
}

// The preemption tests, on each kind of pool; the rest on the sim: pool only.
class PreemptionSimTest : public PreemptionTest {};

// The checkpoint takes 1.5 s: longer than Open MPI's own kill sequence leaves a rank that mpirun
// passes SIGTERM on to (SIGTERM, then SIGKILL a second later), well within the pool's 4 s.
TEST_P(PreemptionTest, ACheckpointingJobIsRequeuedAndResumes) {
  const std::string rank = tmp_.write("rank.sh", R"sh(r=$OMPI_COMM_WORLD_RANK
ck=$POOLRUN_JOB_DIR/ckpt.$r
echo "restart=$POOLRUN_RESTART_COUNT torch=$TORCHELASTIC_RESTART_COUNT grace=$POOLRUN_PREEMPT_GRACE ckpt=$(cat $ck 2>/dev/null)" >> $POOLRUN_JOB_DIR/starts.$r
[ -f $ck ] && exit 0
[ "$POOLRUN_RESTART_COUNT" = 0 ] || exit 3
trap 'cp $POOLRUN_PREEMPT_DEADLINE_FILE $POOLRUN_JOB_DIR/deadline-seen.$r; sleep 1.5; echo step-7 > $ck; exit 0' TERM
touch $READY/$r
while true; do sleep 0.1; done
)sh")
                               .string();
  poolrun::test::Reaped running{startJob("--preemptible --requeue", "sh " + rank)};
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "ready", 2, 60s)) << slurp(err());

  const std::string preemptor = preemptEveryGpu();  // granted once the job has given its GPUs back
  ASSERT_FALSE(preemptor.empty());
  ASSERT_TRUE(saidWithin("poolrun: queued at position 1", 30s)) << slurp(err());
  ASSERT_EQ(poolctl("release " + preemptor).status, 0);
  int status = running.wait();

  const std::string text = slurp(err());
  EXPECT_EQ(status, 0) << text;
  EXPECT_EQ(poolrun::test::occurrences(text, " is preempted "), 1u) << text;
  EXPECT_NE(text.find(" is preempted for ticket "), std::string::npos) << text;
  EXPECT_NE(text.find(" of bob (priority 10, 16 GPUs): sent SIGTERM to the job, which is killed at "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("poolrun: requeued the preempted job (restart 1 of at most 10), with the same request "
                      "and job directory " +
                      job().string() + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("poolrun: waiting in the queue of "), std::string::npos) << text;
  EXPECT_EQ(text.find("had not ended by its deadline"), std::string::npos) << text;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(slurp(job() / ("starts." + std::to_string(r))),
              "restart=0 torch=0 grace=4 ckpt=\nrestart=1 torch=1 grace=4 ckpt=step-7\n")
        << "started, then restarted from its checkpoint\n"
        << text;
    std::string deadline = slurp(job() / ("deadline-seen." + std::to_string(r)));
    EXPECT_TRUE(deadline.size() > 1 && deadline.back() == '\n' &&
                deadline.find_first_not_of("0123456789") == deadline.size() - 1)
        << "the deadline file holds Unix seconds: '" << deadline << "'";
  }
  EXPECT_FALSE(std::filesystem::exists(job() / "preempt-deadline"))
      << "the restart does not see the old notice";
  EXPECT_TRUE(leases().empty()) << "every lease was given back";
}

TEST_P(PreemptionTest, AJobThatIgnoresTheSignalIsKilledAtTheDeadline) {
  const std::string rank =
      tmp_.write("rank.sh",
                 "trap '' TERM\ntouch $READY/$OMPI_COMM_WORLD_RANK\nwhile true; do sleep 0.1; done\n")
          .string();
  poolrun::test::Reaped running{startJob("--preemptible", "sh " + rank)};
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "ready", 2, 60s)) << slurp(err());

  const std::string preemptor = preemptEveryGpu();
  ASSERT_FALSE(preemptor.empty());
  int status = running.wait();
  const std::string text = slurp(err());
  EXPECT_EQ(status, 75) << text;
  EXPECT_EQ(poolrun::test::occurrences(text, " is preempted "), 1u) << text;
  EXPECT_NE(text.find("poolrun: the preempted job had not ended by its deadline: killing it (SIGKILL)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("requeued"), std::string::npos) << "no --requeue\n" << text;
  EXPECT_NE(
      text.find("poolrun: the job was preempted and has ended; exit status 75 (try again later: rerun it, "
                "or give --requeue to have poolrun queue it again itself)\n"),
      std::string::npos)
      << "the closing line\n"
      << text;
  EXPECT_EQ(text.find("could not release"), std::string::npos) << text;
  EXPECT_EQ(text.find("poolrun: rank "), std::string::npos) << "the killed ranks are no failure\n" << text;
  json held = leases();
  ASSERT_EQ(held.size(), 1u) << held.dump() << "\n" << text;
  EXPECT_EQ(held[0].value("id", ""), preemptor) << "the job's own lease was given back";
  EXPECT_EQ(poolctl("release " + preemptor).status, 0);
}

// An elastic job (-n 2:4) with real Open MPI: started on the 2 GPUs bob leaves free, restarted on 4
// when bob's job ends, and on 2 again when bob asks for 14 GPUs at a higher priority (a shrink, not
// a preemption: bob's request starts once the job has given 2 back). Each start's world size and
// restart count are what the ranks see; each stop is a SIGTERM the ranks trap (their checkpoint).
TEST_P(PreemptionTest, AnElasticJobGrowsWhenGpusComeFreeAndShrinksForAHigherPriority) {
  const std::string rank = tmp_.write("rank.sh", R"sh(r=$OMPI_COMM_WORLD_RANK
echo "size=$OMPI_COMM_WORLD_SIZE restart=$POOLRUN_RESTART_COUNT torch=$TORCHELASTIC_RESTART_COUNT" >> $POOLRUN_JOB_DIR/starts.$r
[ "$POOLRUN_RESTART_COUNT" = 2 ] && exit 0
trap 'echo "stopped at restart $POOLRUN_RESTART_COUNT" >> $POOLRUN_JOB_DIR/stops.$r; exit 0' TERM
touch $READY/$POOLRUN_RESTART_COUNT.$r
while true; do sleep 0.1; done
)sh")
                               .string();
  poolrun::test::ProcessResult most = poolctl("--json acquire -n 14 --ttl 120");
  ASSERT_EQ(most.status, 0) << most.err;
  const std::string bobs = json::parse(most.out).value("id", "");
  poolrun::test::Reaped running{startJob("--resize-interval 0", "sh " + rank, "-n 2:4")};
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "ready", 2, 60s)) << slurp(err());

  ASSERT_EQ(poolctl("release " + bobs).status, 0);  // the job's lease grows to 4 at once
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "ready", 6, 60s)) << slurp(err());
  poolrun::test::ProcessResult listed = poolctl("leases");
  EXPECT_NE(listed.out.find("elastic 2:4, resized 1x"), std::string::npos) << listed.out;

  poolrun::test::ProcessResult urgent = poolctl("--json acquire -n 14 --priority 10 --ttl 120");
  ASSERT_EQ(urgent.status, 0) << urgent.err << slurp(err());
  int status = running.wait();
  const std::string text = slurp(err());
  EXPECT_EQ(status, 0) << text;
  EXPECT_NE(text.find("poolrun: elastic lease "), std::string::npos) << text;
  EXPECT_EQ(poolrun::test::occurrences(text, " changes size ("), 2u) << text;
  EXPECT_NE(
      text.find(" changes size (it holds 4 GPUs now): sent SIGTERM to the job, to restart it at the new "
                "size; it is killed at "),
      std::string::npos)
      << text;
  EXPECT_NE(text.find(" changes size (shrunk from 4 to 2 GPUs for ticket "), std::string::npos) << text;
  EXPECT_NE(text.find("poolrun: restarting the job on 4 GPUs ("), std::string::npos) << text;
  EXPECT_NE(text.find("poolrun: restarting the job on 2 GPUs ("), std::string::npos) << text;
  EXPECT_EQ(text.find(" is preempted"), std::string::npos) << "a shrink, not a preemption\n" << text;
  EXPECT_EQ(text.find("had not ended by its deadline"), std::string::npos) << text;
  EXPECT_EQ(slurp(job() / "starts.0"),
            "size=2 restart=0 torch=0\nsize=4 restart=1 torch=1\nsize=2 restart=2 torch=2\n")
      << text;
  EXPECT_EQ(slurp(job() / "starts.3"), "size=4 restart=1 torch=1\n") << text;
  EXPECT_EQ(slurp(job() / "stops.1"), "stopped at restart 0\nstopped at restart 1\n") << text;
  json held = leases();
  ASSERT_EQ(held.size(), 1u) << held.dump() << "\n" << text;
  EXPECT_EQ(held[0].value("id", ""), json::parse(urgent.out).value("id", ""))
      << "the job's lease was given back";
  EXPECT_EQ(poolctl("release " + held[0].value("id", "")).status, 0);
}

// The elastic DDP example of docs/examples.md and docs/elastic.md runs as written there
// (examples/03-pytorch/elastic_demo.sh) and shows a resize: 2 ranks, the lease grown to 4, a
// checkpoint at the signal, the job resumed on 4 from that step.
TEST(ElasticDemo, RunsAsTheDocsShowIt) {
  POOLRUN_TEST_TORCH_PYTHON(python);
  if (python != "/usr/bin/python3") GTEST_SKIP() << "the demo runs /usr/bin/python3, which has no torch here";
  poolrun::test::TempDir tmp;
  const std::filesystem::path build = std::filesystem::path(POOLRUN_BINARY).parent_path().parent_path();
  poolrun::test::ProcessResult r = poolrun::test::runShell(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_STATE_DIR=" +
      tmp.path().string() + " timeout 180 " +
      (poolrun::test::sourceDir() / "examples/03-pytorch/elastic_demo.sh").string() + " " + build.string());
  const std::string all = r.out + r.err;
  ASSERT_EQ(r.status, 0) << all;
  for (const char* line :
       {"poolrun: elastic lease L", ": 2 GPUs (2 to 4)\n",
        " changes size (it holds 4 GPUs now): sent SIGTERM to the job, to restart it at the new size",
        "ddp_train.py: stopped at step ", "poolrun: restarting the job on 4 GPUs (",
        "ddp_train.py: resumed from ", "; 4 ranks now, restart 1\n", "ddp_train.py: 4 ranks, backend gloo, ",
        "same weights on every rank: True\n"})
    EXPECT_NE(all.find(line), std::string::npos) << line << "\n" << all;
  EXPECT_EQ(all.find("Unable to resolve hostname"), std::string::npos) << "gloo is told loopback\n" << all;
}

// PyTorch as a real elastic client: examples/03-pytorch/ddp_train.py (gloo on the CPU) starts on 2
// ranks, writes its checkpoint in the job directory at the signal when the lease grows to 4, is
// started again on 4 and trains to the end from the checkpoint. A step is full-batch descent
// whatever the world size, so every step's loss must be the one a run that never stopped computes.
TEST_P(PreemptionSimTest, APytorchJobResumesFromItsCheckpointWhenItsLeaseGrows) {
  POOLRUN_TEST_TORCH_PYTHON(python);
  const std::string script = (poolrun::test::sourceDir() / "examples/03-pytorch/ddp_train.py").string();
  const int steps = 60;
  const std::string train = python + " " + script + " --steps " + std::to_string(steps) + " --out " +
                            (tmp_.path() / "weights.json").string() + " --log ";
  poolrun::test::ProcessResult most = poolctl("--json acquire -n 14 --ttl 120");
  ASSERT_EQ(most.status, 0) << most.err;
  const std::filesystem::path log = tmp_.path() / "steps.jsonl";
  poolrun::test::Reaped running{
      startJob("--resize-interval 0", train + log.string() + " --step-seconds 0.1", "-n 2:4")};
  // Some steps on 2 ranks first (bounded: torch takes seconds to start on 2 cores).
  const auto started = [&] { return poolrun::test::occurrences(slurp(log), "\n") >= 5; };
  for (int i = 0; i < 900 && !started(); ++i) std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(started()) << slurp(err()) << slurp(tmp_.path() / "out");
  ASSERT_EQ(poolctl("release " + json::parse(most.out).value("id", "")).status, 0);  // it grows to 4
  const int status = running.wait();
  const std::string said = slurp(err()), printed = slurp(tmp_.path() / "out");
  ASSERT_EQ(status, 0) << said << printed;
  EXPECT_NE(said.find(" changes size (it holds 4 GPUs now): sent SIGTERM to the job"), std::string::npos)
      << said;
  EXPECT_NE(said.find("poolrun: restarting the job on 4 GPUs ("), std::string::npos) << said;
  EXPECT_NE(printed.find("ddp_train.py: resumed from " + (job() / "ddp_train.ckpt").string() + " at step "),
            std::string::npos)
      << printed;

  // The steps, each once and in order: on 2 ranks before the restart, on 4 after it.
  std::vector<json> lines;
  std::istringstream in(slurp(log));
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), static_cast<size_t>(steps)) << slurp(log);
  size_t before = 0;
  while (before < lines.size() && lines[before]["world"] == 2) ++before;
  EXPECT_GE(before, 5u) << slurp(log);
  EXPECT_LT(before, lines.size()) << "it never ran on 4 ranks\n" << slurp(log);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], i + 1) << lines[i].dump();
    EXPECT_EQ(lines[i]["world"], i < before ? 2 : 4) << lines[i].dump();
    EXPECT_EQ(lines[i]["restart"], i < before ? 0 : 1) << lines[i].dump();
  }
  const json weights = json::parse(slurp(tmp_.path() / "weights.json"));
  EXPECT_EQ(weights["ranks"], 4);
  EXPECT_EQ(weights["resumed_from"], before);
  EXPECT_TRUE(weights["same_on_every_rank"].get<bool>());

  // A run of the same steps that never stopped, on 2 ranks: the same loss at every step.
  const std::filesystem::path plain = tmp_.path() / "plain.jsonl";
  poolrun::test::ProcessResult reference = poolrun::test::runShell(
      env() + "timeout 90 " + POOLRUN_BINARY + " --pool " + pool_ + " -n 2 --job-dir " +
      (tmp_.path() / "plain-job").string() + " " + train + plain.string() + " --checkpoint ''");
  // Where a run that never ends stopped (once in CI, 2026-12-02, it ran past the 90 s; 10 runs alone
  // took 12-14 s each): the steps it logged and what the job said.
  ASSERT_EQ(reference.status, 0) << reference.err << reference.out << "steps logged:\n" << slurp(plain);
  std::istringstream again(slurp(plain));
  size_t i = 0;
  for (std::string line; std::getline(again, line) && i < lines.size(); ++i) {
    const double expected = json::parse(line)["loss"].get<double>();
    EXPECT_NEAR(lines[i]["loss"].get<double>(), expected, 1e-9 * expected) << "step " << i + 1;
  }
  EXPECT_EQ(i, lines.size());
}

// What every rank is told at its start, in the job directory's run.sh; --preempt-signal's spellings.
TEST_P(PreemptionSimTest, RanksAreToldTheDeadlineFileGraceAndRestartCount) {
  for (const char* sig : {"TERM", "SIGTERM", "sigusr1", "usr2", "10", "1"}) {
    SCOPED_TRACE(sig);
    poolrun::test::ProcessResult r =
        poolrun::test::runShell(env() + "timeout 60 " + POOLRUN_BINARY + " --pool sim:" + cluster_ +
                                " -n 2 --preemptible --requeue " + "--preempt-signal " + sig +
                                " --dry-run --job-dir " + job().string() + " /bin/true");
    ASSERT_EQ(r.status, 0) << r.err;
  }
  const std::string script = slurp(job() / "run.sh");
  EXPECT_NE(
      script.find("export POOLRUN_PREEMPT_DEADLINE_FILE=" + (job() / "preempt-deadline").string() + "\n"),
      std::string::npos)
      << script;
  EXPECT_NE(script.find("export POOLRUN_PREEMPT_GRACE=4\n"), std::string::npos) << script;
  EXPECT_NE(script.find("export POOLRUN_RESTART_COUNT=0\n"), std::string::npos) << script;
  EXPECT_NE(script.find("export TORCHELASTIC_RESTART_COUNT=0\n"), std::string::npos) << script;
  EXPECT_NE(script.find(" -x POOLRUN_RESTART_COUNT "), std::string::npos) << script;
}

// --requeue restarts a job the pool preempted, not a program that exits 75 of its own accord.
TEST_P(PreemptionSimTest, AJobThatExits75ItselfIsNotRequeued) {
  poolrun::test::ProcessResult r = poolrun::test::runShell(
      env() + "timeout 60 " + POOLRUN_BINARY + " --pool sim:" + cluster_ +
      " -n 2 --preemptible --requeue --job-dir " + job().string() + " sh -c 'exit 75'");
  EXPECT_EQ(r.status, 75) << r.err;
  EXPECT_EQ(r.err.find("requeued"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("was preempted"), std::string::npos) << "it exited 75 itself\n" << r.err;
}

// The embedded pools' settings from the environment: a bad one is named with its value.
TEST_P(PreemptionSimTest, BadPoolSettingsInTheEnvironmentAreNamed) {
  struct Case {
    std::string env, says;
  };
  const std::vector<Case> cases = {
      {"POOLRUN_PREEMPT_GRACE=0", "POOLRUN_PREEMPT_GRACE"},
      {"POOLRUN_PREEMPT_GRACE=abc", "POOLRUN_PREEMPT_GRACE"},
      {"POOLRUN_MIN_RUNTIME=-5", "POOLRUN_MIN_RUNTIME"},
      {"POOLRUN_MIN_RUNTIME=99999999999999999999", "POOLRUN_MIN_RUNTIME"},
      {"POOLRUN_QUOTAS=/dev/zero", "POOLRUN_QUOTAS: /dev/zero"},
      {"POOLRUN_QUOTAS=" + tmp_.write("bad-quotas", "owner bob guaranteed=x\n").string(), "bad-quotas:1"},
      {"POOLRUN_ACCOUNTS=/dev/zero", "POOLRUN_ACCOUNTS: /dev/zero"},
      {"POOLRUN_ACCOUNTS=" + tmp_.write("bad-accounts.toml", "[accounts.a]\nshares = -1\n").string(),
       "POOLRUN_ACCOUNTS: " + (tmp_.path() / "bad-accounts.toml").string() + ":2: [accounts.a] shares"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.env);
    poolrun::test::ProcessResult r = poolrun::test::runShell(env() + c.env + " timeout 60 " + POOLCTL_BINARY +
                                                             " --pool sim:" + cluster_ + " status");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

// The embedded pools' account tree (POOLRUN_ACCOUNTS): poolrun --account charges the job's lease to
// it, the ledger reports it, and an account the user is not in is refused with what to do.
TEST_P(PreemptionSimTest, PoolrunChargesTheAccountItNames) {
  const std::string accounts =
      "POOLRUN_ACCOUNTS=" +
      tmp_.write("accounts.toml",
                 "[accounts.physics]\nusers = [\"alice\"]\n[accounts.theory]\nusers = [\"alice\"]\n"
                 "[accounts.biology]\nusers = [\"bob\"]\n[users.alice]\ndefault = \"physics\"\n")
          .string() +
      " ";
  const std::string run =
      env() + accounts + "timeout 60 " + POOLRUN_BINARY + " --pool sim:" + cluster_ + " -n 1 ";
  poolrun::test::ProcessResult r = poolrun::test::runShell(run + "--account theory /bin/true");
  EXPECT_EQ(r.status, 0) << r.err;
  r = poolrun::test::runShell(run + "/bin/true");
  EXPECT_EQ(r.status, 0) << r.err;
  r = poolrun::test::runShell(env() + accounts + POOLCTL_BINARY + " --pool sim:" + cluster_ +
                              " --json usage --by account");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  std::vector<std::string> names;
  for (const nlohmann::json& row : rows) names.push_back(row["name"]);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"physics", "theory"})) << r.out;
  r = poolrun::test::runShell(run + "--account biology /bin/true");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("user alice may not charge account biology (its accounts: physics,theory)"),
            std::string::npos)
      << r.err;
  r = poolrun::test::runShell(run + "--account 'bad name' /bin/true");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--account 'bad name': only letters"), std::string::npos) << r.err;
}

// The embedded pools' reservations: an administrator (the default role there) keeps a node; a bad
// --nodes is named as the option it came from; a user may not reserve.
TEST_P(PreemptionSimTest, EmbeddedPoolsReserveAndNameABadNodeList) {
  const std::string ctl = env() + POOLCTL_BINARY + " --pool sim:" + cluster_ + " ";
  poolrun::test::ProcessResult r = poolrun::test::runShell(ctl + "reserve --nodes 'ib[01-' --duration 1h");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("poolctl: error: --nodes: "), std::string::npos) << r.err;
  r = poolrun::test::runShell(ctl + "--role user reserve --nodes ib01 --duration 1h --name fix");
  EXPECT_NE(r.status, 0) << "administrators only";
  EXPECT_NE(r.err.find("make reservations"), std::string::npos) << r.err;
  r = poolrun::test::runShell(ctl + "reserve --nodes ib01 --duration 1h --name fix");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("reservation fix: 1 node (ib01) from "), std::string::npos) << r.out;
  r = poolrun::test::runShell(ctl + "reservations");
  EXPECT_NE(r.out.find("fix"), std::string::npos) << r.out;
  EXPECT_EQ(poolrun::test::runShell(ctl + "unreserve fix").status, 0);
}

TEST_P(PreemptionSimTest, SlurmAllocationsKeepTheirSize) {
  poolrun::test::ProcessResult r =
      poolrun::test::runShell(env() + "timeout 60 " + POOLRUN_BINARY + " --pool slurm -n 1:4 /bin/true");
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("poolrun: error: -n 1:4: an elastic job is for the pools poolrun manages (local, "
                       "sim:FILE, http://); a Slurm allocation keeps its size"),
            std::string::npos)
      << r.err;
}

TEST_P(PreemptionSimTest, SlurmPoolsKeepSlurmsOwnRules) {
  for (const char* option : {"--preemptible", "--requeue"}) {
    poolrun::test::ProcessResult r = poolrun::test::runShell(env() + "timeout 60 " + POOLRUN_BINARY +
                                                             " --pool slurm -n 1 " + option + " /bin/true");
    EXPECT_EQ(r.status, 125) << r.err;
    EXPECT_NE(
        r.err.find("poolrun: error: " + std::string(option) +
                   " is for the pools poolrun manages (local, sim:FILE, http://); a Slurm allocation is "
                   "preempted and requeued by Slurm's own rules"),
        std::string::npos)
        << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Pools, PreemptionTest, ::testing::Values(PoolKind::kSim, PoolKind::kPoold),
                         [](const ::testing::TestParamInfo<PoolKind>& p) { return name(p.param); });
// poold reads its quotas file again when it changes; a bad version is named and the quotas before
// it kept.
TEST_P(QuotaReclaimTest, PooldReadsItsQuotasAgainAndKeepsThemOverABadFile) {
  if (!poold_) GTEST_SKIP() << "poold only (the embedded pools read POOLRUN_QUOTAS at every command)";
  auto guaranteed = [&](const std::string& owner) {
    poolrun::test::ProcessResult q = poolctl("--json quota");
    if (q.status != 0) return -2;
    for (const json& u : json::parse(q.out))
      if (u.value("name", "") == owner) return u.value("guaranteed", -1);
    return -1;
  };
  auto within = [&](const std::string& owner, int want) {
    for (int i = 0; i < 100 && guaranteed(owner) != want; ++i) std::this_thread::sleep_for(100ms);
    return guaranteed(owner) == want;
  };
  ASSERT_EQ(guaranteed("bob"), 16);
  tmp_.write("quotas", "owner bob guaranteed=4\n");
  EXPECT_TRUE(within("bob", 4)) << "the new file was not read";
  tmp_.write("quotas", "owner bob guaranteed=lots\n");
  std::this_thread::sleep_for(1s);  // four ticks
  EXPECT_EQ(guaranteed("bob"), 4) << "a bad file replaced good quotas";
  tmp_.write("quotas", "owner bob guaranteed=6\nowner carol guaranteed=1\n");
  EXPECT_TRUE(within("carol", 1));
}

INSTANTIATE_TEST_SUITE_P(Pools, QuotaReclaimTest, ::testing::Values(PoolKind::kSim, PoolKind::kPoold),
                         [](const ::testing::TestParamInfo<PoolKind>& p) { return name(p.param); });
INSTANTIATE_TEST_SUITE_P(Pools, PreemptionSimTest, ::testing::Values(PoolKind::kSim),
                         [](const ::testing::TestParamInfo<PoolKind>& p) { return name(p.param); });

}  // namespace
