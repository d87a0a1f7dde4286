#include "tls_context.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format off
#include <boost/asio/ssl.hpp>
// clang-format on

#include "poolrun/common/error.hpp"

namespace poolrun::pool {
namespace {

namespace ssl = boost::asio::ssl;

constexpr size_t kPemFileLimit = size_t{1} << 20;
constexpr size_t kKeyFileLimit = 64 * 1024;
constexpr std::chrono::seconds kLookEvery{1};

std::string readKey(const std::filesystem::path& file, common::FileIdentity* identity) {
  std::string readable;
  std::string text = common::readSecretFile(file, kKeyFileLimit, "TLS private key files", identity, &readable,
                                            "private key");
  if (!readable.empty()) throw badInput(readable + " (a private key must be readable by its owner only)");
  return text;
}

std::string opensslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    if (!out.empty()) out += "; ";
    out += reason != nullptr ? reason : "unknown";
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

int64_t timeOf(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return timegm(&tm);
}

}  // namespace

TlsServerContext::TlsServerContext(TlsServerFiles files, Warn warn)
    : files_(std::move(files)), warn_(std::move(warn)), watches_(3) {
  common::FileIdentity cert, key, ca;
  texts_.cert = common::readRegularFile(files_.cert, kPemFileLimit, "certificate files", &cert);
  texts_.key = readKey(files_.key, &key);
  if (!files_.client_ca.empty())
    texts_.client_ca = common::readRegularFile(files_.client_ca, kPemFileLimit, "CA certificate files", &ca);
  watches_[0] = common::FileWatch(cert);
  watches_[1] = common::FileWatch(key);
  watches_[2] = common::FileWatch(ca);
  current_ = build(texts_);
  noteExpiry();
  looked_ = std::chrono::steady_clock::now();
  const auto left = std::chrono::system_clock::from_time_t(not_after_) - std::chrono::system_clock::now();
  if (left < std::chrono::hours(24 * 14))
    warn_("the TLS certificate " + files_.cert.string() +
          (left < decltype(left)::zero()
               ? " has expired: clients will refuse it; renew it"
               : " expires within 14 days: renew it (poold takes the new files as they change)"));
}

TlsServerContext::~TlsServerContext() = default;

std::shared_ptr<ssl::context> TlsServerContext::build(const Texts& texts) const {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* h = ctx->native_handle();
  SSL_CTX_set_min_proto_version(h, TLS1_2_VERSION);
  SSL_CTX_set_options(h, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  ERR_clear_error();
  boost::system::error_code ec;
  ctx->use_certificate_chain(boost::asio::buffer(texts.cert), ec);
  if (ec) throw badInput(files_.cert.string() + ": not a PEM certificate chain (" + opensslErrors() + ")");
  // The key is read apart from its use, so that one that does not match says so (OpenSSL's use of
  // it would only fail).
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(texts.key.data(), static_cast<int>(texts.key.size())), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!key) throw badInput(files_.key.string() + ": not a PEM private key (" + opensslErrors() + ")");
  X509* cert = SSL_CTX_get0_certificate(h);
  if (cert == nullptr || X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    throw badInput("the key in " + files_.key.string() + " does not match the certificate in " +
                   files_.cert.string() + ": give the key the certificate was issued for");
  }
  if (SSL_CTX_use_PrivateKey(h, key.get()) != 1)
    throw badInput(files_.key.string() + ": cannot be used (" + opensslErrors() + ")");
  if (!files_.client_ca.empty()) {
    ctx->add_certificate_authority(boost::asio::buffer(texts.client_ca), ec);
    if (ec || texts.client_ca.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
      throw badInput(files_.client_ca.string() + ": not PEM CA certificates (" + opensslErrors() + ")");
    // Asked for, not required: users connect without certificates; the routes decide who needs one.
    ctx->set_verify_mode(ssl::verify_peer);
    // (A server that verifies peers refuses session resumption without an id context.)
    static const unsigned char kId[] = "poold";
    SSL_CTX_set_session_id_context(h, kId, sizeof kId - 1);
  }
  return ctx;
}

void TlsServerContext::lookAtFiles() {
  const auto now = std::chrono::steady_clock::now();
  if (now - looked_ < kLookEvery) return;
  looked_ = now;
  Texts next = texts_;
  bool changed = false;
  try {
    if (auto t = watches_[0].readIfChanged(files_.cert, [&] {
          return common::readRegularFile(files_.cert, kPemFileLimit, "certificate files");
        })) {
      next.cert = std::move(*t);
      changed = true;
    }
    if (auto t = watches_[1].readIfChanged(files_.key, [&] { return readKey(files_.key, nullptr); })) {
      next.key = std::move(*t);
      changed = true;
    }
    if (!files_.client_ca.empty()) {
      if (auto t = watches_[2].readIfChanged(files_.client_ca, [&] {
            return common::readRegularFile(files_.client_ca, kPemFileLimit, "CA certificate files");
          })) {
        next.client_ca = std::move(*t);
        changed = true;
      }
    }
    if (!changed) return;
    texts_ = next;  // what was read stays read: the next change of either file builds from both
    auto ctx = build(texts_);
    current_ = std::move(ctx);
    noteExpiry();
    last_warning_.clear();
    warn_("took the new TLS files (" + files_.cert.string() + ")");
  } catch (const Error& e) {
    if (changed) texts_ = next;
    const std::string w = std::string("keeping the previous TLS certificate: ") + e.what();
    if (w != last_warning_) warn_(w);
    last_warning_ = w;
  }
}

std::shared_ptr<ssl::context> TlsServerContext::current() {
  std::lock_guard<std::mutex> lock(mu_);
  lookAtFiles();
  return current_;
}

void TlsServerContext::noteExpiry() {
  X509* cert = SSL_CTX_get0_certificate(current_->native_handle());
  not_after_ = cert != nullptr ? timeOf(X509_get0_notAfter(cert)) : 0;
}

std::vector<std::string> clientCertificateNames(void* handle) {
  auto* s = static_cast<SSL*>(handle);
  std::vector<std::string> out;
  X509* cert = SSL_get0_peer_certificate(s);
  if (cert == nullptr || SSL_get_verify_result(s) != X509_V_OK) return out;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type != GEN_DNS) continue;
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                       static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)));
    }
    GENERAL_NAMES_free(sans);
  }
  char cn[256];
  const int len = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  if (len > 0) out.emplace_back(cn, static_cast<size_t>(len));
  return out;
}

}  // namespace poolrun::pool
