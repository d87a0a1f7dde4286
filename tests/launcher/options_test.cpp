// poolrun and `poolrun plan` refuse bad option values the same way: the option, the value and the
// range, exit status 2, before a lease is taken or a job directory written. Every run is a
// --dry-run on a simulated cluster under timeout(1), so that a value accepted by mistake ends.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "poolrun/common/text.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

struct OptionCase {
  std::string args;
  std::string expected;  // the first line of standard error
};

std::string firstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

TEST(OptionsTest, RunRefusesBadValuesBeforeLeasing) {
  poolrun::test::TempDir tmp;
  const std::string cluster = (poolrun::test::sourceDir() / "clusters" / "sim-ib.toml").string();
  const std::string job = (tmp.path() / "job").string();
  const std::vector<OptionCase> cases = {
      {"-n 2 --priority 2147483648",
       "poolrun: error: --priority 2147483648: out of range (-1000000 to 1000000)"},
      {"-n 2 --priority -2147483649",
       "poolrun: error: --priority -2147483649: out of range (-1000000 to 1000000)"},
      {"-n 2 --wait -1", "poolrun: error: --wait -1: out of range (0 to 31536000)"},
      {"-n 2 --wait 1e3", "poolrun: error: --wait 1e3: not a whole number (0 to 31536000)"},
      {"-n 2 --timeout -5", "poolrun: error: --timeout -5: out of range (0 to 31536000)"},
      {"-n 2 --timeout inf", "poolrun: error: --timeout inf: not a whole number (0 to 31536000)"},
      {"-n 2 --lease-ttl 2", "poolrun: error: --lease-ttl 2: out of range (3 to 86400)"},
      {"-n 2 --lease-ttl nan", "poolrun: error: --lease-ttl nan: not a whole number (3 to 86400)"},
      {"-n 2 --roce-tc 999", "poolrun: error: --roce-tc 999: out of range (0 to 255)"},
      {"-n 2 --roce-tc -1", "poolrun: error: --roce-tc -1: out of range (0 to 255)"},
      {"-n 0", "poolrun: error: -n 0: out of range (1 to 1000000)"},
      {"-n 4294967298", "poolrun: error: -n 4294967298: out of range (1 to 1000000)"},
      {"-n 2 --gpus-per-node -1", "poolrun: error: --gpus-per-node -1: out of range (0 to 1024)"},
      {"-n 2 -x --", "poolrun: error: -x needs a value: VAR[=VALUE], a variable for every rank"},
      {"-n 2 --token-file --",
       "poolrun: error: --token-file needs a value: FILE, bearer token for http and https pools"},
      {"-n 2 --wait --", "poolrun: error: --wait needs a value: SECONDS, seconds to wait in the queue"},
      {"-np --", "poolrun: error: -np needs a value: N|MIN:MAX, the number of ranks, one per GPU"},
      {"-n 4:2", "poolrun: error: -n '4:2': MIN:MAX with MAX at least MIN"},
      {"-n 4:", "poolrun: error: -n '4:': MIN:MAX needs both numbers (-n 4:16, say)"},
      {"-n :4", "poolrun: error: -n ':4': MIN:MAX needs both numbers (-n 4:16, say)"},
      {"-n 2:x", "poolrun: error: -n x: not a whole number (1 to 1000000)"},
      {"-n 0:4", "poolrun: error: -n 0: out of range (1 to 1000000)"},
      {"-n 2:4:8", "poolrun: error: -n 4:8: not a whole number (1 to 1000000)"},
      {"-n 2 --resize-interval 60",
       "poolrun: error: --resize-interval is for an elastic job (-n MIN:MAX); -n 2 is of a fixed size"},
      {"-n 2:4 --resize-interval -1", "poolrun: error: --resize-interval -1: out of range (0 to 2592000)"},
      {"-np 0", "poolrun: error: -n 0: out of range (1 to 1000000)"},
      {"-n 2 --tag-output --launcher srun",
       "poolrun: error: --tag-output is for mpirun, and --launcher srun starts the ranks with srun"},
      {"-n 2 --tuner maybe", "poolrun: error: --tuner 'maybe': use on or off"},
      {"-n 2 --launch rsh", "poolrun: error: --launch 'rsh': use auto, agents or ssh"},
      {"-n 2 --launch ''", "poolrun: error: the argument for option '--launch'"},
      {"-n 2 --fabric myrinet", "poolrun: error: unknown fabric 'myrinet'"},
      {"-n 2 --preempt-signal KILL",
       "poolrun: error: --preempt-signal 'KILL': use TERM (the default), INT, HUP, USR1 or USR2, by name "
       "(SIGTERM, TERM) or number (15, 2, 1, 10, 12); a job cannot catch KILL or STOP, so it would get no "
       "grace"},
      {"-n 2 --preempt-signal 9", "poolrun: error: --preempt-signal '9': use TERM (the default), INT, HUP"},
      {"-n 2 --preempt-signal SIGSTOP", "poolrun: error: --preempt-signal 'SIGSTOP': use TERM (the default)"},
      {"-n 2 --preempt-signal 99", "poolrun: error: --preempt-signal '99': use TERM (the default)"},
      {"-n 2 --preempt-signal 015", "poolrun: error: --preempt-signal '015': use TERM (the default)"},
      {"-n 2 --preempt-signal SIGSIGTERM", "poolrun: error: --preempt-signal 'SIGSIGTERM': use TERM"},
      {"-n 2 --preempt-signal --",
       "poolrun: error: --preempt-signal needs a value: SIG, what a preempted job is sent"},
      {"-n 2 --mem-per-gpu 4G", "poolrun: error: --mem-per-gpu is for a detached job: add --detach"},
      {"-n 2 --retries -1", "poolrun: error: --retries -1: out of range (0 to 100)"},
      {"-n 2 --retries 101", "poolrun: error: --retries 101: out of range (0 to 100)"},
      {"-n 2 --retries x", "poolrun: error: --retries x: not a whole number (0 to 100)"},
      {"-n 2 --retries 1 --detach", "poolrun: error: --retries with --detach: not yet"},
      {"-n 2 --exclude ''", "poolrun: error: the argument for option '--exclude'"},
      {"-n 2 --exclude ,", "poolrun: error: --exclude: bad hostlist ','"},
      {"-n 2 --exclude 'n[01-'", "poolrun: error: --exclude: "},
      {"-n 2 --exclude 'n[1-2000]'", "poolrun: error: --exclude: "},
      {"-n 2 --exclude 'a b'", "poolrun: error: --exclude 'a b': "},
      {"-n 2 --mem-per-gpu 0",
       "poolrun: error: --mem-per-gpu '0': give a size such as 4096 (MiB), 512M, 80G"},
      {"-n 2 --mem-per-gpu 17T", "poolrun: error: --mem-per-gpu '17T': give a size"},
      {"-n 2 --mem-per-gpu 4GB", "poolrun: error: --mem-per-gpu '4GB': give a size"},
      {"-n 2 --mem-per-gpu -4G", "poolrun: error: --mem-per-gpu '-4G': give a size"},
      {"-n 2 --mem-per-gpu 99999999999999999999", "poolrun: error: --mem-per-gpu '99999999999999999999'"},
      {"-n 2 --mem-per-gpu 4X", "poolrun: error: --mem-per-gpu '4X': give a size"},
      {"-n 2 --name \"$(printf 'a\\nb')\"",
       "poolrun: error: --name 'a\\x0ab': control character \\x0a at byte 1 (not allowed)"},
  };
  for (const OptionCase& c : cases) {
    poolrun::test::ProcessResult r =
        poolrun::test::runShell("POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() + " timeout 60 " +
                                std::string(POOLRUN_BINARY) + " --pool sim:" + cluster +
                                " --dry-run --job-dir " + job + " " + c.args + " /bin/true");
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err).substr(0, c.expected.size()), c.expected) << c.args << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(job + "/plan.json")) << c.args << ": a plan was written";
    std::filesystem::remove_all(job);
  }
  // What the pool cannot do is refused as the pool is opened (125, as the pool's refusals), before
  // a lease: --launch agents where no agent starts daemons.
  poolrun::test::ProcessResult r = poolrun::test::runShell(
      "POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() + " timeout 60 " + std::string(POOLRUN_BINARY) +
      " --pool sim:" + cluster + " --dry-run --job-dir " + job + " -n 2 --launch agents /bin/true");
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_EQ(firstLine(r.err),
            "poolrun: error: --launch agents is for a poold pool's nodes, whose agents start "
            "the daemons (pool here: 'sim:" +
                cluster + "'); leave it out");
  EXPECT_FALSE(std::filesystem::exists(job + "/plan.json")) << "a plan was written";
}

