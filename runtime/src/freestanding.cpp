// What poolrun-rank needs from a C library when it has none: a start, and the four memory
// functions the compiler may call. Compiled without builtins, so that the loops below are not
// turned back into calls to themselves.

#include <cstddef>

#include "core/system.hpp"
#include "rank_main.hpp"

extern "C" {

void* memcpy(void* to, const void* from, size_t n) {
  auto* d = static_cast<unsigned char*>(to);
  const auto* s = static_cast<const unsigned char*>(from);
  while (n-- > 0) *d++ = *s++;
  return to;
}

void* memmove(void* to, const void* from, size_t n) {
  auto* d = static_cast<unsigned char*>(to);
  const auto* s = static_cast<const unsigned char*>(from);
  if (d < s) {
    while (n-- > 0) *d++ = *s++;
  } else {
    while (n-- > 0) d[n] = s[n];
  }
  return to;
}

void* memset(void* to, int c, size_t n) {
  auto* d = static_cast<unsigned char*>(to);
  while (n-- > 0) *d++ = static_cast<unsigned char>(c);
  return to;
}

int memcmp(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (; n > 0; --n, ++x, ++y) {
    if (*x != *y) return *x < *y ? -1 : 1;
  }
  return 0;
}

// A pure virtual function called: a broken invariant.
void __cxa_pure_virtual() {
  poolrun::runtime::core::sys::exit(127);
}

// Set by the linker around the constructors of objects with static storage (none today; the
// core initialises everything at compile time, but one added later still runs).
extern void (*__init_array_start[])(int, char**, char**) __attribute__((weak));
extern void (*__init_array_end[])(int, char**, char**) __attribute__((weak));

// The kernel starts a process with argc, argv, NULL, envp, NULL, auxv on the stack.
[[noreturn]] void poolrunRankStart(long* stack) {
  int argc = static_cast<int>(stack[0]);
  char** argv = reinterpret_cast<char**>(stack + 1);
  char** envp = argv + argc + 1;
  for (auto* init = __init_array_start; init != __init_array_end; ++init) (*init)(argc, argv, envp);
  poolrun::runtime::core::sys::exit(poolrun::runtime::core::rankMain(argc, argv, envp));
}

}  // extern "C"

#if defined(__x86_64__)
__asm__(
    ".text\n.global _start\n.type _start,@function\n"
    "_start:\n"
    "  xor %rbp, %rbp\n"
    "  mov %rsp, %rdi\n"
    "  and $-16, %rsp\n"
    "  call poolrunRankStart\n"
    "  hlt\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n.global _start\n.type _start,%function\n"
    "_start:\n"
    "  mov x29, #0\n"
    "  mov x30, #0\n"
    "  mov x0, sp\n"
    "  and sp, x0, #-16\n"
    "  bl poolrunRankStart\n");
#else
#error "poolrun-rank without a C library is built for x86_64 and aarch64 only"
#endif
