// What a client does while its request is queued, as a user sees it: poolctl and poolrun, run as
// processes against a sim: pool and a poold, interrupted while queued, withdraw the request, say so
// and exit 128+N, and leave no lease behind once the GPUs free up; `poolctl release` of a lease
// that is not held says so.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "poold_process.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using namespace std::chrono_literals;

// The exit status; 1000+N for death by signal N (the tool must exit itself, not die of it); -1 when
// it did not end within `limit` (then its process group is killed).
int waitExit(pid_t pid, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return -1;
    }
    std::this_thread::sleep_for(50ms);
  }
}

struct Case {
  const char* name;
  const char* tool;  // "poolctl" or "poolrun"
  bool http;         // a poold, else sim:
  int signal;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class QueuedClient : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().http) {
      tokens_ = dir_.writeSecret("tokens", test::kTokens);
      poold_ = std::make_unique<test::PooldProcess>(
          dir_.path() / "poold", tokens_, std::vector<std::string>{"--cluster", test::hgxCluster()});
      uri_ = poold_->uri();
    } else {
      uri_ = "sim:" + test::hgxCluster();
    }
  }

  std::unique_ptr<PoolControl> client() {
    ClientOptions o;
    o.state_dir = (dir_.path() / "state").string();
    o.token = "tok-root-0123456789";
    return openPoolControl(uri_, o);
  }

  // The tool's command line, in the test's state directory, with bob's token for a poold.
  std::string command(const std::string& args) const {
    std::string bin = std::string(GetParam().tool) == "poolrun" ? POOLRUN_BINARY : POOLCTL_BINARY;
    return "env POOLRUN_STATE_DIR=" + (dir_.path() / "state").string() +
           " POOLRUN_TOKEN=tok-bob-0123456789 " + bin + " --pool " + uri_ + " " + args + " >" +
           (dir_.path() / "out").string() + " 2>" + (dir_.path() / "err").string();
  }

  std::string err() const { return test::slurp(dir_.path() / "err"); }

  test::TempDir dir_;
  std::filesystem::path tokens_;
  std::unique_ptr<test::PooldProcess> poold_;
  std::string uri_;
};

TEST_P(QueuedClient, InterruptedWhileQueuedWithdrawsAndLeavesNoGhostLease) {
  const Case& c = GetParam();
  auto root = client();
  LeaseRequest all;
  all.gpus = 128;
  all.ttl = std::chrono::seconds(300);
  Lease filling = root->acquire(all);

  std::string args =
      std::string(c.tool) == "poolrun" ? "--wait 60 -n 16 /bin/true" : "acquire -n 16 --wait 60";
  pid_t pid = test::spawnShell(command(args));
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (root->queue().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  ASSERT_EQ(root->queue().size(), 1u) << "not queued within 30 s:\n" << err();
  const int64_t ticket = root->queue().front().ticket;

  kill(pid, c.signal);
  EXPECT_EQ(waitExit(pid, 30s), 128 + c.signal) << err();
  EXPECT_NE(err().find(std::string(c.tool) + ": withdrew the queued request (ticket " +
                       std::to_string(ticket) + ")"),
            std::string::npos)
      << err();
  EXPECT_NE(err().find("queued at position 1 (ticket " + std::to_string(ticket) +
                       "), waited 0:00: needs 16 GPUs, 0 free"),
            std::string::npos)
      << "progress with the reason\n"
      << err();
  EXPECT_TRUE(root->queue().empty()) << "the request was withdrawn";

  EXPECT_TRUE(root->release(filling.id));
  std::this_thread::sleep_for(500ms);  // a poold's ticker and the embedded pool's next call schedule
  EXPECT_TRUE(root->leases().empty()) << "no lease granted to the interrupted client";
  EXPECT_EQ(root->status().gpus_free, 128);
}

INSTANTIATE_TEST_SUITE_P(Pool, QueuedClient,
                         ::testing::Values(Case{"poolctl_sim_int", "poolctl", false, SIGINT},
                                           Case{"poolctl_http_int", "poolctl", true, SIGINT},
                                           Case{"poolctl_http_term", "poolctl", true, SIGTERM},
                                           Case{"poolrun_sim_int", "poolrun", false, SIGINT},
                                           Case{"poolrun_sim_hup", "poolrun", false, SIGHUP}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(PoolctlRelease, OfALeaseNotHeldSaysSoAndSucceeds) {
  test::TempDir dir;
  std::string base = "POOLRUN_STATE_DIR=" + (dir.path() / "state").string() + " timeout 60 " +
                     POOLCTL_BINARY + " --pool sim:" + test::hgxCluster() + " ";
  test::ProcessResult r = test::runShell(base + "release L0123456789abcdef");
  EXPECT_EQ(r.status, 0) << "release is idempotent\n" << r.err;
  EXPECT_EQ(r.err,
            "poolctl: lease L0123456789abcdef was not held (already released, expired, or never granted)\n");
  r = test::runShell(base + "--json release L0123456789abcdef");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "{\"id\":\"L0123456789abcdef\",\"released\":false}\n");
  r = test::runShell(base + "renew L0123456789abcdef");
  EXPECT_EQ(r.status, 5) << "renew of a lease that is gone\n" << r.err;
}

}  // namespace
}  // namespace poolrun::pool