// Every command reads its options one way: a missing value names the option, its value and what it
// is for; a stray argument is named; a number is read as written, with its range; every error is
// "poolrun: error: ..." then the command's usage, exit status 2.
TEST(OptionsTest, EveryCommandParsesOneWay) {
  const std::vector<OptionCase> cases = {
      {"topo --format", "poolrun: error: --format needs a value: FORMAT, matrix (default), json, nccl-xml"},
      {"topo stray",
       "poolrun: error: unexpected argument 'stray': this command takes only options (see --help)"},
      {"doctor --mtu", "poolrun: error: --mtu needs a value: N, the netdev MTU the RoCE fabric expects"},
      {"doctor --nic", "poolrun: error: --nic needs a value: LIST, check only these RDMA ports"},
      {"plan --from x stray", "poolrun: error: unexpected argument 'stray'"},
      {"tuner explain --config x --nranks 1e3",
       "poolrun: error: --nranks 1e3: not a whole number (1 to 1000000)"},
      {"tuner explain --config x --nnodes 0", "poolrun: error: --nnodes 0: out of range (1 to 1000000)"},
      {"tuner calibrate --config x --nranks 4294967297 a.log",
       "poolrun: error: --nranks 4294967297: out of range (1 to 1000000)"},
      {"tuner calibrate --config", "poolrun: error: --config needs a value: FILE, the tuner configuration"},
  };
  for (const OptionCase& c : cases) {
    poolrun::test::ProcessResult r =
        poolrun::test::runShell("timeout 60 " + std::string(POOLRUN_BINARY) + " " + c.args + " </dev/null");
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err).substr(0, c.expected.size()), c.expected) << c.args << "\n" << r.err;
    const std::string command = c.args.substr(0, c.args.find(' '));
    EXPECT_NE(r.err.find("\nusage: poolrun " + command), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(OptionsTest, PlanRefusesWhatARunRefuses) {
  const std::string from = (poolrun::test::sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
  const std::vector<OptionCase> cases = {
      {"-n 2 --roce-tc 999", "poolrun: error: --roce-tc 999: out of range (0 to 255)"},
      {"-n 2 --gpus-per-node -1", "poolrun: error: --gpus-per-node -1: out of range (0 to 1024)"},
      {"-n 99999999999", "poolrun: error: -n 99999999999: out of range (1 to 1000000)"},
      {"-n two", "poolrun: error: -n two: not a whole number (1 to 1000000)"},
      {"-n 2 -x --",
       "poolrun: error: -x needs a value: VAR=VALUE, a variable the ranks get, over what the plan "
       "sets"},
      {"-n 2 -x",
       "poolrun: error: -x needs a value: VAR=VALUE, a variable the ranks get, over what the plan "
       "sets"},
      {"-np", "poolrun: error: -np needs a value: N, the number of ranks, one per GPU (-np N is the same)"},
      {"-np 0", "poolrun: error: -n 0: out of range (1 to 1000000)"},
  };
  for (const OptionCase& c : cases) {
    poolrun::test::ProcessResult r = poolrun::test::runShell("timeout 60 " + std::string(POOLRUN_BINARY) +
                                                             " plan --from " + from + " " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err), c.expected) << c.args;
  }
}

// --whole-nodes, --model, --min-memory-gib, --label and --one-switch are poolctl acquire's: the same
// errors, word for word, whether the option or the pool refuses; and what they ask is what the
// lease gets.
TEST(OptionsTest, PlacementOptionsAreThoseOfPoolctlAcquire) {
  poolrun::test::TempDir tmp;
  const std::string cluster = (poolrun::test::sourceDir() / "clusters" / "hgx-h100.toml").string();
  const std::string env = "POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() + " timeout 60 ";
  auto after = [](const std::string& text, const std::string& prefix) {
    const std::string line = firstLine(text);
    return line.starts_with(prefix) ? line.substr(prefix.size()) : "(no '" + prefix + "' in) " + line;
  };
  for (const std::string& args : std::vector<std::string>{
           "--label rack", "--label =r1", "--min-memory-gib 17179869184", "--min-memory-gib 1.5",
           "--model \"$(printf 'a\\033b')\"", "--whole-nodes --gpus-per-node 4", "--model A100",
           "--min-memory-gib 4096", "--exclude ,", "--exclude 'hgx[01-'", "--exclude 'a b'",
           "--exclude 'hgx[01-16]'"}) {
    auto run = poolrun::test::runShell(env + POOLRUN_BINARY + " --pool sim:" + cluster + " -n 16 --dry-run " +
                                       args + " /bin/true");
    auto acquire =
        poolrun::test::runShell(env + POOLCTL_BINARY + " --pool sim:" + cluster + " acquire -n 16 " + args);
    EXPECT_NE(run.status, 0) << args;
    EXPECT_NE(acquire.status, 0) << args;
    EXPECT_EQ(after(run.err, "poolrun: error: "), after(acquire.err, "poolctl: error: ")) << args;
  }
  auto nodesOf = [&](const std::string& args) {
    auto r = poolrun::test::runShell(env + POOLRUN_BINARY + " --pool sim:" + cluster + " --dry-run " + args +
                                     " /bin/true");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
    std::set<std::string> nodes;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string rank, node;
      if (words >> rank >> node && node.starts_with("hgx")) nodes.insert(node);
    }
    return nodes;
  };
  for (const std::string& n : nodesOf("-n 16 --label rack=r2")) EXPECT_GE(n, "hgx09") << n;
  EXPECT_EQ(nodesOf("-n 16 --label rack=r2").size(), 2u);
  EXPECT_EQ(nodesOf("-n 12 --label gpu=h100 --one-switch --gpus-per-node 4").size(), 3u);
  const std::set<std::string> without = nodesOf("-n 16 --exclude 'hgx[01-02]' --exclude hgx04");
  EXPECT_EQ(without.size(), 2u);
  for (const char* n : {"hgx01", "hgx02", "hgx04"}) EXPECT_FALSE(without.count(n)) << n;
  // Whole nodes: a rank on every GPU of each, and a note where -n asked for fewer.
  auto whole = poolrun::test::runShell(env + POOLRUN_BINARY + " --pool sim:" + cluster +
                                       " --dry-run -n 4 --whole-nodes /bin/true");
  ASSERT_EQ(whole.status, 0) << whole.err;
  EXPECT_NE(whole.out.find("8 ranks on 1 node"), std::string::npos) << whole.out;
  EXPECT_NE(
      whole.err.find("poolrun: note: --whole-nodes: the lease holds 8 GPUs on 1 node for -n 4: starting a "
                     "rank on each"),
      std::string::npos)
      << whole.err;
}

}  // namespace

