#pragma once

// A set of logical CPUs named by their operating-system indexes, with the Linux cpulist text form
// ("0-11,96-107") that sysfs, taskset, Open MPI and the plan use.

#include <string>
#include <string_view>
#include <vector>

namespace poolrun::topo {

class CpuSet {
 public:
  CpuSet() = default;
  explicit CpuSet(std::vector<unsigned> cpus);

  // Parses a cpulist ("0-3,8,10-11"); an empty string is the empty set.
  // Throws poolrun::Error (kBadInput) naming the text on a malformed list.
  static CpuSet parseList(std::string_view text);
  // Parses a comma-separated hexadecimal mask, most significant 32-bit word first, as Linux
  // `local_cpus` and NCCL's `affinity` attribute write it ("00000000,00ffffff").
  static CpuSet parseMask(std::string_view text);

  std::string toList() const;
  // The mask form of parseMask(), at least `minWords` 32-bit words long.
  std::string toMask(size_t minWords = 1) const;

  const std::vector<unsigned>& cpus() const { return cpus_; }
  size_t size() const { return cpus_.size(); }
  bool empty() const { return cpus_.empty(); }
  bool contains(unsigned cpu) const;
  bool intersects(const CpuSet& other) const;
  CpuSet operator|(const CpuSet& other) const;
  CpuSet operator&(const CpuSet& other) const;
  bool operator==(const CpuSet&) const = default;

 private:
  std::vector<unsigned> cpus_;  // sorted, unique
};

}  // namespace poolrun::topo
