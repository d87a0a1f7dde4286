// libpoolrun-tls.so: the TLS client of poolrun's HTTP connection, on OpenSSL (tls_module.h has why
// it is a module). Certificates are checked by OpenSSL; what is ours is saying what was wrong.

#include "tls_module.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

struct poolrun_tls_client {
  SSL_CTX* ctx = nullptr;
  std::string ca_name;
  bool has_cert = false;
};

namespace {

// The certificate the chain's verification failed on, as the verify callback saw it: on a failed
// handshake the client has no peer certificate to ask.
struct FailedCertificate {
  bool seen = false;
  std::string subject, issuer, names, not_before, not_after;
};

struct Channel {
  SSL* ssl = nullptr;
  FailedCertificate failed;
  const poolrun_tls_client* client = nullptr;
  std::string where;  // "https://HOST:PORT"
};

void setError(char* err, size_t len, const std::string& text) {
  if (err == nullptr || len == 0) return;
  const size_t n = std::min(len - 1, text.size());
  std::memcpy(err, text.data(), n);
  err[n] = '\0';
}

std::string nameText(const X509_NAME* name) {
  if (name == nullptr) return "";
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : "";
}

std::string timeText(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return "an unreadable date";
  char out[40];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return out;
}

std::string nowText() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char out[40];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M UTC", &tm);
  return out;
}

// "DNS:localhost, IP:127.0.0.1", or the subject's CN where there is no subjectAltName.
std::string namesOf(X509* cert) {
  std::string out;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      std::string one;
      if (n->type == GEN_DNS) {
        one = "DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                                   static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)));
      } else if (n->type == GEN_IPADD) {
        const int len = ASN1_STRING_length(n->d.iPAddress);
        char text[INET6_ADDRSTRLEN] = "";
        inet_ntop(len == 16 ? AF_INET6 : AF_INET, ASN1_STRING_get0_data(n->d.iPAddress), text, sizeof text);
        one = std::string("IP:") + text;
      }
      if (one.empty()) continue;
      if (!out.empty()) out += ", ";
      out += one;
    }
    GENERAL_NAMES_free(sans);
  }
  if (out.empty()) out = "no subjectAltName (subject " + nameText(X509_get_subject_name(cert)) + ")";
  return out;
}

int verifyCallback(int ok, X509_STORE_CTX* store) {
  if (ok == 1) return ok;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* channel = ssl != nullptr ? static_cast<Channel*>(SSL_get_app_data(ssl)) : nullptr;
  X509* cert = X509_STORE_CTX_get_current_cert(store);
  if (channel != nullptr && cert != nullptr && !channel->failed.seen) {
    FailedCertificate& f = channel->failed;
    f.seen = true;
    f.subject = nameText(X509_get_subject_name(cert));
    f.issuer = nameText(X509_get_issuer_name(cert));
    f.names = namesOf(cert);
    f.not_before = timeText(X509_get0_notBefore(cert));
    f.not_after = timeText(X509_get0_notAfter(cert));
  }
  return ok;
}

// OpenSSL's queued errors as text ("PEM routines::no start line"), the queue cleared.
std::string opensslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;

BioPtr memoryBio(const char* data, size_t len) {
  return BioPtr(BIO_new_mem_buf(data, static_cast<int>(len)), BIO_free);
}

// Every certificate of a PEM text, in order; empty where it holds none.
std::vector<X509*> readCertificates(const char* pem, size_t len) {
  std::vector<X509*> out;
  BioPtr bio = memoryBio(pem, len);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.push_back(cert);
  ERR_clear_error();  // the end of the text reads as "no start line"
  return out;
}

