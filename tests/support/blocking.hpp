#pragma once

// What readers of hostile input throw, for tests.
//
// errorOf: the message of the exception of type E that `read` throws, "" when it returns. Where `read` blocks
// on the FIFO `unblock` (a reader without O_NONBLOCK would), the FIFO is opened for writing and
// closed after 10 s, so that the read ends with EOF and the test fails rather than hangs.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <string>

#include "poolrun/common/error.hpp"

namespace poolrun::test {

template <class E>
std::string errorOf(const std::function<void()>& read, const std::filesystem::path& unblock = {}) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      read();
    } catch (const E& e) {
      return e.what();
    }
    return "";
  });
  if (!unblock.empty() && result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "reading the FIFO " << unblock << " blocked";
    int fd = ::open(unblock.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

// The message of the poolrun::Error (kBadInput, checked) that `fn` throws; "" when it returns.
inline std::string badInputMessage(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace poolrun::test
