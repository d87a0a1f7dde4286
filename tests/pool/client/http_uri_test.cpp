// poold's pool URIs as clients read them (http_pool.hpp): one poold, or the replicas of one pool;
// what is not one is refused naming the URI as a terminal may show it, and what to write instead.

#include <gtest/gtest.h>

#include <string>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/http_pool.hpp"

namespace poolrun::pool {
namespace {

std::string refusal(const std::string& uri) {
  try {
    parseHttpReplicas(uri);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput) << uri;
    return e.what();
  }
  ADD_FAILURE() << "accepted " << uri;
  return "";
}

TEST(HttpUri, ReadsOnePooldAndItsReplicas) {
  HttpAddress one = parseHttpUri("http://pool.example:7450/");
  EXPECT_EQ(one.host, "pool.example");
  EXPECT_EQ(one.port, 7450);
  std::vector<HttpAddress> replicas = parseHttpReplicas("http://10.0.0.1:7450,http://[::1]:7451");
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_EQ(replicas[0].host, "10.0.0.1");
  EXPECT_EQ(replicas[1].host, "[::1]");
  EXPECT_EQ(replicas[1].port, 7451);
}

TEST(HttpUri, RefusesWhatIsNotAPooldWithWhatToWrite) {
  EXPECT_NE(refusal("").find("is not http://HOST:PORT"), std::string::npos);
  EXPECT_NE(refusal("http://a").find("expected http://HOST:PORT"), std::string::npos);
  // A user who wrote a poold's URI is told a poold's form, not every other kind of pool.
  EXPECT_NE(refusal("http://a").find("(a poold is http://HOST:PORT"), std::string::npos);
  EXPECT_EQ(refusal("http://a").find("sim:FILE"), std::string::npos);
  EXPECT_NE(refusal("http://:7450").find("expected http://HOST:PORT"), std::string::npos);
  for (const char* port : {"0", "65536", "-1", "99999999999999999999", "7450x", ""})
    EXPECT_NE(refusal(std::string("http://a:") + port).find("is not a number from 1 to 65535"),
              std::string::npos)
        << port;
  EXPECT_NE(refusal("http://a/b:7450").find("a path after HOST:PORT"), std::string::npos);
  EXPECT_NE(refusal("http://a:7450,").find("'' is not http://HOST:PORT"), std::string::npos);
  EXPECT_NE(refusal("http://a:7450,ftp://b:1").find("'ftp://b:1' is not http://HOST:PORT"),
            std::string::npos);
  EXPECT_NE(refusal("http://a b:7450").find("host 'a b' is not a host name or address"), std::string::npos);
  EXPECT_NE(refusal("http://" + std::string(300, 'h') + ":7450").find("is not a host name or address"),
            std::string::npos);
}

TEST(HttpUri, ARefusalShowsNoByteATerminalWouldAct) {
  // A control character, an escape sequence and bytes that are not UTF-8, in the host and the port.
  for (const std::string& uri :
       {std::string("http://a\x1b[2Jb:7450"), std::string("http://a:74\n50"),
        std::string("http://\xff\xfe:7450"), std::string("http://a:7450,\x07http://b:1")}) {
    const std::string message = refusal(uri);
    EXPECT_NE(message.find("bad pool URI '"), std::string::npos) << message;
    for (unsigned char c : message)
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c) << " in " << message;
    EXPECT_NE(message.find("\\x"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace poolrun::pool