poolrun_tls_client* clientNew(const char* ca, size_t caLen, const char* cert, size_t certLen, const char* key,
                              size_t keyLen, const char* caName, int* kind, char* err, size_t errLen) {
  auto fail = [&](int k, const std::string& what) -> poolrun_tls_client* {
    if (kind != nullptr) *kind = k;
    setError(err, errLen, what);
    return nullptr;
  };
  std::unique_ptr<poolrun_tls_client> c(new poolrun_tls_client);
  c->ca_name = caName != nullptr ? caName : "the system's CAs";
  c->ctx = SSL_CTX_new(TLS_client_method());
  if (c->ctx == nullptr) return fail(POOLRUN_TLS_FAILED, "cannot make a TLS context: " + opensslErrors());
  auto guard = [&] {
    SSL_CTX_free(c->ctx);
    c->ctx = nullptr;
  };
  SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
  // poold closes a connection without close_notify (its replies are framed by Content-Length).
  SSL_CTX_set_options(c->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, verifyCallback);
  if (ca != nullptr) {
    std::vector<X509*> certs = readCertificates(ca, caLen);
    if (certs.empty()) {
      guard();
      return fail(POOLRUN_TLS_BAD_INPUT,
                  c->ca_name + " holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    X509_STORE* store = SSL_CTX_get_cert_store(c->ctx);
    for (X509* x : certs) {
      X509_STORE_add_cert(store, x);
      X509_free(x);
    }
  } else if (SSL_CTX_set_default_verify_paths(c->ctx) != 1) {
    guard();
    return fail(POOLRUN_TLS_BAD_INPUT, "cannot read the system's CAs: " + opensslErrors());
  }
  if (cert != nullptr && key != nullptr) {
    std::vector<X509*> chain = readCertificates(cert, certLen);
    if (chain.empty()) {
      guard();
      return fail(POOLRUN_TLS_BAD_INPUT, "the client certificate holds no PEM certificate");
    }
    const int used = SSL_CTX_use_certificate(c->ctx, chain[0]);
    X509_free(chain[0]);
    for (size_t i = 1; i < chain.size(); ++i) SSL_CTX_add0_chain_cert(c->ctx, chain[i]);
    BioPtr keyBio = memoryBio(key, keyLen);
    EVP_PKEY* pkey = PEM_read_bio_PrivateKey(keyBio.get(), nullptr, nullptr, nullptr);
    if (used != 1 || pkey == nullptr) {
      EVP_PKEY_free(pkey);
      guard();
      return fail(POOLRUN_TLS_BAD_INPUT,
                  std::string(used != 1 ? "the client certificate" : "the client key") +
                      " cannot be used: " + opensslErrors());
    }
    const int keyUsed = SSL_CTX_use_PrivateKey(c->ctx, pkey);
    EVP_PKEY_free(pkey);
    if (keyUsed != 1 || SSL_CTX_check_private_key(c->ctx) != 1) {
      ERR_clear_error();
      guard();
      return fail(POOLRUN_TLS_BAD_INPUT, "the client key does not match the client certificate");
    }
    c->has_cert = true;
  }
  return c.release();
}

void clientFree(poolrun_tls_client* c) {
  if (c == nullptr) return;
  SSL_CTX_free(c->ctx);
  delete c;
}

bool isIpLiteral(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Why the server's certificate was refused, from the verification's result.
std::string refusalText(long v, const Channel& ch, const poolrun_tls_client& c, const std::string& where,
                        const std::string& host) {
  const FailedCertificate& f = ch.failed;
  const std::string subject = f.subject.empty() ? "" : " ('" + f.subject + "')";
  switch (v) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return "the certificate of " + where + subject + " expired on " + f.not_after + " (now " + nowText() +
             "): its owner must renew it";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "the certificate of " + where + subject + " is valid only from " + f.not_before + " (now " +
             nowText() + "): check this machine's clock, or the date it was issued with";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return "the certificate of " + where + " is for " + f.names + ", not for " + host +
             ": name the host by one of those, or reissue the certificate with " + host +
             " in its subjectAltName";
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      return "the certificate of " + where + subject + " is signed by '" + f.issuer +
             "', which is not among " +
             (c.ca_name == "the system's CAs" ? c.ca_name + " (no --ca or POOLRUN_CA given)"
                                              : "the CAs of " + c.ca_name) +
             ": give the CA that signed it with --ca FILE or POOLRUN_CA";
    default:
      return "the certificate of " + where + subject + " was refused: " + X509_verify_cert_error_string(v);
  }
}

// Whether the server's alert refuses this client's certificate.
bool refusesOurCertificate(int reason) {
  return reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA || reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
         reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
         reason == SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED || reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
         reason == SSL_R_TLSV1_ALERT_ACCESS_DENIED || reason == SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE ||
         reason == SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED;
}

// Why a handshake failed where the certificate chain was not the reason.
std::string handshakeText(unsigned long e, const poolrun_tls_client& c, const std::string& where, int* kind) {
  const int reason = ERR_GET_REASON(e);
  if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
      reason == SSL_R_UNEXPECTED_EOF_WHILE_READING || reason == SSL_R_HTTP_REQUEST) {
    *kind = POOLRUN_TLS_NOT_TLS;
    return where + " does not speak TLS (a poold serving plain HTTP? then use http://)";
  }
  if (refusesOurCertificate(reason)) {
    *kind = POOLRUN_TLS_REFUSED;
    const char* why = ERR_reason_error_string(e);
    return where + " refused " +
           (c.has_cert
                ? std::string("this client's certificate (--tls-cert)")
                : std::string(
                      "this client, which gave no certificate (give --tls-cert FILE --tls-key FILE)")) +
           ": " + (why != nullptr ? why : "no reason given");
  }
  *kind = POOLRUN_TLS_FAILED;
  const char* why = ERR_reason_error_string(e);
  return "TLS handshake with " + where + " failed: " + (why != nullptr ? why : "no reason given");
}

bool waitFd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(left));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

