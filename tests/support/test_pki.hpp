#pragma once

// Certificates for the TLS tests, made by the real `openssl` program in a folder of the test's own:
// a CA, and certificates it signs for servers and clients (EC P-256 keys, mode 0600), including
// expired, not-yet-valid and wrongly named ones.

#include <filesystem>
#include <string>

#include "support/temp_dir.hpp"

namespace poolrun::test {

struct CertFiles {
  std::filesystem::path cert, key;
};

class TestPki {
 public:
  // A new CA named `ca_name`; throws std::runtime_error (with openssl's words) where openssl fails.
  explicit TestPki(const std::string& ca_name = "poolrun test CA");

  const std::filesystem::path& caCert() const { return ca_cert_; }
  const std::filesystem::path& dir() const { return dir_.path(); }

  // A certificate for `names` (a subjectAltName list: "DNS:localhost,IP:127.0.0.1") with subject
  // `subject` ("/CN=poold"), usable by servers and clients, valid for `days` from now.
  CertFiles issue(const std::string& file_name, const std::string& subject, const std::string& names,
                  int days = 30) const;
  // As issue, valid only between two dates (YYYYMMDDHHMMSSZ): expired or not yet valid.
  CertFiles issueDated(const std::string& file_name, const std::string& subject, const std::string& names,
                       const std::string& start, const std::string& end) const;

 private:
  void run(const std::string& command) const;

  TempDir dir_;
  std::filesystem::path ca_cert_, ca_key_;
};

}  // namespace poolrun::test