namespace {

// mpirun's -np N is -n N, for a run and a plan.
TEST(OptionsTest, MinusNpIsMinusN) {
  poolrun::test::TempDir tmp;
  const std::string cluster = (poolrun::test::sourceDir() / "clusters" / "sim-ib.toml").string();
  poolrun::test::ProcessResult run = poolrun::test::runShell(
      "POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() + " timeout 60 " + std::string(POOLRUN_BINARY) +
      " --pool sim:" + cluster + " -np 3 --dry-run /bin/true");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("3 ranks on"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("mpirun -np 3 "), std::string::npos) << run.out;
  poolrun::test::ProcessResult plan = poolrun::test::runShell("timeout 60 " + std::string(POOLRUN_BINARY) +
                                                              " plan --cluster " + cluster + " -np 3 --json");
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("\"world_size\": 3"), std::string::npos) << plan.out;
  // POOLRUN_POOL=sim:FILE is the cluster a plan without --cluster or --from is made on.
  poolrun::test::ProcessResult fromPool = poolrun::test::runShell(
      "POOLRUN_POOL=sim:" + cluster + " timeout 60 " + std::string(POOLRUN_BINARY) + " plan -n 3 --json");
  ASSERT_EQ(fromPool.status, 0) << fromPool.err;
  EXPECT_EQ(fromPool.out, plan.out);
}

