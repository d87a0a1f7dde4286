#pragma once

// The one exception hierarchy of poolrun. It lives in topo_probe, the lowest part, so that every
// other part can throw and catch it. Messages carry the offending value and say what to do.

#include <stdexcept>
#include <string>

namespace poolrun {

enum class ErrorCode {
  kBadInput,     // a file, option or document the user gave is wrong (exit status 2)
  kNotFound,     // a file or device that was named does not exist
  kUnsupported,  // valid, but this build or machine cannot do it
  kIo,           // the operating system refused (permissions, disk, ...)
  kInternal,     // a bug in poolrun
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Bad input in a file: "FILE: WHAT" (line numbers belong in WHAT where known).
inline Error badInput(const std::string& message) {
  return Error(ErrorCode::kBadInput, message);
}

}  // namespace poolrun
