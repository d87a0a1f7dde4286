#include "poolrun/tuner/decision.hpp"

#include <algorithm>
#include <bit>
#include <functional>
#include <limits>
#include <queue>
#include <set>

namespace poolrun::tuner {
namespace {

// The flattened rules of one table (24 bytes each): rules that overlap over many segments repeat in
// each; past this a configuration is refused rather than taking gigabytes in every NCCL process.
constexpr size_t kMaxTableRules = size_t{1} << 21;

}  // namespace

DecisionTable DecisionTable::build(const TunerConfig& config, CommShape shape) {
  DecisionTable t;
  t.shape_ = shape;
  if (config.has_hardware) t.model_ = std::make_shared<const CostModel>(config, shape);

  std::vector<int> shapeRules;
  for (size_t i = 0; i < config.rules.size(); ++i) {
    const Rule& r = config.rules[i];
    if (r.nnodes >= 0 && r.nnodes != shape.nnodes) continue;
    if (r.nranks >= 0 && r.nranks != shape.nranks) continue;
    shapeRules.push_back(static_cast<int>(i));
  }

  for (int c = 0; c < kNumColls; ++c) {
    const auto coll = static_cast<Coll>(c);
    std::vector<int> collRules;  // ascending: the order rules are tried in
    std::set<std::uint64_t> starts = {0};
    for (int b = 0; b < 64; ++b) starts.insert(std::uint64_t{1} << b);
    for (int idx : shapeRules) {
      const Rule& r = config.rules[static_cast<size_t>(idx)];
      if (r.coll && *r.coll != coll) continue;
      collRules.push_back(idx);
      starts.insert(r.min_bytes);
      if (r.max_bytes != std::numeric_limits<std::uint64_t>::max()) starts.insert(r.max_bytes + 1);
    }
    if (starts.size() > std::numeric_limits<std::uint16_t>::max()) {
      throw ConfigError("tuner config " + config.origin + ": " + std::to_string(config.rules.size()) +
                        " rules split the sizes too finely (merge rules with adjacent size ranges)");
    }
    // A sweep over the segment starts: the rules whose range holds the start, kept in rule order.
    // Linear in rules and segments (20,000 rules: milliseconds, where testing every rule against every
    // segment took most of a second), plus what the segments hold.
    auto ruleAt = [&](int idx) -> const Rule& { return config.rules[static_cast<size_t>(idx)]; };
    std::vector<int> byMin = collRules;
    std::stable_sort(byMin.begin(), byMin.end(),
                     [&](int x, int y) { return ruleAt(x).min_bytes < ruleAt(y).min_bytes; });
    using End = std::pair<std::uint64_t, int>;  // max_bytes, rule
    std::priority_queue<End, std::vector<End>, std::greater<>> ends;
    std::set<int> active;
    size_t next = 0;
    PerColl& pc = t.colls_[static_cast<size_t>(c)];
    for (std::uint64_t start : starts) {
      for (; next < byMin.size() && ruleAt(byMin[next]).min_bytes <= start; ++next) {
        active.insert(byMin[next]);
        ends.emplace(ruleAt(byMin[next]).max_bytes, byMin[next]);
      }
      for (; !ends.empty() && ends.top().first < start; ends.pop()) active.erase(ends.top().second);
      if (active.size() > std::numeric_limits<std::uint16_t>::max() ||
          t.rules_.size() + active.size() > kMaxTableRules) {
        throw ConfigError(
            "tuner config " + config.origin + ": " + std::to_string(active.size()) + " rules overlap at " +
            std::to_string(start) +
            " bytes, too many for the plugin's table (make the size ranges of rules overlap less)");
      }
      Segment seg;
      seg.minBytes = start;
      seg.ruleBegin = static_cast<std::uint32_t>(t.rules_.size());
      for (int idx : active) {
        const Rule& r = ruleAt(idx);
        CompactRule cr;
        cr.pipeOps = r.pipe_ops;
        cr.regBuff = r.reg_buff;
        cr.algo = r.algo ? static_cast<int>(*r.algo) : -1;
        cr.proto = r.proto ? static_cast<int>(*r.proto) : -1;
        cr.channels = r.channels;
        cr.index = idx;
        t.rules_.push_back(cr);
      }
      seg.ruleCount = static_cast<std::uint16_t>(t.rules_.size() - seg.ruleBegin);
      seg.candBegin = static_cast<std::uint32_t>(t.candidates_.size());
      if (t.model_) {
        std::vector<Candidate> ranked;
        for (int a = 0; a < kNumAlgos; ++a) {
          for (int p = 0; p < kNumProtos; ++p) {
            const Cell cell{static_cast<Algo>(a), static_cast<Proto>(p)};
            if (!t.model_->valid(coll, cell)) continue;
            const Estimate e = t.model_->estimate(coll, cell, start);
            if (!(e.time_us < std::numeric_limits<double>::infinity())) continue;
            ranked.push_back({cell, e.time_us, e.measured});
          }
        }
        // Stable: equal times keep NCCL's order (lower algorithm, then lower protocol first).
        std::stable_sort(ranked.begin(), ranked.end(),
                         [](const Candidate& x, const Candidate& y) { return x.time_us < y.time_us; });
        t.candidates_.insert(t.candidates_.end(), ranked.begin(), ranked.end());
        seg.candCount = static_cast<std::uint8_t>(ranked.size());
      }
      pc.segments.push_back(seg);
    }
    for (int b = 0; b <= 64; ++b) {
      const std::uint64_t low = b == 0 ? 0 : std::uint64_t{1} << (b - 1);
      size_t i = 0;
      while (i + 1 < pc.segments.size() && pc.segments[i + 1].minBytes <= low) ++i;
      pc.first[static_cast<size_t>(b)] = static_cast<std::uint16_t>(i);
    }
  }
  return t;
}

const DecisionTable::Segment& DecisionTable::segment(Coll coll, std::uint64_t nBytes) const noexcept {
  const PerColl& pc = colls_[static_cast<size_t>(coll)];
  size_t i = pc.first[static_cast<size_t>(std::bit_width(nBytes))];
  while (i + 1 < pc.segments.size() && pc.segments[i + 1].minBytes <= nBytes) ++i;
  return pc.segments[i];
}

std::span<const Candidate> DecisionTable::candidates(Coll coll, std::uint64_t nBytes) const noexcept {
  const Segment& s = segment(coll, nBytes);
  return {candidates_.data() + s.candBegin, s.candCount};
}

bool DecisionTable::choose(Coll coll, std::uint64_t nBytes, int numPipeOps, int regBuff,
                           const float* costTable, int numAlgo, int numProto, Choice* out) const noexcept {
  if (costTable == nullptr || out == nullptr || numAlgo <= 0 || numProto <= 0) return false;
  if (static_cast<int>(coll) >= kNumColls) return false;
  const Segment& seg = segment(coll, nBytes);
  const Candidate* cands = candidates_.data() + seg.candBegin;
  auto open = [&](int a, int p) {
    // NCCL skips any negative cost; `>= 0` is also false for NaN.
    return a < numAlgo && p < numProto && costTable[a * numProto + p] >= 0.0f;
  };
  auto timeOf = [&](int a, int p) {
    for (int i = 0; i < seg.candCount; ++i) {
      if (static_cast<int>(cands[i].cell.algo) == a && static_cast<int>(cands[i].cell.proto) == p) {
        return cands[i].time_us;
      }
    }
    return -1.0;
  };
  for (std::uint32_t r = seg.ruleBegin; r < seg.ruleBegin + seg.ruleCount; ++r) {
    const CompactRule& rule = rules_[r];
    if (rule.pipeOps >= 0 && rule.pipeOps != numPipeOps) continue;
    if (rule.regBuff >= 0 && rule.regBuff != regBuff) continue;
    if (rule.algo >= 0 && rule.proto >= 0) {
      if (!open(rule.algo, rule.proto)) continue;
      *out = {{static_cast<Algo>(rule.algo), static_cast<Proto>(rule.proto)},
              rule.channels,
              rule.index,
              timeOf(rule.algo, rule.proto)};
      return true;
    }
    for (int i = 0; i < seg.candCount; ++i) {
      const int a = static_cast<int>(cands[i].cell.algo), p = static_cast<int>(cands[i].cell.proto);
      if ((rule.algo >= 0 && rule.algo != a) || (rule.proto >= 0 && rule.proto != p) || !open(a, p)) continue;
      *out = {cands[i].cell, rule.channels, rule.index, cands[i].time_us};
      return true;
    }
  }
  for (int i = 0; i < seg.candCount; ++i) {
    if (!open(static_cast<int>(cands[i].cell.algo), static_cast<int>(cands[i].cell.proto))) continue;
    *out = {cands[i].cell, 0, -1, cands[i].time_us};
    return true;
  }
  return false;
}

}  // namespace poolrun::tuner
