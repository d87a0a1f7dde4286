// Launch credentials (poolrun/common/launch_credential.hpp) as an attacker would use them: forged,
// altered, for another node, expired, replayed, signed by another key, and malformed every way.

#include "poolrun/common/launch_credential.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "poolrun/common/error.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using common::LaunchGrant;
using common::LaunchSigner;
using common::LaunchVerifier;

constexpr int64_t kNow = 1'800'000'000;

LaunchGrant grant(const std::string& node = "n02") {
  LaunchGrant g;
  g.lease = "L0123456789abcdef";
  g.node = node;
  g.user = "alice";
  g.units = {2, 3};
  g.expires = kNow + 300;
  return g;
}

// The reason `credential` is refused for node n02 at kNow; "" where it is taken.
std::string refusal(LaunchVerifier& v, const std::string& credential, int64_t now = kNow,
                    const std::string& node = "n02") {
  try {
    v.take(credential, node, now);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

class LaunchCredentialTest : public ::testing::Test {
 protected:
  TempDir dir;
  LaunchSigner signer = LaunchSigner::loadOrCreate(dir.path() / "launch-key.pem");
  LaunchVerifier verifier{signer.publicKeyPem()};
};

TEST_F(LaunchCredentialTest, AGoodOneIsTakenOnceWithItsGrant) {
  const std::string c = signer.sign(grant());
  EXPECT_TRUE(c.starts_with("PRL1.")) << c;
  const LaunchGrant g = verifier.take(c, "n02", kNow);
  EXPECT_EQ(g.lease, "L0123456789abcdef");
  EXPECT_EQ(g.user, "alice");
  EXPECT_EQ(g.units, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(g.key_id, signer.keyId());
  EXPECT_EQ(g.nonce.size(), 32u);
  EXPECT_NE(refusal(verifier, c).find("used already (a replay)"), std::string::npos);
  EXPECT_EQ(refusal(verifier, signer.sign(grant())), "") << "each credential has a nonce of its own";
}

// An agent restarted within a credential's life refuses its replay: the nonces it spent are read
// back from its journal, less the expired and the damaged lines.
TEST_F(LaunchCredentialTest, ASpentNonceOutlivesTheAgentInItsJournal) {
  const auto journal = dir.path() / "jobs" / "n02" / "launch-nonces";
  const std::string c = signer.sign(grant());
  LaunchGrant shortLived = grant();
  shortLived.expires = kNow + 10;
  const std::string brief = signer.sign(shortLived);
  {
    common::SpentNonces spent(journal, kNow);
    verifier.take(c, "n02", kNow, spent);
    verifier.take(brief, "n02", kNow, spent);
    EXPECT_EQ(spent.size(), 2u);
  }
  struct stat st {};
  ASSERT_EQ(stat(journal.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ofstream(journal, std::ios::app) << "garbage\n9999999999 NOTHEX\n9999999999 abc extra\n\xff\xfe\n"
                                        << "-5 0123\n"
                                        << "9999999999\n";
  common::SpentNonces again(journal, kNow + 20);  // the brief one has expired
  EXPECT_EQ(again.size(), 1u);
  try {
    verifier.take(c, "n02", kNow + 20, again);
    ADD_FAILURE() << "a replay after a restart was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("used already (a replay)"), std::string::npos) << e.what();
  }
  std::ifstream in(journal);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1)
      << "written anew without what it cannot use: " << text;
  // Past every expiry nothing is kept, and a fresh credential is taken.
  common::SpentNonces later(journal, kNow + 1000);
  EXPECT_EQ(later.size(), 0u);
}

// The journal is written anew once most of its lines have expired, not left to grow.
TEST_F(LaunchCredentialTest, TheJournalDoesNotGrowWithoutBound) {
  const auto journal = dir.path() / "launch-nonces";
  common::SpentNonces spent(journal, kNow);
  LaunchGrant g = grant();
  g.expires = kNow + 1;
  for (int i = 0; i < 100; ++i) {
    g.nonce = "";
    verifier.take(signer.sign(g), "n02", kNow, spent);
  }
  EXPECT_EQ(spent.size(), 100u);
  verifier.take(signer.sign(grant()), "n02", kNow + 2, spent);
  EXPECT_EQ(spent.size(), 1u);
  EXPECT_LT(std::filesystem::file_size(journal), 100u);
  LaunchGrant more = grant();
  more.nonce = "00ff";
  spent.spend(more, kNow + 2);  // each spend still appends
  EXPECT_GT(std::filesystem::file_size(journal), 20u);
}

// A journal that cannot be made, or that is no regular file (a folder, a device that reads without
// end), stops the agent from taking launches, naming the file, rather than dropping replay checks.
TEST_F(LaunchCredentialTest, AJournalThatCannotBeKeptIsAnErrorNamingIt) {
  dir.write("file", "x");
  std::filesystem::create_directories(dir.path() / "folder");
  for (const std::filesystem::path& bad :
       {dir.path() / "file" / "launch-nonces", dir.path() / "folder", std::filesystem::path("/dev/zero")}) {
    try {
      common::SpentNonces spent(bad, kNow);
      ADD_FAILURE() << "kept in " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
    }
  }
}

TEST_F(LaunchCredentialTest, TheKeyFileIsKeptPrivateAndReadAgain) {
  const auto file = dir.path() / "launch-key.pem";
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const LaunchSigner again = LaunchSigner::loadOrCreate(file);
  EXPECT_EQ(again.keyId(), signer.keyId()) << "a restarted poold keeps its key";
  EXPECT_EQ(refusal(verifier, again.sign(grant())), "");
  std::filesystem::permissions(file, std::filesystem::perms::group_read, std::filesystem::perm_options::add);
  try {
    LaunchSigner::loadOrCreate(file);
    ADD_FAILURE() << "a key file others may read is taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("may be read by others (mode 640): chmod 600 it"), std::string::npos)
        << e.what();
  }
  std::filesystem::permissions(file, std::filesystem::perms::group_read,
                               std::filesystem::perm_options::remove);
  std::ofstream(dir.path() / "bad.pem") << "-----BEGIN PRIVATE KEY-----\nnot a key\n";
  EXPECT_THROW(LaunchSigner::loadOrCreate(dir.path() / "bad.pem"), Error);
  EXPECT_THROW(LaunchSigner::loadOrCreate(dir.path() / "no-such-dir" / "key.pem"), Error);
  EXPECT_THROW(LaunchVerifier("not a key"), Error);
  EXPECT_THROW(LaunchVerifier(""), Error);
}

TEST_F(LaunchCredentialTest, AnotherNodeAnExpiredOneAndAnotherKeyAreRefusedSayingWhy) {
  EXPECT_NE(refusal(verifier, signer.sign(grant("n03"))).find("for node n03, not n02"), std::string::npos);
  const std::string c = signer.sign(grant());
  EXPECT_NE(refusal(verifier, c, kNow + 300).find("expired 0 s ago"), std::string::npos);
  EXPECT_NE(refusal(verifier, c, kNow + 3600).find("expired 3300 s ago"), std::string::npos);
  TempDir other;
  const LaunchSigner stranger = LaunchSigner::loadOrCreate(other.path() / "key.pem");
  EXPECT_NE(refusal(verifier, stranger.sign(grant())).find("signed with key " + stranger.keyId()),
            std::string::npos);
  EXPECT_EQ(refusal(verifier, c), "") << "refusals spend nothing";
}

TEST_F(LaunchCredentialTest, AnAlteredOrForgedOneIsRefused) {
  const std::string c = signer.sign(grant());
  const size_t dot = c.rfind('.');
  // The payload of a grant for bob put in place of alice's, the signature kept.
  LaunchGrant bob = grant();
  bob.user = "bob";
  const std::string forged = signer.sign(bob);
  const std::string swapped = forged.substr(0, forged.rfind('.')) + c.substr(dot);
  EXPECT_NE(refusal(verifier, swapped).find("signature is not poold's"), std::string::npos);
  for (size_t at : {size_t{6}, dot - 2, dot + 3, c.size() - 2}) {
    std::string flipped = c;
    flipped[at] = flipped[at] == 'A' ? 'B' : 'A';
    EXPECT_NE(refusal(verifier, flipped), "") << "a byte changed at " << at;
  }
  EXPECT_EQ(refusal(verifier, c), "");
}

TEST_F(LaunchCredentialTest, MalformedOnesAreRefusedWithoutACrash) {
  const std::string c = signer.sign(grant());
  for (const std::string& bad :
       {std::string(), std::string("PRL1."), std::string("PRL1.."), std::string("PRL2.") + c.substr(5),
        c.substr(0, c.rfind('.')), c + "=", c + "!", std::string("PRL1.\xff\xfe.\x80"),
        std::string(100000, 'A'), "PRL1." + std::string(20000, 'A') + ".AAAA", c.substr(0, c.size() - 1),
        std::string("PRL1.e30.") + std::string(86, 'A')}) {
    const std::string why = refusal(verifier, bad);
    EXPECT_TRUE(why.starts_with("launch credential refused: ")) << bad.substr(0, 40) << ": " << why;
  }
}

}  // namespace
}  // namespace poolrun::test
