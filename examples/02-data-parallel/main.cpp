// poolrun-data-parallel: data-parallel training in its smallest form. Linear regression on a
// generated data set that every rank can make for itself; each rank takes its shard of the samples,
// computes the gradient of its shard, and an allreduce sums the gradients of all ranks every step.
// The weights are the same on every rank, and the same for any number of ranks (up to the rounding
// of the sum's order).
//
//   poolrun -n 4 poolrun-data-parallel [--samples N] [--features D] [--steps S] [--lr R]
//                                      [--backend nccl|mpi|auto] [--out FILE]

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "poolrun/runtime/runtime.hpp"

namespace {

using namespace poolrun::runtime;

// A deterministic stream of numbers in [-1, 1) keyed by (sample, column): every rank, and every rank
// count, sees the same data set.
double uniform(uint64_t sample, uint64_t column) {
  uint64_t z = sample * 0x9E3779B97F4A7C15ULL + column * 0xBF58476D1CE4E5B9ULL + 0x94D049BB133111EBULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(1ULL << 52) - 1.0;
}

struct Options {
  long samples = 8192;
  int features = 8;
  int steps = 300;
  double lr = 0.5;
  BackendChoice backend = BackendChoice::kAuto;
  std::string out;
};

template <typename T>
T number(const std::string& option, const std::string& text, T min) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min) {
    throw poolrun::badInput(option + " '" + text + "': expected a number of at least " + std::to_string(min));
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) throw poolrun::badInput("unknown option or missing value: '" + a + "'");
    std::string v = argv[++i];
    if (a == "--samples") {
      o.samples = number<long>(a, v, 1);
    } else if (a == "--features") {
      o.features = number<int>(a, v, 1);
    } else if (a == "--steps") {
      o.steps = number<int>(a, v, 0);
    } else if (a == "--lr") {
      o.lr = number<double>(a, v, 0.0);
    } else if (a == "--backend") {
      o.backend = backendChoiceFromString(v);
    } else if (a == "--out") {
      o.out = v;
    } else {
      throw poolrun::badInput("unknown option '" + a +
                              "' (use --samples, --features, --steps, --lr, --backend, --out)");
    }
  }
  return o;
}

int train(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "poolrun-data-parallel: error: " << e.what() << "\n";
    return 2;
  }
  Runtime rt(&argc, &argv, {.backend = o.backend});
  Communicator& comm = rt.world();
  const int rank = comm.rank(), size = comm.size();
  const size_t d = static_cast<size_t>(o.features);

  // The true model and this rank's shard: samples rank, rank + size, ...
  std::vector<double> truth(d + 1);
  for (size_t j = 0; j <= d; ++j) truth[j] = 2.0 * uniform(0xFFFFFFFF, j);
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (long s = rank; s < o.samples; s += size) {
    std::vector<double> row(d);
    double target = truth[d];
    for (size_t j = 0; j < d; ++j) {
      row[j] = uniform(static_cast<uint64_t>(s), j);
      target += truth[j] * row[j];
    }
    y.push_back(target + 0.01 * uniform(static_cast<uint64_t>(s), 1000));
    x.push_back(std::move(row));
  }

  // Gradient of the mean squared error, summed over every rank's samples: [dw..., db, loss].
  std::vector<double> w(d + 1, 0.0), grad(d + 2);
  Buffer buffer(comm, grad.size() * sizeof(double));
  double loss = 0;
  for (int step = 0; step < o.steps; ++step) {
    std::fill(grad.begin(), grad.end(), 0.0);
    for (size_t i = 0; i < x.size(); ++i) {
      double err = w[d] - y[i];
      for (size_t j = 0; j < d; ++j) err += w[j] * x[i][j];
      for (size_t j = 0; j < d; ++j) grad[j] += err * x[i][j];
      grad[d] += err;
      grad[d + 1] += err * err;
    }
    comm.copyIn(buffer.data(), grad.data(), grad.size() * sizeof(double));
    comm.allReduce(buffer.data(), buffer.data(), grad.size(), DataType::kFloat64, ReduceOp::kSum);
    comm.copyOut(grad.data(), buffer.data(), grad.size() * sizeof(double));
    for (size_t j = 0; j <= d; ++j) w[j] -= o.lr * 2.0 * grad[j] / static_cast<double>(o.samples);
    loss = grad[d + 1] / static_cast<double>(o.samples);
  }

  // Every rank must hold the same weights: rank 0's, broadcast, compared here.
  std::vector<double> reference = w;
  comm.copyIn(buffer.data(), reference.data(), reference.size() * sizeof(double));
  comm.broadcast(buffer.data(), buffer.data(), reference.size(), DataType::kFloat64, 0);
  comm.copyOut(reference.data(), buffer.data(), reference.size() * sizeof(double));
  if (reference != w) {
    std::cerr << "poolrun-data-parallel: error: rank " << rank << " holds other weights than rank 0\n";
    return 1;
  }
  if (rank == 0) {
    double err = 0;
    for (size_t j = 0; j <= d; ++j) err = std::max(err, std::fabs(w[j] - truth[j]));
    std::printf("ranks %d, %ld samples, %d steps: loss %.6g, largest weight error %.3g\n", size, o.samples,
                o.steps, loss, err);
    if (!o.out.empty()) {
      nlohmann::json doc = {
          {"ranks", size}, {"steps", o.steps}, {"loss", loss}, {"weights", w}, {"truth", truth}};
      std::ofstream(o.out) << doc.dump() << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return train(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "poolrun-data-parallel: error: " << e.what() << "\n";
    return 1;
  }
}
