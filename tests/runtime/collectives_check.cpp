// Every collective of the runtime's communicator, out of place and in place, checked on every rank.
// Run by the integration tests through poolrun (MPI backend) and by the gpu tier (NCCL backend).
// Exits 0 and prints "collectives OK" on rank 0 when every check passed on every rank.
//   collectives_check [--backend mpi|nccl|auto]

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "poolrun/runtime/runtime.hpp"

namespace {

using namespace poolrun::runtime;

int failures = 0;

void expect(bool ok, int rank, const std::string& what) {
  if (!ok) {
    ++failures;
    std::cerr << "rank " << rank << ": " << what << " is wrong\n";
  }
}

std::vector<double> run(Communicator& comm, const std::vector<double>& in, size_t outCount,
                        void (*op)(Communicator&, const void*, void*), bool inPlaceAt, size_t inPlaceOffset) {
  Buffer a(comm, std::max(in.size(), outCount) * sizeof(double));
  Buffer b(comm, outCount * sizeof(double));
  std::vector<double> out(outCount);
  if (inPlaceAt) {
    // The input sits at its in-place position inside the output buffer (or is the whole buffer).
    std::vector<double> whole(std::max(in.size(), outCount), -1.0);
    std::copy(in.begin(), in.end(), whole.begin() + static_cast<long>(inPlaceOffset));
    comm.copyIn(a.data(), whole.data(), whole.size() * sizeof(double));
    char* base = static_cast<char*>(a.data());
    op(comm, base + inPlaceOffset * sizeof(double), a.data());
    comm.copyOut(out.data(), a.data(), outCount * sizeof(double));
  } else {
    comm.copyIn(a.data(), in.data(), in.size() * sizeof(double));
    op(comm, a.data(), b.data());
    comm.copyOut(out.data(), b.data(), outCount * sizeof(double));
  }
  return out;
}

}  // namespace

int check(int argc, char** argv) {
  BackendChoice backend = BackendChoice::kAuto;
  if (argc == 3 && std::string(argv[1]) == "--backend") backend = backendChoiceFromString(argv[2]);
  Runtime rt(&argc, &argv, {.backend = backend});
  Communicator& comm = rt.world();
  const int rank = comm.rank();
  const size_t n = static_cast<size_t>(comm.size());
  const size_t count = 1000;
  std::vector<double> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<double>(rank + 1) * static_cast<double>(i % 7 + 1);
  double ranksSum = static_cast<double>(n * (n + 1) / 2);

  for (bool inPlace : {false, true}) {
    std::string mode = inPlace ? " (in place)" : "";
    auto sum = run(
        comm, mine, count,
        [](Communicator& c, const void* s, void* r) {
          c.allReduce(s, r, 1000, DataType::kFloat64, ReduceOp::kSum);
        },
        inPlace, 0);
    for (size_t i = 0; i < count; ++i)
      expect(sum[i] == ranksSum * static_cast<double>(i % 7 + 1), rank, "allreduce sum" + mode);
    auto avg = run(
        comm, mine, count,
        [](Communicator& c, const void* s, void* r) {
          c.allReduce(s, r, 1000, DataType::kFloat64, ReduceOp::kAvg);
        },
        inPlace, 0);
    for (size_t i = 0; i < count; ++i) {
      double want = ranksSum / static_cast<double>(n) * static_cast<double>(i % 7 + 1);
      expect(std::abs(avg[i] - want) < 1e-9 * want, rank, "allreduce avg" + mode);
    }
    auto max = run(
        comm, mine, count,
        [](Communicator& c, const void* s, void* r) {
          c.allReduce(s, r, 1000, DataType::kFloat64, ReduceOp::kMax);
        },
        inPlace, 0);
    for (size_t i = 0; i < count; ++i)
      expect(max[i] == static_cast<double>(n) * static_cast<double>(i % 7 + 1), rank, "allreduce max" + mode);

    static size_t slice;
    slice = 10;
    std::vector<double> part(mine.begin(), mine.begin() + 10);
    auto gathered = run(
        comm, part, 10 * n,
        [](Communicator& c, const void* s, void* r) { c.allGather(s, r, slice, DataType::kFloat64); },
        inPlace, 10 * static_cast<size_t>(rank));
    for (size_t r = 0; r < n; ++r) {
      for (size_t i = 0; i < 10; ++i) {
        expect(gathered[r * 10 + i] == static_cast<double>(r + 1) * static_cast<double>(i % 7 + 1), rank,
               "allgather" + mode);
      }
    }

    std::vector<double> all(10 * n);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<double>(rank + 1) * static_cast<double>(i);
    std::vector<double> scattered;
    if (inPlace) {
      Buffer a(comm, all.size() * sizeof(double));
      comm.copyIn(a.data(), all.data(), all.size() * sizeof(double));
      char* mineAt = static_cast<char*>(a.data()) + 10 * static_cast<size_t>(rank) * sizeof(double);
      comm.reduceScatter(a.data(), mineAt, 10, DataType::kFloat64, ReduceOp::kSum);
      scattered.resize(10);
      comm.copyOut(scattered.data(), mineAt, 10 * sizeof(double));
    } else {
      scattered = run(
          comm, all, 10,
          [](Communicator& c, const void* s, void* r) {
            c.reduceScatter(s, r, slice, DataType::kFloat64, ReduceOp::kSum);
          },
          false, 0);
    }
    for (size_t i = 0; i < 10; ++i) {
      expect(scattered[i] == ranksSum * static_cast<double>(10 * static_cast<size_t>(rank) + i), rank,
             "reduce-scatter" + mode);
    }

    auto bcast = run(
        comm, mine, count,
        [](Communicator& c, const void* s, void* r) {
          c.broadcast(s, r, 1000, DataType::kFloat64, c.size() - 1);
        },
        inPlace, 0);
    for (size_t i = 0; i < count; ++i) {
      expect(bcast[i] == static_cast<double>(n) * static_cast<double>(i % 7 + 1), rank, "broadcast" + mode);
    }
  }
  comm.barrier();

  // A bad call names the rank and the operation.
  try {
    Buffer b(comm, 8);
    comm.broadcast(b.data(), b.data(), 1, DataType::kFloat64, static_cast<int>(n) + 5);
    expect(false, rank, "broadcast from a root that does not exist");
  } catch (const CollectiveError& e) {
    std::string what = e.what();
    expect(e.rank() == rank && what.find("rank " + std::to_string(rank) + ": broadcast failed: root") == 0,
           rank, "the error message '" + what + "'");
  }

  int64_t bad = failures, total = 0;
  Buffer b(comm, sizeof bad);
  comm.copyIn(b.data(), &bad, sizeof bad);
  comm.allReduce(b.data(), b.data(), 1, DataType::kInt64, ReduceOp::kSum);
  comm.copyOut(&total, b.data(), sizeof total);
  if (rank == 0)
    std::printf(total == 0 ? "collectives OK (%s)\n" : "collectives FAILED (%s)\n", rt.description().c_str());
  return total == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return check(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "collectives_check: error: " << e.what() << "\n";
    return 1;
  }
}
