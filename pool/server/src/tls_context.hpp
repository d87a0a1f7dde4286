#pragma once

// poold's TLS context: its certificate, key and (for agents) the CA of client certificates, read
// from files and made again when they change, as the token file is. Each new connection takes the
// context current at its accept and keeps it: a reload never pulls one from under a handshake.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "poolrun/common/regular_file.hpp"

namespace boost::asio::ssl {
class context;
}

namespace poolrun::pool {

struct TlsServerFiles {
  std::filesystem::path cert;       // the certificate chain, PEM (the server's first)
  std::filesystem::path key;        // its private key, PEM; refused where others may read it
  std::filesystem::path client_ca;  // empty: no client certificates asked for
};

class TlsServerContext {
 public:
  using Warn = std::function<void(const std::string&)>;

  // Reads the files and makes the first context; throws poolrun::Error naming the file where one
  // is missing, unsafe, malformed, or the key does not match the certificate.
  TlsServerContext(TlsServerFiles files, Warn warn);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  // The context for a new connection. Looks at the files at most once a second (a stat each) and
  // makes a new context where one changed; keeps the previous one, with a warning, where the new
  // files are wrong (a certificate and key rotated one after the other match again once both are).
  std::shared_ptr<boost::asio::ssl::context> current();

  // When the current certificate expires, in seconds since 1970 (for /metrics).
  int64_t notAfter() const { return not_after_; }

 private:
  struct Texts {
    std::string cert, key, client_ca;
  };
  std::shared_ptr<boost::asio::ssl::context> build(const Texts& texts) const;
  void lookAtFiles();
  void noteExpiry();  // not_after_ from current_

  TlsServerFiles files_;
  Warn warn_;
  std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> current_;
  std::atomic<int64_t> not_after_{0};
  Texts texts_;
  std::vector<common::FileWatch> watches_;  // cert, key, client CA
  std::chrono::steady_clock::time_point looked_{};
  std::string last_warning_;
};

// The names a verified client certificate is for (its DNS names and its subject's CN), from a live
// connection's SSL object; empty where the client sent none or it was not verified.
std::vector<std::string> clientCertificateNames(void* ssl);

}  // namespace poolrun::pool