poolrun_tls_channel* channelConnect(poolrun_tls_client* c, int fd, const char* host, int port, int timeoutMs,
                                    int* kind, char* err, size_t errLen) {
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  const std::string where = "https://" + std::string(host) + ":" + std::to_string(port);
  auto fail = [&](int k, const std::string& what) -> poolrun_tls_channel* {
    if (kind != nullptr) *kind = k;
    setError(err, errLen, what);
    return nullptr;
  };
  auto ch = std::make_unique<Channel>();
  ch->ssl = SSL_new(c->ctx);
  if (ch->ssl == nullptr) return fail(POOLRUN_TLS_FAILED, "cannot start TLS: " + opensslErrors());
  SSL_set_app_data(ch->ssl, ch.get());
  ch->client = c;
  ch->where = where;
  SSL_set_fd(ch->ssl, fd);
  // An IP address is checked against the certificate's IP names and sent without SNI (RFC 6066
  // allows only host names there).
  if (isIpLiteral(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ch->ssl), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ch->ssl, name.c_str());
    SSL_set1_host(ch->ssl, name.c_str());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    ERR_clear_error();
    const int r = SSL_connect(ch->ssl);
    if (r == 1) break;
    const int e = SSL_get_error(ch->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (!waitFd(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
        SSL_free(ch->ssl);
        return fail(POOLRUN_TLS_TIMEOUT, "the TLS handshake with " + where + " did not finish in " +
                                             std::to_string(timeoutMs) + " ms");
      }
      continue;
    }
    const long v = SSL_get_verify_result(ch->ssl);
    std::string text;
    int k = POOLRUN_TLS_REFUSED;
    if (v != X509_V_OK) {
      text = refusalText(v, *ch, *c, where, name);
    } else if (const unsigned long q = ERR_peek_error(); q != 0) {
      text = handshakeText(q, *c, where, &k);
    } else if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN) {
      k = POOLRUN_TLS_NOT_TLS;
      text = where +
             " closed the connection during the TLS handshake (a poold serving plain HTTP? then use http://)";
    } else {
      k = POOLRUN_TLS_FAILED;
      text = "TLS handshake with " + where + " failed (SSL error " + std::to_string(e) + ")";
    }
    ERR_clear_error();
    SSL_free(ch->ssl);
    return fail(k, text);
  }
  return reinterpret_cast<poolrun_tls_channel*>(ch.release());
}

long channelIo(poolrun_tls_channel* handle, char* rdata, const char* wdata, size_t size, char* err,
               size_t errLen) {
  auto* ch = reinterpret_cast<Channel*>(handle);
  ERR_clear_error();
  size_t moved = 0;
  const int r = rdata != nullptr ? SSL_read_ex(ch->ssl, rdata, size, &moved)
                                 : SSL_write_ex(ch->ssl, wdata, size, &moved);
  if (r == 1) return static_cast<long>(moved);
  const int e = SSL_get_error(ch->ssl, r);
  if (e == SSL_ERROR_WANT_READ) return POOLRUN_TLS_WANT_READ;
  if (e == SSL_ERROR_WANT_WRITE) return POOLRUN_TLS_WANT_WRITE;
  if (e == SSL_ERROR_ZERO_RETURN) return 0;
  if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    if (errno == 0) return 0;  // (an end of stream without close_notify, which poold does not send)
    setError(err, errLen, std::strerror(errno));
    return -1;
  }
  if (const unsigned long q = ERR_peek_error(); q != 0 && refusesOurCertificate(ERR_GET_REASON(q))) {
    int kind = 0;
    setError(err, errLen, handshakeText(q, *ch->client, ch->where, &kind));
    ERR_clear_error();
    return POOLRUN_TLS_REFUSED_IO;
  }
  setError(err, errLen, "TLS: " + opensslErrors());
  return -1;
}

long channelRead(poolrun_tls_channel* ch, char* data, size_t size, char* err, size_t errLen) {
  return channelIo(ch, data, nullptr, size, err, errLen);
}

long channelWrite(poolrun_tls_channel* ch, const char* data, size_t size, char* err, size_t errLen) {
  return channelIo(ch, nullptr, data, size, err, errLen);
}

int channelPending(const poolrun_tls_channel* handle) {
  return SSL_pending(reinterpret_cast<const Channel*>(handle)->ssl) > 0 ? 1 : 0;
}

void channelClose(poolrun_tls_channel* handle) {
  auto* ch = reinterpret_cast<Channel*>(handle);
  if (ch == nullptr) return;
  SSL_free(ch->ssl);  // no close_notify: the caller closes the descriptor, and poold frames every reply
  delete ch;
}

const poolrun_tls_api kApi = {POOLRUN_TLS_ABI, clientNew,    clientFree,     channelConnect,
                              channelRead,     channelWrite, channelPending, channelClose};

}  // namespace

extern "C" const poolrun_tls_api* poolrun_tls_module(void) {
  return &kApi;
}
