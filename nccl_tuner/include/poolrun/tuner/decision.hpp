#pragma once

// The decision table: for one communicator, per collective and size range, the valid cells ranked by
// estimated time (the order `poolrun tuner explain` prints) and the rules that apply. Built once at
// init; choose() then only reads it, so that the plugin's getCollInfo does no allocation, no I/O and
// no locking.
//
// Size ranges: one per power of two, [2^b, 2^(b+1)), ranked at its lower end 2^b (so the decision at
// a power of two is exactly what explain shows), split further where a rule's size range begins or
// ends.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "poolrun/tuner/config.hpp"
#include "poolrun/tuner/model.hpp"
#include "poolrun/tuner/types.hpp"

namespace poolrun::tuner {

struct Candidate {
  Cell cell;
  double time_us = 0;
  bool measured = false;
};

struct Choice {
  Cell cell;
  int channels = 0;     // 0: leave NCCL's channel count
  int rule = -1;        // index into the configuration's rules, or -1 for the model's ranking
  double time_us = -1;  // the estimate of the chosen cell, or -1 where the model has none
};

class DecisionTable {
 public:
  // Throws ConfigError where the configuration cannot model this communicator (see CostModel). A
  // configuration without hardware (CSV rules only) builds a table where only rules decide.
  static DecisionTable build(const TunerConfig& config, CommShape shape);

  // The cell NCCL should run. `costTable` is NCCL's contiguous numAlgo x numProto table; a negative
  // entry is a cell NCCL ruled out and is never chosen. Rules come first (in their order, those whose
  // numPipeOps/regBuff match, taking the cheapest valid cell they allow), then the ranked candidates.
  // Returns false where nothing applies: leave NCCL's choice. No allocation, never throws.
  bool choose(Coll coll, std::uint64_t nBytes, int numPipeOps, int regBuff, const float* costTable,
              int numAlgo, int numProto, Choice* out) const noexcept;

  // The ranked valid candidates for the size range holding nBytes (empty without a model).
  std::span<const Candidate> candidates(Coll coll, std::uint64_t nBytes) const noexcept;

  const CostModel* model() const { return model_.get(); }
  const CommShape& shape() const { return shape_; }

 private:
  struct CompactRule {
    int pipeOps = -1;
    int regBuff = -1;
    int algo = -1;  // -1: any
    int proto = -1;
    int channels = 0;
    int index = 0;  // in the configuration's rules
  };
  struct Segment {
    std::uint64_t minBytes = 0;
    std::uint32_t candBegin = 0;
    std::uint32_t ruleBegin = 0;
    std::uint16_t ruleCount = 0;
    std::uint8_t candCount = 0;
  };
  struct PerColl {
    std::vector<Segment> segments;          // sorted by minBytes, the first at 0
    std::array<std::uint16_t, 65> first{};  // per bit width of nBytes, the segment holding 2^(b-1)
  };

  const Segment& segment(Coll coll, std::uint64_t nBytes) const noexcept;

  CommShape shape_;
  std::shared_ptr<const CostModel> model_;
  std::array<PerColl, kNumColls> colls_;
  std::vector<Candidate> candidates_;
  std::vector<CompactRule> rules_;  // flattened per segment
};

}  // namespace poolrun::tuner