// A job script's #POOLRUN lines are options, as #SBATCH lines are sbatch's: read up to the first
// line that is not a comment, with the command line's winning where both give one, and the values
// of a repeatable option from both; a malformed line is a usage error naming its file and line.
TEST(OptionsTest, AScriptsPoolrunLinesAreOptionsAndTheCommandLineWins) {
  poolrun::test::TempDir tmp;
  const std::string cluster = (poolrun::test::sourceDir() / "clusters" / "sim-ib.toml").string();
  auto script = [&tmp](const std::string& name, const std::string& text) {
    const std::filesystem::path file = tmp.write(name, text);
    std::filesystem::permissions(file, std::filesystem::perms::owner_all);
    return file.string();
  };
  auto dryRun = [&](const std::string& args) {
    return poolrun::test::runShell("POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() + " timeout 60 " +
                                   std::string(POOLRUN_BINARY) + " --pool sim:" + cluster + " --dry-run " +
                                   args);
  };
  const std::string job = script("job.sh",
                                 "#!/bin/sh\n"
                                 "# a comment, then options\n"
                                 "#POOLRUN -n 2 --gpus-per-node 1   -x 'A=one two'\n"
                                 "#POOLRUN\t--name \"my job\"\n"
                                 "#POOLRUNX -n 9\n"
                                 "#SBATCH -n 7\n"
                                 "\n"
                                 "echo hello\n"
                                 "#POOLRUN -n 5\n");
  poolrun::test::ProcessResult fromScript = dryRun("-x B=2 " + job);
  ASSERT_EQ(fromScript.status, 0) << fromScript.err;
  EXPECT_NE(fromScript.out.find("2 ranks on 2 nodes"), std::string::npos) << fromScript.out;
  EXPECT_NE(fromScript.out.find("-x 'A=one two' -x B=2 "), std::string::npos) << fromScript.out;
  poolrun::test::ProcessResult overridden = dryRun("--gpus-per-node 2 -np 4 " + job);
  ASSERT_EQ(overridden.status, 0) << overridden.err;
  EXPECT_NE(overridden.out.find("4 ranks on 2 nodes"), std::string::npos) << overridden.out;
  EXPECT_NE(overridden.out.find("mpirun -np 4 "), std::string::npos) << overridden.out;
  // A program that is not a script, or a script without #! first, has no options of its own.
  const std::string plain = script("plain.sh", "#POOLRUN -n 3\necho\n");
  EXPECT_EQ(dryRun(plain).status, 2);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"#POOLRUN -n 2 --bogus 3\n", "bad1.sh line 2: unrecognised option '--bogus'"},
      {"#POOLRUN -n 2 train.py\n", "bad2.sh line 2: 'train.py' is not an option"},
      {"#POOLRUN -n 2 --name \"open\n", "bad3.sh line 2: the quote \" is not closed on its line"},
      {"#POOLRUN -n\n", "bad4.sh line 2: -n needs a value"},
      {"# x\n#POOLRUN --priority 99999999 -n 1\n", "--priority 99999999: out of range"},
      {"#POOLRUN -n 1 --name a\\\n", "bad6.sh line 2: the line ends in a backslash"},
      {"#POOLRUN -n 1 --name \xff\xfe\n", "--name '\\xff\\xfe': byte \\xff at byte 0 is not UTF-8"},
  };
  // A huge comment line: the first MiB is read, and the options before it count.
  const std::string huge = script("huge.sh", "#!/bin/sh\n#POOLRUN -n 3\n" + std::string(2 << 20, '#'));
  poolrun::test::ProcessResult big = dryRun(huge);
  EXPECT_EQ(big.status, 0) << big.err;
  EXPECT_NE(big.out.find("3 ranks on"), std::string::npos) << big.out;
  int i = 0;
  for (const auto& [line, says] : bad) {
    const std::string file = script("bad" + std::to_string(++i) + ".sh", "#!/bin/sh\n" + line);
    poolrun::test::ProcessResult r = dryRun(file);
    EXPECT_EQ(r.status, 2) << line << r.out;
    EXPECT_NE(r.err.find(says), std::string::npos) << line << "\n" << r.err;
  }
}

