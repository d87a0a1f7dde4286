#pragma once

// Counts heap allocations made by any code of the process (the plugin's own static C++ runtime
// included: it calls malloc, which this binary replaces) while an AllocationCounter is alive.
// Not available in sanitizer builds, which replace malloc themselves.

namespace poolrun::test {

bool countingMallocAvailable();

class AllocationCounter {
 public:
  AllocationCounter();
  ~AllocationCounter();
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;
  long count() const;
};

}  // namespace poolrun::test
