// The account tree and fair share: the accounts file and its errors, the classic fair-share
// factor against worked examples of its formula, decayed usage, and the queue's multi-factor order
// on a fake clock (a user who used ten times another's GPU-hours goes after them, and the order
// returns as the usage decays).

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "inventory.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/pool/accounts.hpp"
#include "poolrun/pool/fairshare.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using test::addInventory;
using test::parseRequest;
using test::t0;

const char* const kTree =
    "default_account = \"guests\"\n"
    "[priority]\n"
    "fairshare = 5000\n"
    "age = 10\n"
    "max_age = 86400\n"
    "[accounts.physics]\n"
    "shares = 40\n"
    "users = [\"alice\", \"bob\"]\n"
    "[accounts.theory]\n"
    "parent = \"physics\"\n"
    "shares = 2\n"
    "users = [\"alice\"]\n"
    "[accounts.biology]\n"
    "shares = 60\n"
    "users = [\"carol\"]\n"
    "[accounts.guests]\n"
    "shares = 0\n"
    "[users.alice]\n"
    "default = \"theory\"\n";

TEST(AccountsFile, ReadsTheTreeItsUsersAndTheWeights) {
  const Accounts a = parseAccounts(kTree, "accounts.toml");
  ASSERT_EQ(a.list().size(), 5u);
  EXPECT_EQ(a.list()[0].name, "root");
  for (size_t i = 1; i < a.list().size(); ++i)
    EXPECT_LT(a.list()[i].parent, i) << "every account after its parent";
  const Account* theory = a.find("theory");
  ASSERT_NE(theory, nullptr);
  EXPECT_EQ(a.list()[theory->parent].name, "physics");
  EXPECT_EQ(theory->shares, 2);
  EXPECT_EQ(a.find("guests")->shares, 0);
  EXPECT_EQ(a.find("biology")->users, std::vector<std::string>{"carol"});
  EXPECT_EQ(a.weights().fairshare, 5000);
  EXPECT_EQ(a.weights().age, 10);
  EXPECT_EQ(a.weights().priority, PriorityWeights{}.priority) << "not given: the default";
  EXPECT_EQ(a.weights().max_age, seconds(86'400));
  EXPECT_EQ(a.accountsOf("alice"), (std::vector<std::string>{"physics", "theory"}));

  EXPECT_EQ(a.accountFor("alice", ""), "theory");
  EXPECT_EQ(a.accountFor("alice", "physics"), "physics");
  EXPECT_EQ(a.accountFor("bob", ""), "physics");
  EXPECT_EQ(a.accountFor("dave", ""), "guests") << "in no account: the default account";
  auto refused = [&](const std::string& user, const std::string& asked) {
    try {
      a.accountFor(user, asked);
    } catch (const PoolError& e) {
      return std::string(e.what());
    }
    return std::string("(taken)");
  };
  EXPECT_EQ(refused("bob", "biology"),
            "user bob may not charge account biology (its accounts: physics); ask with --account for one of "
            "its own, "
            "or ask an administrator to add it");
  EXPECT_NE(refused("bob", "chemistry").find("'chemistry' is no account"), std::string::npos);
  EXPECT_NE(refused("bob", "root").find("'root' is no account"), std::string::npos);
  EXPECT_NE(refused("dave", "physics").find("may not charge account physics (it is in no account)"),
            std::string::npos);
  const Accounts strict = parseAccounts("[accounts.a]\nusers = [\"x\"]\n", "f");
  try {
    strict.accountFor("dave", "");
    ADD_FAILURE() << "taken";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kForbidden);
    EXPECT_NE(
        std::string(e.what()).find("user dave is in no account of the pool's accounts file, which names no "
                                   "default_account"),
        std::string::npos);
  }
  EXPECT_TRUE(parseAccounts("", "f").empty());
  EXPECT_TRUE(parseAccounts("# nothing\n[priority]\nage = 0\n", "f").empty());
}

TEST(AccountsFile, ChangesAreSaidOneLineAnAccount) {
  const Accounts before = parseAccounts(kTree, "f");
  const Accounts after = parseAccounts(
      "[priority]\nfairshare = 1\n[accounts.physics]\nshares = 50\nusers = [\"alice\", \"bob\"]\n"
      "[accounts.chem]\nusers = [\"erin\"]\n",
      "f");
  EXPECT_EQ(accountChanges(before, after),
            (std::vector<std::string>{"account chem added: parent root, shares 1, users erin",
                                      "account physics: shares 40 -> 50", "account biology removed",
                                      "account guests removed", "account theory removed",
                                      "weights: fairshare 5000 -> 1, age 10 -> 1000, max_age 86400 -> 604800",
                                      "default_account guests -> none"}));
  EXPECT_TRUE(accountChanges(after, after).empty());
}

TEST(AccountsFile, ABadFileIsNamedWithItsLineAndWhatToDo) {
  struct Case {
    std::string text;
    const char* says;
  };
  const Case cases[] = {
      {"[accounts.a]\nparent = \"b\"\n[accounts.b]\nparent = \"a\"\n", "make a cycle (a -> b -> a)"},
      {"[accounts.a]\nparent = \"a\"\n", "make a cycle (a -> a)"},
      {"[accounts.a]\nparent = \"nowhere\"\n", "f:1: account a's parent 'nowhere' is no account of the file"},
      {"[accounts.a]\nshares = -1\n", "f:2: [accounts.a] shares must be a whole number from 0 to 1000000"},
      {"[accounts.a]\nshares = \"ten\"\n", "shares must be a whole number"},
      {"[accounts.a]\nshares = 1.5\n", "shares must be a whole number"},
      {"[accounts.a]\nshares = 1000001\n", "shares must be a whole number"},
      {"[accounts.a]\nusers = [\"x\"]\n[accounts.b]\nusers = [\"x\"]\n",
       "f: user x is in accounts a and b and has no default: add [users.x] default = \"a\""},
      {"[accounts.a]\nusers = [\"x\"]\n[users.x]\ndefault = \"b\"\n",
       "f:4: [users.x] default 'b' is not an account x is in"},
      {"[accounts.a]\ncolour = \"red\"\n",
       "f:2: unknown key 'colour' in [accounts.a] (known: parent, shares, users)"},
      {"colour = 1\n", "unknown key 'colour' in the file"},
      {"[accounts.root]\n", "the root is the tree's own"},
      {"[accounts.\"a b\"]\n", "account name 'a b': only letters, digits"},
      {"[accounts.a]\nusers = [\"x\", \"x\"]\n", "names user x twice"},
      {"[accounts.a]\nusers = \"x\"\n", "users must be a list"},
      {"[accounts.a]\nusers = [\"a\\u0001b\"]\n", "user 'a\\x01b'"},
      {"default_account = \"nobody\"\n", "default_account 'nobody' is no account of the file"},
      {"[priority]\nfairshare = -3\n", "[priority] fairshare must be a number from 0 to 1e12"},
      {"[priority]\nage = nan\n", "[priority] age must be a number"},
      {"[priority]\nmax_age = 0\n", "max_age must be a whole number of seconds"},
      {"[priority]\nspeed = 1\n", "unknown key 'speed' in [priority]"},
      {"[accounts.a\n", "f:1: "},
      {"accounts = 3\n", "accounts must be tables"},
      {std::string("[accounts.a]\nusers = [\"\xff\"]\n"), "f:2: "},
      {"a" + std::string(5000, '.') + "b = 1\n", "a key nests deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    try {
      parseAccounts(c.text, "f");
      ADD_FAILURE() << "taken: " << c.text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what() << "\nwanted: " << c.says;
    }
  }
  test::TempDir dir;
  EXPECT_THROW(readAccountsFile(dir.path() / "missing.toml"), Error);
  EXPECT_THROW(readAccountsFile(dir.path()), Error) << "a directory";
}

// 100,000 accounts are taken, as a chain as deep as that (no recursion); one more is refused; a
// cycle at the end of a long chain is found.
TEST(AccountsFile, AHundredThousandAccountsAndAChainAsDeep) {
  std::string flat, chain;
  for (int i = 0; i < 100'000; ++i) {
    flat += "[accounts.a" + std::to_string(i) + "]\nusers = [\"u" + std::to_string(i) + "\"]\n";
    chain += "[accounts.c" + std::to_string(i) + "]\n" +
             (i > 0 ? "parent = \"c" + std::to_string(i - 1) + "\"\n" : std::string());
  }
  const Accounts wide = parseAccounts(flat, "f");
  EXPECT_EQ(wide.list().size(), 100'001u);
  EXPECT_EQ(wide.accountFor("u99999", ""), "a99999");
  const Accounts deep = parseAccounts(chain, "f");
  ASSERT_EQ(deep.list().size(), 100'001u);
  EXPECT_EQ(deep.list().back().name, "c99999");
  const FairShare shares(deep, {{{"c99999", "x"}, 1.0}});
  EXPECT_TRUE(shares.rows().size() == 100'000u) << "the deepest account's row too";
  try {
    parseAccounts(flat + "[accounts.one_more]\n", "f");
    ADD_FAILURE() << "taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("100001 accounts: at most 100000 are taken"), std::string::npos)
        << e.what();
  }
  try {
    const std::string ring = chain.substr(chain.find("[accounts.c1]"));
    parseAccounts("[accounts.c0]\nparent = \"c999\"\n" + ring.substr(0, ring.find("[accounts.c1000]")), "f");
    ADD_FAILURE() << "taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
}

struct Expected {
  const char* account;
  const char* user;
  double norm_shares, norm_usage, effective_usage, factor;
};

void expectRows(const FairShare& shares, const std::vector<Expected>& expected) {
  ASSERT_EQ(shares.rows().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const FairShareRow& r = shares.rows()[i];
    const Expected& e = expected[i];
    SCOPED_TRACE(std::string(e.account) + "/" + e.user);
    EXPECT_EQ(r.account, e.account);
    EXPECT_EQ(r.user, e.user);
    EXPECT_NEAR(r.norm_shares, e.norm_shares, 1e-12);
    EXPECT_NEAR(r.norm_usage, e.norm_usage, 1e-12);
    EXPECT_NEAR(r.effective_usage, e.effective_usage, 1e-12);
    EXPECT_NEAR(r.factor, e.factor, 1e-12);
  }
}

// Worked examples of the classic formula (https://slurm.schedmd.com/classic_fair_share.html),
// computed by hand from S, U, UE = U + (UE_parent - U) x s / s_siblings and F = 2^(-UE/S).
TEST(FairShareFactor, MatchesWorkedExamplesOfTheClassicFormula) {
  // Two accounts of equal shares, a user each; alice used ten times bob's GPU-hours:
  // alice U = 10/11, UE = 10/11 + (1 - 10/11) / 2 = 0.954545..., F = 2^(-0.954545/0.5) = 0.26626.
  const Accounts two =
      parseAccounts("[accounts.a]\nusers = [\"alice\"]\n[accounts.b]\nusers = [\"bob\"]\n", "f");
  const FairShare ab(two, {{{"a", "alice"}, 36'000.0}, {{"b", "bob"}, 3'600.0}});
  expectRows(ab, {{"a", "", 0.5, 10 / 11.0, 21 / 22.0, 0.26626027235999067},
                  {"a", "alice", 0.5, 10 / 11.0, 21 / 22.0, 0.26626027235999067},
                  {"b", "", 0.5, 1 / 11.0, 12 / 22.0, 0.4694654553308532},
                  {"b", "bob", 0.5, 1 / 11.0, 12 / 22.0, 0.4694654553308532}});
  EXPECT_GT(*ab.factor("b", "bob"), *ab.factor("a", "alice"));
  EXPECT_EQ(ab.factor("a", "bob"), std::nullopt);

  // Nested, uneven shares: A (40) with users u1, u2 and sub-account A1 (2 shares, user u3); B (60)
  // with u4. Usage u1 30, u2 0, u3 10, u4 60 (of 100). Under A the siblings hold 1 + 1 + 2 shares.
  const Accounts nested = parseAccounts(
      "[accounts.A]\nshares = 40\nusers = [\"u1\", \"u2\"]\n[accounts.A1]\nparent = \"A\"\nshares = 2\n"
      "users = [\"u3\"]\n[accounts.B]\nshares = 60\nusers = [\"u4\"]\n",
      "f");
  const FairShare n(nested, {{{"A", "u1"}, 30.0}, {{"A1", "u3"}, 10.0}, {{"B", "u4"}, 60.0}});
  expectRows(n, {{"A", "", 0.4, 0.4, 0.64, 0.3298769776932236},
                 {"A", "u1", 0.1, 0.3, 0.385, 0.0693480920042403},
                 {"A", "u2", 0.1, 0.0, 0.16, 0.3298769776932236},
                 {"A1", "", 0.2, 0.1, 0.37, 0.27739236801696127},
                 {"A1", "u3", 0.2, 0.1, 0.37, 0.27739236801696127},
                 {"B", "", 0.6, 0.6, 0.84, 0.37892914162759955},
                 {"B", "u4", 0.6, 0.6, 0.84, 0.37892914162759955}});
  EXPECT_EQ(n.rows()[3].depth, 1);
  EXPECT_EQ(n.rows()[4].depth, 2);

  // Nobody has used anything: every factor 1. An account of no shares: 0, whatever its usage.
  const FairShare unused(nested, {});
  for (const FairShareRow& r : unused.rows()) EXPECT_EQ(r.factor, 1.0) << r.account << "/" << r.user;
  const Accounts none = parseAccounts(
      "default_account = \"scavenge\"\n[accounts.a]\nusers = [\"x\"]\n[accounts.scavenge]\nshares = 0\n",
      "f");
  const FairShare z(none, {{{"a", "x"}, 5.0}}, {{"scavenge", "guest"}});
  EXPECT_EQ(z.factor("scavenge", "guest"), 0.0) << "a user of the default account, waiting, with no usage";
  EXPECT_EQ(z.factor("scavenge", "x"), std::nullopt) << "x has an account of its own";
  EXPECT_EQ(z.factor("a", "x"), std::exp2(-1.0)) << "alone, used its whole share: 0.5";
  // Usage of an account the file no longer has, or of a user no longer in it, counts nowhere.
  const FairShare gone(two, {{{"chemistry", "erin"}, 100.0}, {{"a", "bob"}, 100.0}});
  EXPECT_EQ(gone.factor("a", "alice"), 1.0);
}

// The ledger's decayed usage halves every half-life, and is the same made again from its rows (a
// restart) as kept while it counted.
TEST(FairShareUsage, HalvesEveryHalfLifeAndIsMadeAgainFromTheRows) {
  test::TempDir dir;
  PoolState s;
  addInventory(s, "n01/gpu[0-7]", t0());
  UsageOptions options;
  options.half_life = hours(1);
  s.setUsageOptions(options);
  s.setAccounts(parseAccounts("[accounts.a]\nusers = [\"alice\"]\n", "f"));
  const std::string id = s.submit(parseRequest("8 owner=alice"), t0()).lease->id;
  s.release(id, "alice", false, t0() + hours(1));
  // 8 GPU-hours spent evenly over an hour, decayed to its end: 8 h x 3600 x (1 - 1/2) / ln 2.
  const double atEnd = 8 * 3600 * 0.5 / std::numbers::ln2;
  auto decayed = [](const PoolState& p, TimePoint now) {
    for (const auto& [who, value] : p.usage().decayed(now))
      if (who == std::pair<std::string, std::string>("a", "alice")) return value;
    return -1.0;
  };
  EXPECT_NEAR(decayed(s, t0() + hours(1)), atEnd, 1e-6);
  EXPECT_NEAR(decayed(s, t0() + hours(3)), atEnd / 4, 1e-6);
  PoolState back = test::throughStateFile(s, dir.path() / "pool.sqlite");
  back.setUsageOptions(options);
  EXPECT_NEAR(decayed(back, t0() + hours(3)), atEnd / 4, 1e-6) << "made again from the stored rows";
  options.half_life = hours(2);
  back.setUsageOptions(options);
  EXPECT_NEAR(decayed(back, t0() + hours(1)), 8 * 3600 * (1 - std::sqrt(0.5)) * 2 / std::numbers::ln2, 1e-6);
}

// A pool of 8 GPUs, one account each for alice and bob (equal shares) and one for the lease that
// keeps the pool full; usage halves every week (the default).
PoolState fairPool() {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]", t0());
  UsageOptions options;
  options.half_life = hours(24 * 7);
  s.setUsageOptions(options);
  s.setAccounts(
      parseAccounts("[accounts.physics]\nusers = [\"alice\"]\n[accounts.biology]\nusers = [\"bob\"]\n"
                    "[accounts.ops]\nusers = [\"ops\"]\n",
                    "f"));
  return s;
}

std::vector<std::string> queueOwners(const PoolState& s) {
  std::vector<std::string> out;
  for (const QueueInfo& q : s.queueList()) out.push_back(q.owner);
  return out;
}

// After alice used ten times bob's GPU-hours, bob's waiting request goes before alice's of equal
// priority submitted earlier, and starts first; once their usage has decayed under what the pool
// has used since, the order is arrival's again.
TEST(FairShareOrder, TheUserWhoUsedLessGoesFirstUntilTheUsageDecays) {
  PoolState s = fairPool();
  TimePoint now = t0();
  const std::string a = s.submit(parseRequest("8 owner=alice"), now).lease->id;
  s.release(a, "alice", false, now += hours(10));
  const std::string b = s.submit(parseRequest("8 owner=bob"), now).lease->id;
  s.release(b, "bob", false, now += hours(1));
  const std::string full = s.submit(parseRequest("8 owner=ops max=600"), now).lease->id;
  const SubmitResult first = s.submit(parseRequest("8 owner=alice"), now += seconds(1));
  const SubmitResult second = s.submit(parseRequest("8 owner=bob"), now += seconds(1));
  ASSERT_TRUE(first.ticket > 0 && second.ticket > 0);
  EXPECT_EQ(first.position, 1);
  EXPECT_EQ(second.position, 1) << "bob's request went ahead of alice's at once";
  EXPECT_EQ(queueOwners(s), (std::vector<std::string>{"bob", "alice"}));
  const std::vector<QueueInfo> queue = s.queueList();

  ASSERT_TRUE(queue[0].factors && queue[1].factors);
  EXPECT_EQ(queue[0].account, "biology");
  EXPECT_GT(queue[0].factors->fairshare, queue[1].factors->fairshare);
  EXPECT_GT(queue[0].factors->score, queue[1].factors->score);
  EXPECT_EQ(s.plannedStart(second.ticket), now - seconds(2) + seconds(600)) << "bob's is planned first";
  s.release(full, "ops", false, now += seconds(1));
  s.tick(now);
  const PollResult granted = s.poll(second.ticket, now);
  ASSERT_EQ(granted.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(s.poll(first.ticket, now).status, QueueEntry::Status::kWaiting);
  const Lease bobs = *granted.lease;
  EXPECT_EQ(bobs.account, "biology");
  s.release(bobs.id, "bob", false, now);
  s.tick(now);
  const Lease alices = *s.poll(first.ticket, now).lease;
  s.release(alices.id, "alice", false, now);

  // Thirty half-lives of ops using the pool later, alice's and bob's past is a rounding error
  // beside it: age decides between them, and alice's request, the earlier, goes first.
  LeaseRequest daily = parseRequest("8 owner=ops");
  daily.ttl = hours(24);
  const std::string busy = s.submit(daily, now).lease->id;
  for (int day = 0; day < 7 * 30; ++day) {
    s.renew(busy, "ops", false, now += hours(24) - seconds(1));
    s.accountUsage(now);
  }
  const SubmitResult again = s.submit(parseRequest("8 owner=alice"), now += seconds(1));
  const SubmitResult later = s.submit(parseRequest("8 owner=bob"), now += seconds(5));
  ASSERT_TRUE(again.ticket > 0 && later.ticket > 0);
  s.tick(now += seconds(1));
  EXPECT_EQ(queueOwners(s), (std::vector<std::string>{"alice", "bob"}));
}

// Without an accounts file, a request naming an account is refused; with one, an account the user
// may not charge is refused at submit, and the lease carries the account it was charged to.
TEST(FairShareOrder, AccountsAreCheckedAtSubmit) {
  PoolState plain;
  addInventory(plain, "n01/gpu[0-7]", t0());
  LeaseRequest r = parseRequest("1 owner=alice");
  r.account = "physics";
  EXPECT_THROW(plain.submit(r, t0()), PoolError);
  PoolState s = fairPool();
  r.account = "biology";
  try {
    s.submit(r, t0());
    ADD_FAILURE() << "taken";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kForbidden);
  }
  r.account.clear();
  EXPECT_EQ(s.submit(r, t0()).lease->account, "physics");
  EXPECT_EQ(s.usage().ofLease(s.leaseList().at(0).id).at(0).account, "physics");
  LeaseRequest stranger = parseRequest("1 owner=mallory");
  EXPECT_THROW(s.submit(stranger, t0()), PoolError) << "in no account, and the file names no default";
}

// A job the pool keeps is charged at its submission: its owner's default account, or the one it
// names where its owner is in it; another is refused then, not when the job would start.
TEST(FairShareOrder, DetachedJobsAreChargedWhenSubmitted) {
  PoolState s = fairPool();
  JobSpec job;
  job.owner = "alice";
  job.uid = job.gid = 1000;
  job.command = {"-n", "2", "/bin/true"};
  job.cwd = "/home/alice";
  job.request.gpus = 2;
  const std::vector<std::string> ids = s.submitJob(job, std::nullopt, t0());
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(s.jobs().find(ids[0])->spec.request.account, "physics");
  job.request.account = "biology";
  EXPECT_THROW(s.submitJob(job, std::nullopt, t0()), PoolError);
}

// The kept plan (a request planned against the last pass) is taken only by a request that sorts
// behind every waiting one: with accounts, by its score, not its priority alone.
TEST(FairShareOrder, TheKeptPlanIsTakenOnlyByARequestThatSortsLast) {
  for (bool keepPlans : {true, false}) {
    PoolState s = fairPool();
    TimePoint now = t0();
    const std::string a = s.submit(parseRequest("8 owner=alice"), now).lease->id;
    s.release(a, "alice", false, now += hours(10));
    const std::string full = s.submit(parseRequest("8 owner=ops max=600"), now).lease->id;
    (void)full;
    std::vector<int64_t> tickets;
    for (const char* who : {"alice", "alice", "bob", "alice", "bob"}) {
      if (!keepPlans) s.tick(now);
      const SubmitResult r = s.submit(parseRequest(std::string("4 owner=") + who), now += seconds(1));
      ASSERT_GT(r.ticket, 0);
      tickets.push_back(r.ticket);
    }
    s.tick(now);
    EXPECT_EQ(queueOwners(s), (std::vector<std::string>{"bob", "bob", "alice", "alice", "alice"}));
    EXPECT_EQ(s.plannedStart(tickets[2]), t0() + hours(10) + seconds(600));
    EXPECT_EQ(s.plannedStart(tickets[4]), t0() + hours(10) + seconds(600));
    EXPECT_EQ(s.checkInvariants(), "");
  }
}

}  // namespace
}  // namespace poolrun::pool