// "poolrun 0.4.0\nbuilt with: NCCL 2.21.5, CUDA none, Open MPI 4.1.4, hwloc 2.9.0\n": a binary's
// name and version, then NCCL's, CUDA's and MPI's ("none" where the build has none) and hwloc's.
bool isVersionText(std::string_view text) {
  using poolrun::common::takeDigits;
  using poolrun::common::takePrefix;
  auto span = [&text](std::string_view chars) {  // the run of `chars` at the front, taken
    std::string_view run = text.substr(0, text.find_first_not_of(chars));
    text.remove_prefix(run.size());
    return run;
  };
  constexpr std::string_view kLetters = "abcdefghijklmnopqrstuvwxyz";
  auto versionOrNone = [&] { return takePrefix(text, "none") || !span("0123456789.").empty(); };
  auto mpi = [&] {
    if (takePrefix(text, "Open MPI ")) return versionOrNone();
    return takePrefix(text, "MPICH ") && !span(std::string("0123456789.").append(kLetters)).empty();
  };
  auto hwloc = [&] {
    std::string_view version = span(std::string("0123456789.").append(kLetters));
    return !version.empty() && version[0] >= '0' && version[0] <= '9';
  };
  return !span(std::string(kLetters).append("-")).empty() && takePrefix(text, " ") &&
         !takeDigits(text).empty() && takePrefix(text, ".") && !takeDigits(text).empty() &&
         takePrefix(text, ".") && !takeDigits(text).empty() && takePrefix(text, "\nbuilt with: NCCL ") &&
         versionOrNone() && takePrefix(text, ", CUDA ") && versionOrNone() && takePrefix(text, ", ") &&
         mpi() && takePrefix(text, ", hwloc ") && hwloc() && takePrefix(text, "\n") && text.empty();
}

