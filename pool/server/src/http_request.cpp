#include "poolrun/pool/http_request.hpp"

#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>

#include "poolrun/common/names.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/pool/http_failures.hpp"

namespace poolrun::pool {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `text` ('+' stays '+': this is a path, and poold's clients encode spaces as
// %20 in queries too). False on a truncated or non-hex escape.
bool percentDecode(std::string_view text, std::string& out) {
  out.clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    int hi = i + 1 < text.size() ? hexValue(text[i + 1]) : -1;
    int lo = i + 2 < text.size() ? hexValue(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

bool hasControl(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

}  // namespace

HttpReply refusal(std::string_view reason, const std::string& message) {
  return {httpFailureNamed(reason).status,
          nlohmann::json{{"error", message}, {"reason", reason}}.dump(
              -1, ' ', false, nlohmann::json::error_handler_t::replace),
          "application/json"};
}

namespace http_request {

void HeaderEnd::operator()(std::uint64_t, beast::string_view, beast::error_code&) {
  if (fields == std::numeric_limits<size_t>::max())
    fields = static_cast<size_t>(std::distance(parser->get().begin(), parser->get().end()));
}

void setLimits(Parser& parser, const HttpServerOptions& options, HeaderEnd& end) {
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
  end = HeaderEnd{&parser};
  parser.on_chunk_header(end);
}

HttpReply failureReply(beast::error_code ec, const HttpServerOptions& options) {
  if (ec == http::error::body_limit)
    return refusal("too_large", "request body over the limit of " + std::to_string(options.max_body_bytes) +
                                    " bytes (poold --max-body), however it is framed");
  if (ec == http::error::header_limit)
    return refusal("headers_too_large", "request headers over the limit of " +
                                            std::to_string(options.max_header_bytes) + " bytes");
  if (ec == http::error::bad_content_length)
    return refusal("bad_request",
                   "malformed HTTP request: bad Content-Length (one decimal number, given once, and not "
                   "with Transfer-Encoding)");
  return refusal("bad_request", "malformed HTTP request: " + ec.message());
}

bool takeRequest(Parser& parser, const HeaderEnd& end, const std::string& peer, HttpRequest& req,
                 HttpReply& error) {
  auto& msg = parser.get();
  // A trailer's fields (after the last chunk) are not the header's: discarded, whatever they say.
  size_t kept = 0;
  for (auto field = msg.begin(); field != msg.end();)
    field = kept < end.fields ? (++kept, std::next(field)) : msg.erase(field);
  // A body framed by anything but Content-Length or a lone `chunked` coding: the parser would frame
  // it by one of them and what is left would read as the next request (request smuggling, where
  // a proxy in front frames it the other way). Refused, and the connection closed.
  if (auto te = msg.find(http::field::transfer_encoding); te != msg.end()) {
    const std::string value(te->value());
    const std::string coding = common::lower(common::trim(value));
    if (coding != "chunked") {
      error = refusal("framing_not_supported", "Transfer-Encoding '" + common::printable(value) +
                                                   "' is not supported: send the body with Content-Length, "
                                                   "or Transfer-Encoding: chunked alone");
      error.close = true;
      return false;
    }
    if (msg.count(http::field::transfer_encoding) > 1 || msg.count(http::field::content_length) > 0) {
      error = refusal("bad_request",
                      "a request with both Transfer-Encoding and Content-Length (or Transfer-Encoding "
                      "twice): frame the body one way");
      error.close = true;
      return false;
    }
  }
  if (msg.count(http::field::authorization) > 1) {  // which one counts would be a guess
    error = refusal("bad_request", "a request with more than one Authorization header: send one");
    return false;
  }
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  if (msg.count(http::field::host) > 1) {  // which name the client meant would be a guess
    error = refusal("bad_request", "a request with more than one Host header: send one");
    return false;
  }
  req.authorization = std::string(msg[http::field::authorization]);
  req.host = std::string(msg[http::field::host]);
  req.body = std::move(msg.body());
  req.peer = peer;
  if (parseTarget(req.target, req.segments, req.query)) return true;
  error =
      refusal("bad_request", "malformed request path: a bad %-escape, invalid UTF-8 or a control character");
  return false;
}

}  // namespace http_request

using namespace http_request;

bool validUtf8(const std::string& text) {
  return common::utf8ErrorOffset(text) == text.size();
}

bool parseTarget(const std::string& target, std::vector<std::string>& segments,
                 std::map<std::string, std::string>& query) {
  std::vector<std::string> segs;
  std::map<std::string, std::string> q;
  std::string_view t(target);
  size_t mark = t.find('?');
  std::string_view path = t.substr(0, mark);
  if (path.empty() || path.front() != '/') return false;
  std::string decoded;
  for (size_t start = 1; start <= path.size();) {
    size_t end = std::min(path.find('/', start), path.size());
    if (!percentDecode(path.substr(start, end - start), decoded) || !validUtf8(decoded) ||
        hasControl(decoded))
      return false;
    if (!decoded.empty() || end < path.size()) segs.push_back(decoded);
    start = end + 1;
  }
  if (mark != std::string_view::npos) {
    std::string_view rest = t.substr(mark + 1);
    for (size_t start = 0; start < rest.size();) {
      size_t end = std::min(rest.find('&', start), rest.size());
      std::string_view pair = rest.substr(start, end - start);
      size_t eq = pair.find('=');
      std::string key, value;
      if (!percentDecode(pair.substr(0, eq), key) ||
          !percentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), value) ||
          !validUtf8(key) || !validUtf8(value) || hasControl(key) || hasControl(value))
        return false;
      if (!key.empty()) q[key] = value;
      start = end + 1;
    }
  }
  segments = std::move(segs);
  query = std::move(q);
  return true;
}

bool parseRequest(const std::string& bytes, const HttpServerOptions& options, HttpRequest& out,
                  HttpReply& error) {
  Parser parser;
  HeaderEnd end;
  setLimits(parser, options, end);
  beast::error_code ec;
  size_t used = 0;
  while (!parser.is_done() && used < bytes.size()) {
    size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      ec = {};
      if (n == 0) break;  // the rest is not a whole header or chunk line: the input ends here
    } else if (ec) {
      break;
    }
  }
  if (!ec && !parser.is_done()) {
    parser.put_eof(ec);
    if (!ec && !parser.is_done()) ec = http::error::partial_message;
  }
  if (ec) {
    error = failureReply(ec, options);
    return false;
  }
  return takeRequest(parser, end, "fuzz", out, error);
}

}  // namespace poolrun::pool
