#pragma once

// Text without the C++ library: a view of characters and a fixed-capacity line to build messages
// in. The rank core (this folder) runs in poolrun-rank, which is linked statically against musl
// (C headers only) and starts in front of every rank, and in libpoolrun_runtime; so it allocates
// nothing and throws nothing.

#include <stddef.h>
#include <stdint.h>

namespace poolrun::runtime::core {

constexpr size_t length(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

// A view of `size` characters; `data` is null for a variable that is not set, which differs from
// one set to the empty string.
struct Text {
  const char* data = nullptr;
  size_t size = 0;

  constexpr Text() = default;
  constexpr Text(const char* s) : data(s), size(s == nullptr ? 0 : length(s)) {}  // NOLINT: implicit
  constexpr Text(const char* s, size_t n) : data(s), size(n) {}

  constexpr bool isSet() const { return data != nullptr; }
  constexpr bool empty() const { return size == 0; }
  constexpr char operator[](size_t i) const { return data[i]; }
  constexpr bool operator==(Text other) const {
    if (size != other.size) return false;
    for (size_t i = 0; i < size; ++i) {
      if (data[i] != other.data[i]) return false;
    }
    return true;
  }
  constexpr bool startsWith(Text prefix) const {
    return size >= prefix.size && Text(data, prefix.size) == prefix;
  }
  // The position of the first `c` at or after `from`, or `size`.
  constexpr size_t find(char c, size_t from = 0) const {
    for (size_t i = from; i < size; ++i) {
      if (data[i] == c) return i;
    }
    return size;
  }
  constexpr Text sub(size_t from, size_t n = SIZE_MAX) const {
    if (from > size) from = size;
    return {data + from, n < size - from ? n : size - from};
  }
};

// `text` as a decimal number in 0..max: digits only, no sign, no spaces.
constexpr bool parseNumber(Text text, long max, long& out) {
  if (text.empty()) return false;
  long n = 0;
  for (size_t i = 0; i < text.size; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    n = n * 10 + (text[i] - '0');
    if (n > max) return false;
  }
  out = n;
  return true;
}

// Text under construction (a message, a path, a list), cut at its capacity: a message is then
// marked with "...", and truncated() says that a path or a value would be wrong.
template <size_t kCapacityChars>
class BasicLine {
 public:
  static constexpr size_t kCapacity = kCapacityChars;

  BasicLine& add(Text t) {
    for (size_t i = 0; i < t.size; ++i) put(t[i]);
    return *this;
  }
  BasicLine& add(const char* s) { return add(Text(s)); }
  BasicLine& add(long n) {
    char digits[24];
    size_t k = 0;
    unsigned long u = n < 0 ? 0UL - static_cast<unsigned long>(n) : static_cast<unsigned long>(n);
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (n < 0) put('-');
    while (k > 0) put(digits[--k]);
    return *this;
  }
  BasicLine& add(int n) { return add(static_cast<long>(n)); }
  BasicLine& add(unsigned n) { return add(static_cast<long>(n)); }
  BasicLine& add(size_t n) { return add(static_cast<long>(n)); }
  // `text` between single quotes, as the messages quote a value.
  BasicLine& quoted(Text t) { return add("'").add(t).add("'"); }
  void clear() {
    size_ = 0;
    chars_[0] = '\0';
    truncated_ = false;
  }

  Text text() const { return {chars_, size_}; }
  const char* c_str() const { return chars_; }
  bool empty() const { return size_ == 0; }
  bool truncated() const { return truncated_; }

 private:
  void put(char c) {
    if (size_ + 1 < kCapacity) {
      chars_[size_++] = c;
      chars_[size_] = '\0';
    } else if (!truncated_) {
      truncated_ = true;
      for (size_t i = kCapacity - 4; i < kCapacity - 1; ++i) chars_[i] = '.';
    }
  }

  char chars_[kCapacity] = {};
  size_t size_ = 0;
  bool truncated_ = false;
};

using Line = BasicLine<1024>;
// Room for any list of CPUs or NUMA nodes a kernel can have (8192 CPUs: at most 40 KB).
using LongLine = BasicLine<65536>;

// The variables of a rank's environment, by name; Text() for one that is not set.
class Variables {
 public:
  virtual Text get(const char* name) const = 0;

 protected:
  ~Variables() = default;
};

// Receives variables (a rank's plan, the torch.distributed set); the values may live only for the
// call, so an implementation copies them. Returns false to stop (out of room).
class VariableSink {
 public:
  virtual bool set(Text name, Text value) = 0;

 protected:
  ~VariableSink() = default;
};

}  // namespace poolrun::runtime::core
