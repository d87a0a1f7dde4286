// HTTPS end to end on 127.0.0.1: poold's server (HttpServer with a certificate) and the clients'
// connection (HttpConnection through the TLS module), with certificates the real `openssl` makes:
// what a good one gets, what each wrong one is told, a plain client on the TLS port and the
// reverse, files replaced under a running server, client certificates, and a node's token that
// must come with its node's certificate.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "poolrun/common/error.hpp"
#include "poolrun/common/http_connection.hpp"
#include "poolrun/common/tls_client.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_pki.hpp"

namespace poolrun::pool {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// One CA and the certificates the tests share (made once: openssl takes some 20 ms a file).
struct Pki {
  test::TestPki ca;
  test::CertFiles server = ca.issue("server", "/CN=poold", "DNS:localhost,IP:127.0.0.1");
  test::CertFiles node1 = ca.issue("node1", "/CN=node1", "DNS:node1");
  test::CertFiles elsewhere = ca.issue("elsewhere", "/CN=elsewhere", "DNS:elsewhere.invalid");
  test::CertFiles expired = ca.issueDated("expired", "/CN=poold", "DNS:localhost,IP:127.0.0.1",
                                          "20200101000000Z", "20200102000000Z");
  test::CertFiles future = ca.issueDated("future", "/CN=poold", "DNS:localhost,IP:127.0.0.1",
                                         "20400101000000Z", "20410101000000Z");
  test::TestPki other{"other CA"};
  test::CertFiles otherServer = other.issue("server", "/CN=poold", "DNS:localhost,IP:127.0.0.1");
  test::CertFiles otherNode = other.issue("node1", "/CN=node1", "DNS:node1");
};

Pki& pki() {
  static Pki p;
  return p;
}

// An HttpServer on 127.0.0.1 that answers every request with what it saw of the client.
class Served {
 public:
  explicit Served(HttpServerOptions o, bool start = true)
      : server_(withWarn(std::move(o)), [](const HttpRequest& r) {
          std::string names;
          for (const std::string& n : r.client_names) names += n + ";";
          if (r.target == "/big") return HttpReply{200, std::string(3 << 20, 'x'), "text/plain"};
          return HttpReply{200, r.method + " " + r.target + " names=" + names + " body=" + r.body,
                           "text/plain"};
        }) {
    if (start) network_ = std::thread([this] { server_.run(); });
  }
  ~Served() {
    server_.stop();
    if (network_.joinable()) network_.join();
  }
  int port() const { return server_.port(); }
  HttpServerStats stats() const { return server_.stats(); }
  std::vector<std::string> warnings() {
    std::lock_guard<std::mutex> lock(mu_);
    return warnings_;
  }