// Whether `word` is one of the words of `text`, between white space or its ends.
bool hasWord(const std::string& text, const std::string& word) {
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (w == word) return true;
  }
  return false;
}

// --version in every binary: the project's version, then the build's NCCL, CUDA, MPI and hwloc.
TEST(OptionsTest, EveryBinaryHasVersion) {
  for (const auto& [name, binary] :
       std::vector<std::pair<std::string, std::string>>{{"poolrun", POOLRUN_BINARY},
                                                        {"poolctl", POOLCTL_BINARY},
                                                        {"poold", POOLD_BINARY},
                                                        {"poolrun-sim-agent", SIM_AGENT_BINARY},
                                                        {"poolrun-rsh", RSH_BINARY}}) {
    poolrun::test::ProcessResult r = poolrun::test::runShell("timeout 60 " + binary + " --version");
    EXPECT_EQ(r.status, 0) << binary << "\n" << r.err;
    EXPECT_TRUE(isVersionText(r.out)) << r.out;
    EXPECT_EQ(r.out.substr(0, name.size() + 1), name + " ") << r.out;
  }
}

// poolrun-sim-agent gives each simulated node a host name of its own (a UTS namespace, as root) or,
// for a user who may make none, an Open MPI session directory of its own: one shared by two nodes'
// daemons made one job in seven of two nodes die in hwloc_shmem_topology_write.
TEST(OptionsTest, TheSimulatedAgentKeepsEachNodesDaemonApart) {
  const std::string agent = std::string("timeout 60 ") + SIM_AGENT_BINARY;
  const std::string asUser = geteuid() == 0 ? "setpriv --reuid=nobody --regid=nogroup --clear-groups " : "";
  const std::string uid = geteuid() == 0 ? "65534" : std::to_string(geteuid());
  std::set<std::string> bases;
  for (const std::string host : {"n07", "n08"}) {
    poolrun::test::ProcessResult r =
        poolrun::test::runShell(asUser + agent + " -x " + host + " 'echo $OMPI_MCA_orte_tmpdir_base'");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("/poolrun-sim-" + uid + "-" + host + "\n"), std::string::npos) << r.out;
    bases.insert(r.out);
  }
  EXPECT_EQ(bases.size(), 2u);
  if (geteuid() == 0) {
    poolrun::test::ProcessResult r =
        poolrun::test::runShell(agent + " n07 'hostname; echo \"[$OMPI_MCA_orte_tmpdir_base]\"'");
    EXPECT_EQ(r.out, "n07\n[]\n") << r.err;
  }
  poolrun::test::runShell("rmdir /tmp/poolrun-sim-" + uid + "-n07 /tmp/poolrun-sim-" + uid + "-n08");
}

