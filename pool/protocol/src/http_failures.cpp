#include "poolrun/pool/http_failures.hpp"

#include <array>
#include <stdexcept>
#include <string>

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
    HttpFailure{405, "method_not_allowed", PoolFailure::kOther, ErrorCode::kBadInput, true},
    HttpFailure{431, "headers_too_large", PoolFailure::kOther, ErrorCode::kBadInput, true},
    // A plain-HTTP request to a poold that serves HTTPS (poold --tls-cert).
    HttpFailure{400, "https_required", PoolFailure::kOther, ErrorCode::kBadInput, false, {}, true},
    HttpFailure{501, "framing_not_supported", PoolFailure::kOther, ErrorCode::kBadInput, true},
    HttpFailure{429, "too_many_queued", PoolFailure::kOther, ErrorCode::kIo, false},
    // A replica that does not lead; its clients try the next replica (http_client.cpp).
    HttpFailure{503, "not_leader", PoolFailure::kOther, ErrorCode::kIo, false},
    HttpFailure{503, "no_leader", PoolFailure::kOther, ErrorCode::kIo, false},
    HttpFailure{503, "etcd_unavailable", PoolFailure::kOther, ErrorCode::kIo, false},
    HttpFailure{500, "internal", PoolFailure::kOther, ErrorCode::kIo, false},  // a bug in poold
    HttpFailure{500, "error", PoolFailure::kOther, ErrorCode::kIo, false},     // last: what no row is
};

const HttpFailure& row(int status, std::string_view reason) {
  for (const HttpFailure& f : kFailures)
    if (f.status == status && f.reason == reason) return f;
  return kFailures.back();
}

// The reasons are poold's words for its refusals: each names one row.
constexpr bool reasonsAreUnique() {
  for (size_t i = 0; i < kFailures.size(); ++i)
    for (size_t j = i + 1; j < kFailures.size(); ++j)
      if (kFailures[i].reason == kFailures[j].reason) return false;
  return true;
}
static_assert(reasonsAreUnique(), "two rows of the failure table share a reason");

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

const HttpFailure& httpFailureNamed(std::string_view reason) {
  for (const HttpFailure& f : kFailures)
    if (f.reason == reason) return f;
  throw std::logic_error("no row of the failure table has the reason '" + std::string(reason) + "'");
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
