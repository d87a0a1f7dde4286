// The one table of how a refusal crosses HTTP (http_failures.hpp): poold's status and reason for
// each failure, and what a client makes of each reply, are the same rows read both ways.

#include "poolrun/pool/http_failures.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <utility>

namespace poolrun::pool {
namespace {

// Every row a client reads back as the failure poold sent, and poold answers every failure of a
// row (other than kOther, which goes by its code) with that row.
TEST(HttpFailures, EveryRowReadsBackAsItWasSent) {
  std::set<std::pair<int, std::string_view>> seen;
  std::set<int> byStatus;
  for (const HttpFailure& f : httpFailures()) {
    EXPECT_TRUE(seen.insert({f.status, f.reason}).second) << f.status << " " << f.reason << " twice";
    if (f.by_status) {
      EXPECT_TRUE(byStatus.insert(f.status).second) << "two rows stand for " << f.status;
    }
    const HttpFailure& back = failureOfReply(f.status, f.reason);
    EXPECT_EQ(&back, &f) << f.status << " " << f.reason;
    const HttpFailure& sent = httpFailureFor(f.failure, f.code);
    if (f.failure != PoolFailure::kOther) {
      EXPECT_EQ(&sent, &f) << f.reason;
    }
  }
}

// poold refuses by reason where no failure was thrown (a bad method, a standby): each reason names
// its own row, and a reason no row has is a bug in poold, not a 500 on the wire.
TEST(HttpFailures, EachReasonNamesItsRow) {
  for (const HttpFailure& f : httpFailures()) EXPECT_EQ(&httpFailureNamed(f.reason), &f) << f.reason;
  for (auto [reason, status] : {std::pair<std::string_view, int>{"method_not_allowed", 405},
                                {"headers_too_large", 431},
                                {"framing_not_supported", 501},
                                {"not_leader", 503},
                                {"no_leader", 503},
                                {"etcd_unavailable", 503},
                                {"internal", 500}}) {
    EXPECT_EQ(httpFailureNamed(reason).status, status) << reason;
  }
  EXPECT_THROW(httpFailureNamed("bad-request"), std::logic_error);
  EXPECT_THROW(httpFailureNamed(""), std::logic_error);
}

// What the two switches did, row by row: poold's replies and the client's errors are unchanged.
TEST(HttpFailures, PooldsRepliesAndTheClientsErrors) {
  struct Sent {
    PoolFailure failure;
    ErrorCode code;
    int status;
    std::string_view reason;
  };
  for (const Sent& s : {Sent{PoolFailure::kForbidden, ErrorCode::kBadInput, 403, "forbidden"},
                        Sent{PoolFailure::kUnauthorized, ErrorCode::kBadInput, 401, "unauthorized"},
                        Sent{PoolFailure::kGone, ErrorCode::kNotFound, 404, "gone"},
                        Sent{PoolFailure::kNeverFits, ErrorCode::kUnsupported, 422, "never_fits"},
                        Sent{PoolFailure::kOther, ErrorCode::kBadInput, 400, "bad_request"},
                        Sent{PoolFailure::kOther, ErrorCode::kNotFound, 404, "not_found"},
                        Sent{PoolFailure::kOther, ErrorCode::kIo, 500, "error"},
                        Sent{PoolFailure::kOther, ErrorCode::kInternal, 500, "error"},
                        Sent{PoolFailure::kInterrupted, ErrorCode::kIo, 500, "error"}}) {
    const HttpFailure& f = httpFailureFor(s.failure, s.code);
    EXPECT_EQ(f.status, s.status) << s.reason;
    EXPECT_EQ(f.reason, s.reason);
  }
  struct Read {
    int status;
    std::string_view reason;
    PoolFailure failure;
    ErrorCode code;
  };
  for (const Read& r : {Read{400, "", PoolFailure::kOther, ErrorCode::kBadInput},
                        Read{401, "", PoolFailure::kUnauthorized, ErrorCode::kBadInput},
                        Read{403, "whatever a proxy says", PoolFailure::kForbidden, ErrorCode::kBadInput},
                        Read{404, "gone", PoolFailure::kGone, ErrorCode::kNotFound},
                        Read{404, "", PoolFailure::kOther, ErrorCode::kNotFound},
                        Read{409, "not_now", PoolFailure::kTimeout, ErrorCode::kIo},
                        Read{409, "conflict", PoolFailure::kOther, ErrorCode::kIo},
                        Read{413, "", PoolFailure::kOther, ErrorCode::kBadInput},
                        Read{422, "", PoolFailure::kNeverFits, ErrorCode::kUnsupported},
                        Read{429, "too_many_queued", PoolFailure::kOther, ErrorCode::kIo},
                        Read{502, "", PoolFailure::kOther, ErrorCode::kIo},
                        Read{503, "not_leader", PoolFailure::kOther, ErrorCode::kIo},
                        Read{503, "", PoolFailure::kOther, ErrorCode::kIo},
                        Read{405, "", PoolFailure::kOther, ErrorCode::kBadInput},
                        Read{500, "internal", PoolFailure::kOther, ErrorCode::kIo},
                        Read{307, "", PoolFailure::kOther, ErrorCode::kIo}}) {
    const HttpFailure& f = failureOfReply(r.status, r.reason);
    EXPECT_EQ(f.failure, r.failure) << r.status << " " << r.reason;
    EXPECT_EQ(f.code, r.code) << r.status << " " << r.reason;
  }
}

// What a client throws for a reply: the row's failure, its wording and the queue position.
TEST(HttpFailures, AClientsErrorIsWordedByItsRow) {
  const std::string where = "http://h:1 refused POST /v1/leases (";
  struct Case {
    int status;
    std::string_view reason;
    int position;
    PoolFailure failure;
    std::string message;
  };
  for (const Case& c : {
           Case{401, "", 0, PoolFailure::kUnauthorized,
                where + "401): no token; set POOLRUN_TOKEN or --token-file to a token poold knows"},
           Case{422, "never_fits", 0, PoolFailure::kNeverFits, "no token"},
           Case{409, "not_now", 3, PoolFailure::kTimeout, where + "409): no token"},
           Case{413, "", 0, PoolFailure::kOther, where + "413): request body too large"},
           Case{403, "forbidden", 0, PoolFailure::kForbidden, where + "403): no token"},
       }) {
    const PoolError e =
        errorOfReply(c.status, c.reason, where + std::to_string(c.status) + "): ", "no token", c.position);
    EXPECT_EQ(e.failure(), c.failure) << c.status;
    EXPECT_EQ(e.what(), c.message);
    EXPECT_EQ(e.position(), c.position);
  }
}

}  // namespace
}  // namespace poolrun::pool
