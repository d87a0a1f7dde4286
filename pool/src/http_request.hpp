#pragma once

// How poold reads one HTTP request (http_request.cpp): Boost.Beast's parser with the server's
// limits, the reply to what cannot be parsed, and the request as the handler sees it. Shared by
// the connection loop (http_server.cpp) and parseRequest, which the request fuzzer drives; apart
// so that the fuzz build instruments the parsing and not the network loop.

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format off
#include <boost/asio/buffer.hpp>
// clang-format on
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>
#include <string>

#include "http_server.hpp"

namespace poolrun::pool::http_request {

using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

void setLimits(Parser& parser, const HttpServerOptions& options);
// The reply to a request that could not be parsed (400, 413, 431).
HttpReply failureReply(boost::beast::error_code ec, const HttpServerOptions& options);
// The parsed message as the handler sees it; false, with the reply, where its target is bad.
bool takeRequest(Parser& parser, const std::string& peer, HttpRequest& req, HttpReply& error);
// {"error": MESSAGE, "reason": REASON}, as every error reply's body.
std::string errorBody(const std::string& message, const char* reason);

}  // namespace poolrun::pool::http_request