// Every help names its values (no Boost "arg"), poolrun's lists the commands and the environment,
// and poolctl gives each command's own help both ways.
TEST(OptionsTest, HelpNamesValuesCommandsAndEnvironment) {
  const std::string poolrun = std::string("timeout 60 ") + POOLRUN_BINARY;
  const std::string poolctl = std::string("timeout 60 ") + POOLCTL_BINARY;
  for (const std::string& cmd :
       {poolrun + " --help", poolrun + " plan --help", poolrun + " topo --help", poolrun + " doctor --help",
        poolrun + " tuner explain --help", poolrun + " tuner calibrate --help"}) {
    poolrun::test::ProcessResult r = poolrun::test::runShell(cmd);
    EXPECT_EQ(r.status, 0) << cmd << "\n" << r.err;
    EXPECT_FALSE(hasWord(r.out, "arg")) << cmd << "\n" << r.out;
  }
  poolrun::test::ProcessResult help = poolrun::test::runShell(poolrun + " --help");
  for (const char* want : {"\ncommands:\n", "\n  topo ", "\n  plan ", "\n  doctor ", "\n  tuner ",
                           "\nenvironment:\n", "POOLRUN_POOL", "POOLRUN_TOKEN", "POOLRUN_STATE_DIR",
                           "XDG_STATE_HOME", "POOLRUN_FIXTURES", "NCCL_TUNER_PLUGIN", "-n N ", "--pool URI ",
                           "--timeout SECONDS ", "--token-file FILE ", "--tag-output", "--mpirun-arg ARG"}) {
    EXPECT_NE(help.out.find(want), std::string::npos) << want << "\n" << help.out;
  }
  poolrun::test::ProcessResult plan = poolrun::test::runShell(poolrun + " plan --help");
  EXPECT_NE(plan.out.find("POOLRUN_POOL"), std::string::npos) << plan.out;

  poolrun::test::ProcessResult all = poolrun::test::runShell(poolctl + " help");
  EXPECT_EQ(all.status, 0) << all.err;
  for (const char* want : {"POOLRUN_POOL", "POOLRUN_TOKEN", "POOLRUN_STATE_DIR"})
    EXPECT_NE(all.out.find(want), std::string::npos) << want << "\n" << all.out;
  for (const std::string command : {"acquire", "queue", "release", "drain", "fail"}) {
    poolrun::test::ProcessResult a = poolrun::test::runShell(poolctl + " " + command + " --help");
    poolrun::test::ProcessResult b = poolrun::test::runShell(poolctl + " help " + command);
    EXPECT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(a.out.find("usage: poolctl [--pool URI]"), 0u) << a.out;
    EXPECT_NE(a.out.substr(0, a.out.find('\n')).find(" " + command), std::string::npos) << a.out;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, all.out);
  }
  poolrun::test::ProcessResult acquire = poolrun::test::runShell(poolctl + " acquire --help");
  EXPECT_NE(acquire.out.find("--ttl SECONDS"), std::string::npos) << acquire.out;
  poolrun::test::ProcessResult poold =
      poolrun::test::runShell(std::string("timeout 60 ") + POOLD_BINARY + " --help");
  EXPECT_NE(poold.out.find("POOLRUN_FIXTURES"), std::string::npos) << poold.out;
  poolrun::test::ProcessResult unknown = poolrun::test::runShell(poolctl + " help frobnicate");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("'frobnicate'"), std::string::npos) << unknown.err;
}

}  // namespace
