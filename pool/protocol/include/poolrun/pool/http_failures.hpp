#pragma once

// How a pool's refusal crosses HTTP: the one table from which poold makes the status and "reason"
// of an error reply and from which its clients make the PoolError they throw, so that the two
// directions cannot drift apart (they were two hand-written switches, in the server and the client).

#include <span>
#include <string_view>

#include "poolrun/pool/types.hpp"
#include "poolrun/topo/error.hpp"

namespace poolrun::pool {

struct HttpFailure {
  int status;               // the HTTP status poold answers with
  std::string_view reason;  // the reply's "reason" field
  PoolFailure failure;      // what a client throws for it
  ErrorCode code;
  // Whether a client reads any reply of this status as this row when its reason is not one of the
  // table's (an older poold, a proxy's 401): the one row per status that stands for it.
  bool by_status;
};

// Every row, once.
std::span<const HttpFailure> httpFailures();

// What poold answers a thrown failure with: the row of `failure` where there is one, else by `code`
// (kBadInput 400 bad_request, kNotFound 404 not_found, anything else 500 error).
const HttpFailure& httpFailureFor(PoolFailure failure, ErrorCode code);

// What a client makes of an error reply: the row of (status, reason), else the status's by_status
// row, else kOther with kIo (5xx, 409 and 429 of a reason it does not know).
const HttpFailure& failureOfReply(int status, std::string_view reason);

}  // namespace poolrun::pool
