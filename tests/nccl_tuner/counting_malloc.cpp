#include "counting_malloc.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>

namespace {
std::atomic<bool> gCounting{false};
std::atomic<long> gAllocations{0};

[[maybe_unused]] void note() {
  if (gCounting.load(std::memory_order_relaxed)) gAllocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#ifdef POOLRUN_COUNTING_MALLOC
// glibc's own entry points, which the replacements below forward to.
extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);

void* malloc(size_t size) {
  note();
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) {
  note();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) {
  note();
  return __libc_realloc(p, size);
}
void free(void* p) {
  __libc_free(p);
}
void* memalign(size_t alignment, size_t size) {
  note();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) {
  note();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) {
  note();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}
#endif

namespace poolrun::test {

bool countingMallocAvailable() {
#ifdef POOLRUN_COUNTING_MALLOC
  return true;
#else
  return false;
#endif
}

AllocationCounter::AllocationCounter() {
  gAllocations.store(0);
  gCounting.store(true);
}

AllocationCounter::~AllocationCounter() {
  gCounting.store(false);
}

long AllocationCounter::count() const {
  return gAllocations.load();
}

}  // namespace poolrun::test
