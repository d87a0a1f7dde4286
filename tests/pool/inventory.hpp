#pragma once

// Compact inventories and requests for table-driven pool tests.
//
// Inventory: clauses separated by ';'
//   n[01-04]/gpu[0-7]@leaf1 model=A100 mem=40   nodes with GPUs 0-7 under switch leaf1
//     [mig=0-1] [mig-after-reset=2]              GPUs in MIG mode, or switching to it at a reset
//     [layout=0-1:1g.10gb*7] [layout=2:3g.40gb*1+1g.10gb*4]
//                                                GPUs in MIG mode with those compute instances
//                                                (H100 80GB profiles; UUIDs MIG-<GPU>-<GPU instance>)
//   n01 leased 0-3 [for 100] [prio=1] [preemptible] [age=700] [owner=bob] [id=A] [elastic=2:8[:4]]
//                  [share=25[:GiB]]              (MPS shares of 25% of those GPUs' SMs and of the
//                                                GiB given, else 25% of an 80 GiB GPU's memory)
//                                                a lease of "other" on those GPUs (max 100 s;
//                                                created 700 s ago; named A for expectations;
//                                                elastic from 2 to 8 GPUs [4 per node], resized
//                                                at any time)
//     [nvl=rack1] [block=b1] [rail=a] [spine=s1]  the levels above the nodes (docs/placement.md)
//   n02 failed 1,3 | n03 draining | n04 down
// Request: "16 ppn=8 whole one-switch strict model=H100 mem=80 label=rack:r1 prio=5 max=100 owner=bob
//           preemptible upto=32 every=60" (the last two: elastic up to 32 GPUs, resized at most
//           every 60 s); "2 share=0.25 gpumem=10G": two MPS shares (poolrun --share, --gpu-memory)
// GPU lists print as "n01:0-3 n02:4-7".

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "poolrun/pool/state.hpp"

namespace poolrun::test {

// The tables' time zero: a fixed instant, 50 years after the epoch.
inline pool::TimePoint t0() {
  return pool::TimePoint(std::chrono::hours(24 * 365 * 50));
}

void addInventory(pool::PoolState& state, const std::string& spec, pool::TimePoint now);
pool::LeaseRequest parseRequest(const std::string& spec);
std::string gpuList(const std::vector<pool::GpuRef>& gpus);
// `state` written whole (its nodes, leases, queue and what it marked dirty) to a new SQLite state
// file `file`, and read back from it as a restarted poold reads it.
pool::PoolState throughStateFile(pool::PoolState& state, const std::filesystem::path& file);
// The ids of the leases under a preemption notice, sorted.
std::vector<std::string> leasesUnderNotice(const pool::PoolState& state);
// Node `node` of `state` registered by an agent ("poold-agent test") at `now`.
void registerAgent(pool::PoolState& state, const std::string& node, pool::TimePoint now);
// A heartbeat of agent node `node` with a sample of every GPU at SM utilisation `utilization`.
pool::Heartbeat heartbeatOf(const pool::PoolState& state, const std::string& node, double utilization);
// A pool of `spec` (addInventory's) whose nodes all have agents, registered at t0().
pool::PoolState livePool(const std::string& spec, pool::LiveOptions options = {});

}  // namespace poolrun::test