 private:
  HttpServerOptions withWarn(HttpServerOptions o) {
    o.warn = [this](const std::string& w) {
      std::lock_guard<std::mutex> lock(mu_);
      warnings_.push_back(w);
    };
    return o;
  }
  std::mutex mu_;
  std::vector<std::string> warnings_;
  HttpServer server_;
  std::thread network_;
};

HttpServerOptions tlsOptions(const test::CertFiles& cert, const fs::path& clientCa = {}) {
  HttpServerOptions o;
  o.tls_cert = cert.cert;
  o.tls_key = cert.key;
  o.tls_client_ca = clientCa;
  o.header_timeout = 2000ms;
  return o;
}

// The message of the HttpFailed a request throws, with its kind; "" where it succeeded.
std::string failureOf(const std::string& host, int port, const common::TlsClientFiles& files,
                      HttpFailed::Kind* kind = nullptr) {
  HttpConnection c(host, port, "", common::tlsClient(files));
  try {
    c.request("GET", "/x", "");
  } catch (const HttpFailed& e) {
    if (kind != nullptr) *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(Tls, AGoodCertificateServesRequestsKeptAliveBothByAddressAndByName) {
  Served s(tlsOptions(pki().server));
  auto tls = common::tlsClient({pki().ca.caCert(), {}, {}});
  for (const char* host : {"127.0.0.1", "localhost"}) {
    HttpConnection c(host, s.port(), "tok", tls);
    for (int i = 0; i < 3; ++i) {
      HttpResponse r = c.request("POST", "/echo/" + std::to_string(i), "{\"n\":" + std::to_string(i) + "}");
      EXPECT_EQ(r.status, 200) << host;
      EXPECT_EQ(r.body, "POST /echo/" + std::to_string(i) + " names= body={\"n\":" + std::to_string(i) + "}");
    }
    // A reply larger than the socket takes at once: written as the client reads.
    EXPECT_EQ(c.request("GET", "/big", "").body.size(), size_t{3} << 20) << host;
  }
  EXPECT_EQ(s.stats().accepted, 2);
  EXPECT_EQ(s.stats().tls_failures, 0);
  EXPECT_TRUE(s.warnings().empty()) << s.warnings().front();
  // The certificate's expiry, for /metrics: 30 days from its making.
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  EXPECT_GT(s.stats().tls_not_after, now + 29 * 86400);
  EXPECT_LT(s.stats().tls_not_after, now + 31 * 86400);
}

TEST(Tls, EachWrongServerCertificateIsRefusedSayingWhatWasWrong) {
  const common::TlsClientFiles trust{pki().ca.caCert(), {}, {}};
  HttpFailed::Kind kind = HttpFailed::Kind::kTransfer;
  {
    Served s(tlsOptions(pki().expired));
    const std::string e = failureOf("127.0.0.1", s.port(), trust, &kind);
    EXPECT_NE(e.find("expired on 2020-01-02 00:00:00 UTC (now "), std::string::npos) << e;
    EXPECT_NE(e.find("its owner must renew it"), std::string::npos) << e;
    EXPECT_EQ(kind, HttpFailed::Kind::kRefused);
    ASSERT_FALSE(s.warnings().empty());
    EXPECT_NE(s.warnings().front().find(pki().expired.cert.string() + " has expired: clients will refuse it"),
              std::string::npos)
        << "poold warns at start of a certificate that has expired: " << s.warnings().front();
  }
  {
    Served s(tlsOptions(pki().future));
    const std::string e = failureOf("127.0.0.1", s.port(), trust, &kind);
    EXPECT_NE(e.find("is valid only from 2040-01-01 00:00:00 UTC"), std::string::npos) << e;
    EXPECT_NE(e.find("check this machine's clock"), std::string::npos) << e;
  }
  {
    Served s(tlsOptions(pki().elsewhere));
    std::string e = failureOf("127.0.0.1", s.port(), trust, &kind);
    EXPECT_NE(e.find("is for DNS:elsewhere.invalid, not for 127.0.0.1"), std::string::npos) << e;
    EXPECT_EQ(kind, HttpFailed::Kind::kRefused);
    e = failureOf("localhost", s.port(), trust);
    EXPECT_NE(e.find("is for DNS:elsewhere.invalid, not for localhost"), std::string::npos) << e;
  }
  {
    Served s(tlsOptions(pki().otherServer));
    std::string e = failureOf("127.0.0.1", s.port(), trust, &kind);
    EXPECT_NE(
        e.find("is signed by 'CN=other CA', which is not among the CAs of " + pki().ca.caCert().string()),
        std::string::npos)
        << e;
    EXPECT_NE(e.find("--ca FILE or POOLRUN_CA"), std::string::npos) << e;
    // Without --ca, the system's CAs: which do not know the test's either.
    e = failureOf("127.0.0.1", s.port(), {});
    EXPECT_NE(e.find("not among the system's CAs (no --ca or POOLRUN_CA given)"), std::string::npos) << e;
    // (Counted when the server reads the client's alert: after the client has given up.)
    for (int i = 0; i < 100 && s.stats().tls_failures < 2; ++i) std::this_thread::sleep_for(50ms);
    EXPECT_EQ(s.stats().tls_failures, 2) << "the server counts the handshakes the clients gave up";
  }
}

TEST(Tls, APlainClientOnTheTlsPortAndATlsClientOnAPlainPortAreToldWhich) {
  Served tls(tlsOptions(pki().server));
  HttpConnection plain("127.0.0.1", tls.port(), "");
  HttpResponse r = plain.request("GET", "/x", "");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("\"reason\":\"https_required\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("use https://HOST:" + std::to_string(tls.port())), std::string::npos) << r.body;
  EXPECT_EQ(tls.stats().plain_on_tls, 1);

  HttpServerOptions o;
  Served http(o);
  HttpFailed::Kind kind = HttpFailed::Kind::kTransfer;
  const std::string e = failureOf("127.0.0.1", http.port(), {pki().ca.caCert(), {}, {}}, &kind);
  EXPECT_NE(e.find("does not speak TLS"), std::string::npos) << e;
  EXPECT_NE(e.find("use http://"), std::string::npos) << e;
  EXPECT_EQ(kind, HttpFailed::Kind::kRefused);
}

// A client that opens a connection and sends nothing, or the start of a handshake only, holds it
// no longer than the header deadline; one that sends bytes that are not TLS at all is cut at once.
TEST(Tls, AHandshakeThatStallsIsCutAtTheHeaderDeadlineAndGarbageAtOnce) {
  HttpServerOptions o = tlsOptions(pki().server);
  o.header_timeout = 300ms;
  Served s(o);
  auto connectRaw = [&] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  };
  auto closedByServer = [](int fd) {
    char buf[256];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
    }
    close(fd);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  };
  const int silent = connectRaw();
  const int partial = connectRaw();
  const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};  // a ClientHello's first bytes
  ASSERT_EQ(send(partial, hello, sizeof hello, 0), static_cast<ssize_t>(sizeof hello));
  EXPECT_TRUE(closedByServer(silent));
  EXPECT_TRUE(closedByServer(partial));
  for (int i = 0; i < 100 && s.stats().timeouts_handshake < 2; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(s.stats().timeouts_handshake, 2)
      << "failures " << s.stats().tls_failures << ", plain " << s.stats().plain_on_tls;
  const int garbage = connectRaw();
  // A handshake record that looks like a ClientHello by its framing, and holds 36 zero bytes.
  std::string bad = {0x16, 0x03, 0x01, 0x00, 0x28, 0x01, 0x00, 0x00, 0x24};
  bad.append(36, '\0');
  ASSERT_EQ(send(garbage, bad.data(), bad.size(), 0), static_cast<ssize_t>(bad.size()));
  EXPECT_TRUE(closedByServer(garbage));
  EXPECT_EQ(s.stats().tls_failures, 1)
      << "timeouts " << s.stats().timeouts_handshake << ", plain " << s.stats().plain_on_tls;
  // Bytes that are neither TLS nor HTTP: answered as a plain client is, and cut.
  const int neither = connectRaw();
  ASSERT_EQ(send(neither, "\x16\x03\x01\x00\x01x", 6, 0), 6);
  EXPECT_TRUE(closedByServer(neither));
  EXPECT_EQ(s.stats().plain_on_tls, 1);
  // And it serves on.
  HttpConnection c("127.0.0.1", s.port(), "", common::tlsClient({pki().ca.caCert(), {}, {}}));
  EXPECT_EQ(c.request("GET", "/after", "").status, 200);
  EXPECT_EQ(s.stats().open, 1);
}

// New certificate and key files, renamed over the old ones as a rotation does: taken within the
// watch's look interval and settle time, without a restart; a key that does not match is named
// and the previous pair kept.
TEST(Tls, FilesReplacedUnderARunningServerAreTakenAndAMismatchedPairIsNot) {
  test::TempDir dir;
  const fs::path cert = dir.path() / "poold.crt", key = dir.path() / "poold.key";
  fs::copy_file(pki().server.cert, cert);
  fs::copy_file(pki().server.key, key);
  HttpServerOptions o = tlsOptions({cert, key});
  Served s(o);
  const common::TlsClientFiles trustOld{pki().ca.caCert(), {}, {}}, trustNew{pki().other.caCert(), {}, {}};
  EXPECT_EQ(failureOf("127.0.0.1", s.port(), trustOld), "");
  EXPECT_NE(failureOf("127.0.0.1", s.port(), trustNew), "");

  // The same key again, readable by every user: refused as at start, the old pair stays.
  fs::copy_file(pki().server.key, dir.path() / "open.key");
  fs::permissions(dir.path() / "open.key", fs::perms(0644));
  fs::rename(dir.path() / "open.key", key);
  bool refusedOpen = false;
  for (int i = 0; i < 60 && !refusedOpen; ++i) {
    EXPECT_EQ(failureOf("127.0.0.1", s.port(), trustOld), "") << "the previous pair is kept";
    for (const std::string& w : s.warnings())
      refusedOpen = refusedOpen || (w.find("keeping the previous TLS certificate") != std::string::npos &&
                                    w.find("readable by every user (mode 0644)") != std::string::npos);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(refusedOpen);

  // A key alone, which matches no certificate the server has: the old pair stays.
  fs::copy_file(pki().otherServer.key, dir.path() / "new.key");
  fs::rename(dir.path() / "new.key", key);
  bool warned = false;
  for (int i = 0; i < 60 && !warned; ++i) {
    EXPECT_EQ(failureOf("127.0.0.1", s.port(), trustOld), "") << "the previous certificate is kept";
    for (const std::string& w : s.warnings())
      warned = warned || w.find("keeping the previous TLS certificate: the key in " + key.string() +
                                " does not match the certificate in " + cert.string()) != std::string::npos;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(warned);

  // Then its certificate: the pair matches again, and the new CA's clients are served.
  fs::copy_file(pki().otherServer.cert, dir.path() / "new.crt");
  fs::rename(dir.path() / "new.crt", cert);
  bool taken = false;
  for (int i = 0; i < 60 && !taken; ++i) {
    taken = failureOf("127.0.0.1", s.port(), trustNew).empty();
    if (!taken) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(taken) << "the new certificate was not taken within 6 s";
  EXPECT_NE(failureOf("127.0.0.1", s.port(), trustOld), "");
}

TEST(Tls, WrongFilesStopTheServerFromStartingNamingTheFile) {
  test::TempDir dir;
  auto refused = [](HttpServerOptions o) -> std::string {
    try {
      HttpServer s(o, [](const HttpRequest&) { return HttpReply{}; });
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const fs::path open = dir.path() / "open.key";
  fs::copy_file(pki().server.key, open);
  fs::permissions(open, fs::perms(0644));
  std::string e = refused(tlsOptions({pki().server.cert, open}));
  EXPECT_NE(e.find(open.string() + " is readable by every user (mode 0644)"), std::string::npos) << e;
  EXPECT_NE(e.find("a private key must be readable by its owner only"), std::string::npos) << e;
  e = refused(tlsOptions({pki().server.cert, pki().node1.key}));
  EXPECT_NE(e.find("does not match the certificate in " + pki().server.cert.string()), std::string::npos)
      << e;
  e = refused(tlsOptions({dir.write("empty.crt", ""), pki().server.key}));
  EXPECT_NE(e.find("empty.crt: not a PEM certificate chain"), std::string::npos) << e;
  e = refused(tlsOptions({dir.path() / "missing.crt", pki().server.key}));
  EXPECT_NE(e.find("missing.crt"), std::string::npos) << e;
  e = refused(tlsOptions(pki().server, dir.write("ca.txt", "not a certificate\n")));
  EXPECT_NE(e.find("ca.txt: not PEM CA certificates"), std::string::npos) << e;
}

TEST(Tls, TheClientsFilesAreCheckedAsTheyAreRead) {
  test::TempDir dir;
  auto refused = [](const common::TlsClientFiles& f) -> std::string {
    try {
      common::tlsClient(f);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refused({dir.write("ca.pem", "garbage\n"), {}, {}}).find("ca.pem holds no PEM certificate"),
            std::string::npos);
  EXPECT_NE(refused({dir.path() / "nope.pem", {}, {}}).find("nope.pem"), std::string::npos);
  EXPECT_NE(refused({{}, pki().node1.cert, {}}).find("without its key: give both"), std::string::npos);
  EXPECT_NE(refused({{}, pki().node1.cert, pki().server.key}).find("does not match"), std::string::npos);
  const fs::path open = dir.path() / "open.key";
  fs::copy_file(pki().node1.key, open);
  fs::permissions(open, fs::perms(0640));
  EXPECT_NE(refused({{}, pki().node1.cert, open}).find("is readable by its group (mode 0640)"),
            std::string::npos);
}

TEST(Tls, AClientCertificateIsAskedForNotRequiredAndOneOfAnotherCaIsRefused) {
  Served s(tlsOptions(pki().server, pki().ca.caCert()));
  HttpConnection with("127.0.0.1", s.port(), "",
                      common::tlsClient({pki().ca.caCert(), pki().node1.cert, pki().node1.key}));
  EXPECT_EQ(with.request("GET", "/who", "").body, "GET /who names=node1;node1; body=");
  HttpConnection without("127.0.0.1", s.port(), "", common::tlsClient({pki().ca.caCert(), {}, {}}));
  EXPECT_EQ(without.request("GET", "/who", "").body, "GET /who names= body=");
  HttpFailed::Kind kind = HttpFailed::Kind::kTransfer;
  const std::string e =
      failureOf("127.0.0.1", s.port(), {pki().ca.caCert(), pki().otherNode.cert, pki().otherNode.key}, &kind);
  EXPECT_NE(e.find("refused this client's certificate (--tls-cert)"), std::string::npos) << e;
  EXPECT_EQ(kind, HttpFailed::Kind::kRefused);
}

// The client CA file replaced under a running server (a site moving its nodes to a new CA): the
// new CA's clients are taken, the old one's refused, within the files' watch.
TEST(Tls, AReplacedClientCaIsTaken) {
  test::TempDir dir;
  const fs::path ca = dir.path() / "clients.pem";
  fs::copy_file(pki().ca.caCert(), ca);
  Served s(tlsOptions(pki().server, ca));
  const common::TlsClientFiles node1{pki().ca.caCert(), pki().node1.cert, pki().node1.key},
      other{pki().ca.caCert(), pki().otherNode.cert, pki().otherNode.key};
  EXPECT_EQ(failureOf("127.0.0.1", s.port(), node1), "");
  EXPECT_NE(failureOf("127.0.0.1", s.port(), other), "");
  fs::copy_file(pki().other.caCert(), dir.path() / "new.pem");
  fs::rename(dir.path() / "new.pem", ca);
  bool taken = false;
  for (int i = 0; i < 60 && !taken; ++i) {
    taken = failureOf("127.0.0.1", s.port(), other).empty();
    if (!taken) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(taken) << "the new client CA was not taken within 6 s";
  EXPECT_NE(failureOf("127.0.0.1", s.port(), node1).find("refused this client's certificate"),
            std::string::npos);
}

// With --tls-client-ca, a node's token is taken only over a connection whose certificate names
// that node; users and administrators need none.
TEST(Tls, ANodesTokenMustComeWithThatNodesCertificateWhereCertificatesAreAskedFor) {
  test::TempDir dir;
  ServerOptions o;
  o.state_dir = dir.path() / "state";
  o.token_file =
      dir.writeSecret("tokens", "tok-node1-0123456789 node1 node\ntok-alice-0123456789 alice user\n");
  o.tls_client_ca_file = pki().ca.caCert();
  PoolServer server(o);
  auto post = [&](const std::string& token, std::vector<std::string> names) {
    HttpRequest r;
    r.method = "POST";
    r.target = "/v1/nodes/node1/heartbeat";
    std::map<std::string, std::string> query;
    parseTarget(r.target, r.segments, query);
    r.authorization = "Bearer " + token;
    r.peer = "127.0.0.1";
    r.body = "{}";
    r.client_names = std::move(names);
    return server.handle(r);
  };
  HttpReply r = post("tok-node1-0123456789", {});
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(
      r.body.find("must come with a client certificate for node1 (poold --tls-client-ca); this connection "
                  "presented none"),
      std::string::npos)
      << r.body;
  r = post("tok-node1-0123456789", {"node2"});
  EXPECT_NE(r.body.find("presented one for node2"), std::string::npos) << r.body;
  r = post("tok-node1-0123456789", {"node1"});
  EXPECT_EQ(r.body.find("client certificate"), std::string::npos) << r.body;
  EXPECT_NE(r.status, 403) << r.body;
  HttpRequest status;
  status.method = "GET";
  status.target = "/v1/status";
  std::map<std::string, std::string> query;
  parseTarget(status.target, status.segments, query);
  status.authorization = "Bearer tok-alice-0123456789";
  status.peer = "127.0.0.1";
  EXPECT_EQ(server.handle(status).status, 200) << "a user needs no certificate";
}

}  // namespace
}  // namespace poolrun::pool
