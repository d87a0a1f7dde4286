#include "poolrun/pool/http_failures.hpp"

#include <array>

namespace poolrun::pool {
namespace {

// Rows of a failure (failure != kOther) come first: httpFailureFor takes the first of a failure.
constexpr std::array kFailures = {
    HttpFailure{401,
                "unauthorized",
                PoolFailure::kUnauthorized,
                ErrorCode::kBadInput,
                true,
                {},
                false,
                "; set POOLRUN_TOKEN or --token-file to a token poold knows"},
    HttpFailure{403, "forbidden", PoolFailure::kForbidden, ErrorCode::kBadInput, true},
    HttpFailure{404, "gone", PoolFailure::kGone, ErrorCode::kNotFound, false},
    HttpFailure{422, "never_fits", PoolFailure::kNeverFits, ErrorCode::kUnsupported, true, {}, true},
    HttpFailure{409, "not_now", PoolFailure::kTimeout, ErrorCode::kIo, false},
    HttpFailure{400, "bad_request", PoolFailure::kOther, ErrorCode::kBadInput, true},
    HttpFailure{404, "not_found", PoolFailure::kOther, ErrorCode::kNotFound, true},
    HttpFailure{413, "too_large", PoolFailure::kOther, ErrorCode::kBadInput, true, "request body too large"},
    HttpFailure{429, "too_many_queued", PoolFailure::kOther, ErrorCode::kIo, false},
    HttpFailure{500, "error", PoolFailure::kOther, ErrorCode::kIo, false},
};

const HttpFailure& row(int status, std::string_view reason) {
  for (const HttpFailure& f : kFailures)
    if (f.status == status && f.reason == reason) return f;
  return kFailures.back();
}

}  // namespace

std::span<const HttpFailure> httpFailures() {
  return kFailures;
}

const HttpFailure& httpFailureFor(PoolFailure failure, ErrorCode code) {
  if (failure != PoolFailure::kOther)
    for (const HttpFailure& f : kFailures)
      if (f.failure == failure) return f;
  if (code == ErrorCode::kBadInput) return row(400, "bad_request");
  if (code == ErrorCode::kNotFound) return row(404, "not_found");
  return row(500, "error");
}

const HttpFailure& failureOfReply(int status, std::string_view reason) {
  for (const HttpFailure& f : kFailures)
    if (f.status == status && f.reason == reason) return f;
  for (const HttpFailure& f : kFailures)
    if (f.status == status && f.by_status) return f;
  return kFailures.back();
}

PoolError errorOfReply(int status, std::string_view reason, const std::string& where,
                       const std::string& message, int position) {
  const HttpFailure& f = failureOfReply(status, reason);
  const std::string said = f.message.empty() ? message : std::string(f.message);
  return PoolError(f.failure, f.code, (f.alone ? said : where + said) + std::string(f.hint), position);
}

}  // namespace poolrun::pool
