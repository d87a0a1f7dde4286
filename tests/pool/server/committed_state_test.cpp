// CommittedState's change without waiting (tryApply, settle): what poold's network thread applies
// heartbeats with. A change runs only where the state's lock is free, and its result waits for a
// commit exactly where mutate's would.

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>

#include "inventory.hpp"
#include "poolrun/pool/committed_state.hpp"

namespace poolrun::pool {
namespace {

// A store that holds nothing and counts what is committed.
class CountingStore : public StateStore {
 public:
  explicit CountingStore(int& commits) : commits_(commits) {}
  void load(PoolState&) override {}
  void begin() override {}
  void write(const PoolState&, const Dirty&) override {}
  void commit() override { ++commits_; }
  void rollback() noexcept override {}
  uint64_t generation() const override { return static_cast<uint64_t>(commits_); }
  std::string where() const override { return "memory"; }

 private:
  int& commits_;
};

using Clean = CommittedState::Clean;

TEST(CommittedStateTryApply, RunsNothingWhileTheLockIsHeld) {
  int commits = 0;
  CommittedState state(std::make_unique<CountingStore>(commits));
  std::promise<void> entered, leave;
  std::shared_future<void> left = leave.get_future().share();
  auto reader = std::async(std::launch::async, [&] {
    return state.read([&](const PoolState&) {
      entered.set_value();
      left.wait();
      return 0;
    });
  });
  entered.get_future().wait();
  bool ran = false;
  auto busy = state.tryApply(
      [&](PoolState&, TimePoint) {
        ran = true;
        return 1;
      },
      Clean::kNothing);
  EXPECT_FALSE(busy.has_value());
  EXPECT_FALSE(ran);
  leave.set_value();
  reader.get();
  auto free = state.tryApply([](PoolState&, TimePoint) { return 2; }, Clean::kNothing);
  ASSERT_TRUE(free.has_value());
  EXPECT_EQ(state.settle(std::move(*free)), 2);
}

TEST(CommittedStateTryApply, WaitsForACommitWhereMutateWould) {
  int commits = 0;
  CommittedState state(std::make_unique<CountingStore>(commits));
  // Nothing dirty and nothing earlier to wait for: settled at once, nothing committed.
  auto clean = state.tryApply([](PoolState&, TimePoint) { return 1; }, Clean::kNothing);
  ASSERT_TRUE(clean.has_value());
  EXPECT_FALSE(clean->wait);
  EXPECT_EQ(state.settle(std::move(*clean)), 1);
  EXPECT_EQ(commits, 0);
  // A change that marks something dirty waits for its commit.
  state.mutate([](PoolState& s, TimePoint now) {
    test::addInventory(s, "n01/gpu[0-7]", now);  // (which takes what it marked dirty)
    return 0;
  });
  auto dirty = state.tryApply(
      [](PoolState& s, TimePoint) {
        s.setNodeState("n01", NodeState::kDraining);
        return 3;
      },
      Clean::kNothing);
  ASSERT_TRUE(dirty.has_value());
  EXPECT_TRUE(dirty->wait);
  EXPECT_EQ(commits, 0);
  EXPECT_EQ(state.settle(std::move(*dirty)), 3);
  EXPECT_EQ(commits, 1);
  // One that asks to see the changes before it waits even where it changed nothing (none to commit).
  auto earlier = state.tryApply([](PoolState&, TimePoint) { return 4; }, Clean::kEarlier);
  ASSERT_TRUE(earlier.has_value());
  EXPECT_TRUE(earlier->wait);
  EXPECT_EQ(state.settle(std::move(*earlier)), 4);
  EXPECT_EQ(commits, 1);
  // What the change throws comes out of settle(), after the commit.
  auto failed = state.tryApply([](PoolState&, TimePoint) -> int { throw std::runtime_error("refused"); },
                               Clean::kNothing);
  ASSERT_TRUE(failed.has_value());
  EXPECT_TRUE(failed->wait);
  EXPECT_THROW(state.settle(std::move(*failed)), std::runtime_error);
}

}  // namespace
}  // namespace poolrun::pool
