#pragma once

// The frames of an agent's launch port (docs/launch.md), both sides: poold-agent's launch server
// and poolrun-rsh. A frame is a type byte, a 4-byte big-endian length and that many bytes.
// Header-only: poolrun-rsh links nothing of poolrun's but this.

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace poolrun::common {

inline constexpr char kLaunchFrameStdin = 'I', kLaunchFrameStdinClosed = 'C', kLaunchFrameStdout = 'O',
                      kLaunchFrameStderr = 'E', kLaunchFrameExit = 'X', kLaunchFrameRefused = 'R';
inline constexpr size_t kMaxLaunchFrameBytes = size_t{1} << 20;

// Sends all of `data` on socket `fd` (no SIGPIPE); false where the peer is gone.
inline bool sendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

inline bool sendFrame(int fd, char type, const char* data, size_t size) {
  const char head[5] = {type, static_cast<char>(size >> 24), static_cast<char>(size >> 16),
                        static_cast<char>(size >> 8), static_cast<char>(size)};
  return sendAll(fd, head, sizeof head) && sendAll(fd, data, size);
}
inline bool sendFrame(int fd, char type, const std::string& text) {
  return sendFrame(fd, type, text.data(), text.size());
}

// Frames read from a socket as they come.
class FrameReader {
 public:
  // Appends what the socket has; false at its end or an error.
  bool fill(int fd) {
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) return false;
    data_.append(buf, static_cast<size_t>(n));
    return true;
  }
  // The next whole frame; nullopt where none is in yet. `tooLong` is set (and nothing more read)
  // where a frame says it is longer than kMaxLaunchFrameBytes: the peer is broken or hostile.
  std::optional<std::pair<char, std::string>> next(bool& tooLong) {
    tooLong = false;
    if (data_.size() < 5) return std::nullopt;
    const auto* h = reinterpret_cast<const unsigned char*>(data_.data());
    const size_t size = (size_t{h[1]} << 24) | (size_t{h[2]} << 16) | (size_t{h[3]} << 8) | h[4];
    if (size > kMaxLaunchFrameBytes) {
      tooLong = true;
      return std::nullopt;
    }
    if (data_.size() < 5 + size) return std::nullopt;
    std::pair<char, std::string> out{data_[0], data_.substr(5, size)};
    data_.erase(0, 5 + size);
    return out;
  }
  // What was read and not taken as frames (the request line before them).
  std::string& buffered() { return data_; }

 private:
  std::string data_;
};

}  // namespace poolrun::common
