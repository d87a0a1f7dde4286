#pragma once

// The TLS side of HttpConnection for https:// (poold, etcd): OpenSSL, in the module
// libpoolrun-tls.so that is opened only here, so that a process that speaks no TLS never loads
// libssl (tls_module.h says what that saves).

#include <filesystem>
#include <memory>

#include "poolrun/common/http_connection.hpp"

namespace poolrun::common {

struct TlsClientFiles {
  std::filesystem::path ca;    // PEM certificates to trust; empty: the system's CAs
  std::filesystem::path cert;  // a client certificate (chain) in PEM, with its key; empty: none
  std::filesystem::path key;   // refused where others may read it or its group or others may write it
};

// A transport for HttpConnection that checks servers against `files.ca` and presents
// `files.cert`. Reads the files now: throws poolrun::Error naming the file where one is missing,
// unsafe (the key), malformed or does not match, or where the module cannot be opened.
std::shared_ptr<const SecureTransport> tlsClient(const TlsClientFiles& files);

// Where tlsClient looks for the module: beside the installed programs (BIN/../lib/poolrun), else in
// the build tree it was built in.
std::filesystem::path tlsModulePath();

}  // namespace poolrun::common
