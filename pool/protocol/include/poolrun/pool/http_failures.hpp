#pragma once

// How a pool's refusal crosses HTTP: the one table from which poold makes the status and "reason"
// of an error reply and from which its clients make the PoolError they throw, so that the two
// directions cannot drift apart (they were two hand-written switches, in the server and the client).

#include <span>
#include <string_view>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

struct HttpFailure {
  int status;               // the HTTP status poold answers with
  std::string_view reason;  // the reply's "reason" field
  PoolFailure failure;      // what a client throws for it
  ErrorCode code;
  // Whether a client reads any reply of this status as this row when its reason is not one of the
  // table's (an older poold, a proxy's 401): the one row per status that stands for it.
  bool by_status;
  // How a client words the PoolError of this row: by default where it was refused and poold's
  // message; `message` instead of poold's, poold's words alone (`alone`: they say what the request
  // can never get), and what to do (`hint`, after the message).
  std::string_view message = {};
  bool alone = false;
  std::string_view hint = {};
};

// Every row, once.
std::span<const HttpFailure> httpFailures();

// What poold answers a thrown failure with: the row of `failure` where there is one, else by `code`
// (kBadInput 400 bad_request, kNotFound 404 not_found, anything else 500 error).
const HttpFailure& httpFailureFor(PoolFailure failure, ErrorCode code);

// The row of poold's refusal `reason` (each row's reason is its own): where poold refuses a request
// by a reason rather than by a failure, its status comes from here. std::logic_error for a reason
// no row has (a typo in poold, which its tests meet).
const HttpFailure& httpFailureNamed(std::string_view reason);

// What a client makes of an error reply: the row of (status, reason), else the status's by_status
// row, else kOther with kIo (5xx, 409 and 429 of a reason it does not know).
const HttpFailure& failureOfReply(int status, std::string_view reason);

// The PoolError a client throws for an error reply of `status` with `reason`: its row's failure and
// code, the message as the row words it from `where` ("http://H:P refused POST /v1/leases (409): ")
// and poold's `message`, and `position` (a 409 not_now's place in the queue; else 0).
PoolError errorOfReply(int status, std::string_view reason, const std::string& where,
                       const std::string& message, int position);

}  // namespace poolrun::pool
