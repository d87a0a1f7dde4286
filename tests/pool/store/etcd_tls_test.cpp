// poold's etcd client against a secured etcd: a three-member cluster on 127.0.0.1 with TLS on its
// client and peer ports, client certificates required, then etcd's authentication on; certificates
// made by the real `openssl`, the users by the real `etcdctl`. And a real poold on it, over HTTPS.

#include <gtest/gtest.h>

#include <thread>

#include "poold_process.hpp"
#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/poold_options.hpp"
#include "support/etcd_cluster.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/test_pki.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct SecureEtcd {
  test::TestPki pki;
  // The members' certificate (servers and their peers' clients) and poold's, which has no
  // CommonName: etcd's JSON gateway refuses one once authentication is on.
  test::CertFiles member = pki.issue("member", "/CN=etcd", "DNS:localhost,IP:127.0.0.1");
  test::CertFiles poold = pki.issue("poold", "/O=poolrun/OU=poold", "DNS:poold");
  test::CertFiles named = pki.issue("named", "/CN=poold", "DNS:poold");
  test::TempDir dir;
  std::string password = dir.writeSecret("etcd-password", "s3cret-pw\n").string();
  std::unique_ptr<test::EtcdCluster> cluster;

  SecureEtcd() {
    const test::EtcdCluster::Tls tls{pki.caCert().string(), member.cert.string(), member.key.string()};
    cluster = std::make_unique<test::EtcdCluster>(3, &tls);
  }
  EtcdSecurity security(bool withUser = true) const {
    EtcdSecurity s;
    s.ca_file = pki.caCert().string();
    s.cert_file = poold.cert.string();
    s.key_file = poold.key.string();
    if (withUser) {
      s.user = "poold";
      s.password_file = password;
    }
    return s;
  }
  std::string failureOf(const EtcdSecurity& s, const std::string& key = "/poolrun/x") const {
    try {
      EtcdClient c(parseEtcdUri(cluster->uri()), milliseconds(3000), s);
      c.put(key, "v");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST(EtcdTls, CertificatesThenAuthenticationEachWrongClientToldWhy) {
  POOLRUN_TEST_REQUIRE_ETCD();
  SecureEtcd etcd;
  ASSERT_EQ(etcd.cluster->uri().rfind("etcds://127.0.0.1:", 0), 0u);

  // TLS with poold's client certificate.
  {
    EtcdClient c(parseEtcdUri(etcd.cluster->uri()), milliseconds(5000), etcd.security(false));
    c.put("/poolrun/a", "1");
    ASSERT_EQ(c.range("/poolrun/a").size(), 1u);
    EXPECT_EQ(c.range("/poolrun/a")[0].value, "1");
    const auto members = c.status();
    ASSERT_EQ(members.size(), 3u);
    for (const EtcdMemberStatus& m : members) EXPECT_TRUE(m.reachable) << m.error;
  }
  // Without a client certificate, and trusting another CA: refused at once, saying so.
  EtcdSecurity none = etcd.security(false);
  none.cert_file.clear();
  none.key_file.clear();
  const auto started = std::chrono::steady_clock::now();
  std::string e = etcd.failureOf(none);
  EXPECT_NE(e.find("refused this client, which gave no certificate"), std::string::npos) << e;
  EXPECT_NE(e.find("(poold --etcd-ca, --etcd-cert, --etcd-key)"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(3)) << "a certificate refused is not retried";
  test::TestPki other("other CA");
  EtcdSecurity foreign = etcd.security(false);
  foreign.ca_file = other.caCert().string();
  e = etcd.failureOf(foreign);
  EXPECT_NE(e.find("is signed by 'CN=poolrun test CA', which is not among the CAs of " + foreign.ca_file),
            std::string::npos)
      << e;

  // Authentication on: the user's role reads and writes /poolrun only.
  etcd.cluster->enableAuth("poold", "s3cret-pw", "/poolrun", etcd.poold.cert.string(),
                           etcd.poold.key.string());
  {
    EtcdClient c(parseEtcdUri(etcd.cluster->uri()), milliseconds(5000), etcd.security());
    c.put("/poolrun/b", "2");
    EXPECT_EQ(c.range("/poolrun/b").at(0).value, "2");
    EXPECT_EQ(c.range("/poolrun/a").at(0).value, "1");
  }
  e = etcd.failureOf(etcd.security(false));
  EXPECT_NE(e.find("give poold --etcd-user NAME --etcd-password-file FILE"), std::string::npos) << e;
  EtcdSecurity wrong = etcd.security();
  wrong.password_file = etcd.dir.writeSecret("wrong-password", "nope\n").string();
  e = etcd.failureOf(wrong);
  EXPECT_NE(e.find("refused to authenticate user poold"), std::string::npos) << e;
  EXPECT_NE(e.find("wrong user or password: check --etcd-user poold and --etcd-password-file " +
                   wrong.password_file),
            std::string::npos)
      << e;
  e = etcd.failureOf(etcd.security(), "/elsewhere/x");
  EXPECT_NE(e.find("permission denied"), std::string::npos) << e;
  EXPECT_NE(e.find("etcdctl role grant-permission ROLE --prefix=true readwrite PREFIX"), std::string::npos)
      << e;
  EtcdSecurity named = etcd.security();
  named.cert_file = etcd.named.cert.string();
  named.key_file = etcd.named.key.string();
  e = etcd.failureOf(named);
  EXPECT_NE(e.find("must have no CommonName"), std::string::npos) << e;
}

TEST(EtcdTls, AnExpiredTokenIsReplacedOnceAndTheCallMadeAgain) {
  POOLRUN_TEST_REQUIRE_ETCD();
  test::TestPki pki;
  const test::CertFiles member = pki.issue("member", "/CN=etcd", "DNS:localhost,IP:127.0.0.1");
  const test::CertFiles poold = pki.issue("poold", "/O=poolrun/OU=poold", "DNS:poold");
  test::TempDir dir;
  const test::EtcdCluster::Tls tls{pki.caCert().string(), member.cert.string(), member.key.string()};
  // One member whose tokens live 2 s.
  auto cluster = std::make_unique<test::EtcdCluster>(1, &tls, 2);
  cluster->enableAuth("poold", "pw-123456", "/poolrun", poold.cert.string(), poold.key.string());
  EtcdSecurity s{pki.caCert().string(), poold.cert.string(), poold.key.string(), "poold",
                 dir.writeSecret("pw", "pw-123456\n").string()};
  EtcdClient c(parseEtcdUri(cluster->uri()), milliseconds(5000), s);
  c.put("/poolrun/t", "1");
  std::this_thread::sleep_for(seconds(4));  // past the token's TTL (etcd checks it every second)
  EXPECT_NO_THROW(c.put("/poolrun/t", "2"));
  EXPECT_EQ(c.range("/poolrun/t").at(0).value, "2");
}

// poold itself on the secured etcd, serving HTTPS: options read, the campaign won, poolctl served.
TEST(EtcdTls, PooldKeepsItsStateInASecuredEtcdAndServesHttps) {
  POOLRUN_TEST_REQUIRE_ETCD();
  SecureEtcd etcd;
  etcd.cluster->enableAuth("poold", "s3cret-pw", "/poolrun", etcd.poold.cert.string(),
                           etcd.poold.key.string());
  const test::CertFiles https = etcd.pki.issue("https", "/CN=poold", "DNS:localhost,IP:127.0.0.1");
  test::TempDir dir;
  const int port = test::freePort();
  const EtcdSecurity s = etcd.security();
  test::PooldProcess poold(dir.path() / "state", dir.writeSecret("tokens", test::kTokens),
                           {"--store",
                            etcd.cluster->uri(),
                            "--etcd-prefix",
                            "/poolrun/tls-test",
                            "--advertise",
                            "https://127.0.0.1:" + std::to_string(port),
                            "--etcd-ca",
                            s.ca_file,
                            "--etcd-cert",
                            s.cert_file,
                            "--etcd-key",
                            s.key_file,
                            "--etcd-user",
                            s.user,
                            "--etcd-password-file",
                            s.password_file,
                            "--tls-cert",
                            https.cert.string(),
                            "--tls-key",
                            https.key.string(),
                            "--cluster",
                            test::hgxCluster()},
                           port);
  const std::string token = dir.writeSecret("root-token", "tok-root-0123456789\n").string();
  test::ProcessResult r;
  for (int i = 0; i < 100; ++i) {
    r = test::runShell(std::string(POOLCTL_BINARY) + " --pool https://127.0.0.1:" + std::to_string(port) +
                       " --ca " + etcd.pki.caCert().string() + " --token-file " + token + " --json status");
    if (r.status == 0) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"gpus\""), std::string::npos) << r.out;

  // A password file that is not there stops a poold at its start, naming it (exit status 2).
  test::ProcessResult bad =
      test::runShell(std::string(POOLD_BINARY) + " --state " + (dir.path() / "state2").string() +
                     " --token-file " + (dir.path() / "tokens").string() + " --store " + etcd.cluster->uri() +
                     " --advertise http://127.0.0.1:1" + " --etcd-ca " + s.ca_file + " --etcd-cert " +
                     s.cert_file + " --etcd-key " + s.key_file + " --etcd-user poold --etcd-password-file " +
                     (dir.path() / "nowhere").string());
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("nowhere"), std::string::npos) << bad.err;
}

TEST(EtcdTls, PooldsEtcdOptionsGoTogether) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--etcd-ca", "ca.pem"}, "are for --store etcds://"},
           {{"--store", "etcds://127.0.0.1:1", "--advertise", "http://127.0.0.1:2", "--etcd-cert", "c.pem"},
            "--etcd-cert without --etcd-key"},
           {{"--store", "etcds://127.0.0.1:1", "--advertise", "http://127.0.0.1:2", "--etcd-user", "poold"},
            "--etcd-user without --etcd-password-file"},
           {{"--store", "etcds://127.0.0.1:1", "--advertise", "http://127.0.0.1:2", "--etcd-ca",
             "/nonexistent.pem"},
            "/nonexistent.pem"},
           {{"--store", "etcd://127.0.0.1:1", "--advertise", "http://127.0.0.1:2", "--etcd-user", "u",
             "--etcd-password-file", "/nonexistent-pw"},
            "/nonexistent-pw"},
       }) {
    try {
      parsePooldOptions(c.args);
      ADD_FAILURE() << c.args[0] << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parseEtcdUri("etcds://a:1,b:2").at(1).tls, true);
  // A password that cannot travel in JSON, an empty one, and a file others may write.
  test::TempDir dir;
  for (const std::string& text :
       {std::string("pw\xff\xfe\n"), std::string("p\tw\n"), std::string("\n"), std::string(5000, 'x')}) {
    const std::string file = dir.writeSecret("pw", text).string();
    try {
      parsePooldOptions({"--store", "etcd://127.0.0.1:1", "--advertise", "http://127.0.0.1:2", "--etcd-user",
                         "u", "--etcd-password-file", file});
      ADD_FAILURE() << "password " << text.size() << " bytes accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
  const std::string open = dir.write("open-pw", "pw\n").string();
  std::filesystem::permissions(open, std::filesystem::perms(0666));
  try {
    parsePooldOptions({"--store", "etcd://127.0.0.1:1", "--advertise", "http://127.0.0.1:2", "--etcd-user",
                       "u", "--etcd-password-file", open});
    ADD_FAILURE() << "a password file every user may write was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is writable by every user"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace poolrun::pool
