// pool_stress_client URI STATE_DIR TOKEN OWNER ITERATIONS SEED OUTFILE
// Acquires 1-8 GPUs, holds them briefly, releases them, ITERATIONS times. After every
// acknowledged change it appends a line to OUTFILE (flushed), with CLOCK_MONOTONIC nanoseconds:
//   A LEASE T_AFTER_ACQUIRE NODE:INDEX...   the lease was granted (held from T on)
//   r LEASE T_BEFORE_RELEASE                a release is about to be sent (held until T at least; whether
//                                           it was released is unknown until R)
//   R LEASE T_BEFORE_RELEASE                the release was acknowledged (held until T at least)
//   E MESSAGE                               a call failed; the client stops

#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "poolrun/pool/control.hpp"
#include "poolrun/pool/open_pool.hpp"

int main(int argc, char** argv) {
  using namespace poolrun::pool;
  if (argc != 8) {
    std::cerr << "usage: pool_stress_client URI STATE_DIR TOKEN OWNER ITERATIONS SEED OUTFILE\n";
    return 2;
  }
  std::ofstream out(argv[7], std::ios::app);
  auto now = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  try {
    ClientOptions o;
    o.state_dir = argv[2];
    o.token = argv[3];
    o.owner = argv[4];
    o.role = "user";
    std::unique_ptr<PoolClient> pool = openPool(argv[1], o);
    std::mt19937 rng(static_cast<unsigned>(std::stoul(argv[6])));
    int iterations = std::stoi(argv[5]);
    for (int i = 0; i < iterations; ++i) {
      LeaseRequest r;
      r.gpus = std::uniform_int_distribution<int>(1, 8)(rng);
      r.ttl = std::chrono::seconds(600);
      r.job_name = "stress";
      Lease l = pool->acquire(r);
      out << "A " << l.id << " " << now();
      for (const GpuRef& g : l.gpus) out << " " << g.node << ":" << g.index;
      out << std::endl;
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::uniform_int_distribution<int>(0, 2000)(rng)));
      auto before = now();
      out << "r " << l.id << " " << before << std::endl;
      pool->release(l.id);
      out << "R " << l.id << " " << before << std::endl;
    }
    return 0;
  } catch (const std::exception& e) {
    out << "E " << e.what() << std::endl;
    return 1;
  }
}
