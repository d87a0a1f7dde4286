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
#include <cstdint>
#include <limits>
#include <string>

#include "poolrun/pool/http_server.hpp"

namespace poolrun::pool::http_request {

using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Where a request's header ends. Beast adds the fields of a chunked body's trailer to the header's,
// where an Authorization sent after the body would count as the header's; takeRequest drops every
// field past the header. The parser calls it at each chunk's header (it holds a reference: the
// HeaderEnd outlives the parser's reads).
struct HeaderEnd {
  const Parser* parser = nullptr;
  size_t fields = std::numeric_limits<size_t>::max();  // all of them: no chunk read yet
  void operator()(std::uint64_t size, boost::beast::string_view extensions, boost::beast::error_code& ec);
};

// The server's limits on `parser`, and `end` reset and attached to it.
void setLimits(Parser& parser, const HttpServerOptions& options, HeaderEnd& end);
// The reply to a request that could not be parsed (400, 413, 431).
HttpReply failureReply(boost::beast::error_code ec, const HttpServerOptions& options);
// The parsed message as the handler sees it, without the fields of a trailer; false, with the reply,
// where its framing, its Authorization or its target is bad.
bool takeRequest(Parser& parser, const HeaderEnd& end, const std::string& peer, HttpRequest& req,
                 HttpReply& error);

}  // namespace poolrun::pool::http_request
