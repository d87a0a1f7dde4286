#include "poolrun/common/tls_client.hpp"

#include <dlfcn.h>

#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/common/regular_file.hpp"
#include "tls_module.h"

namespace poolrun::common {
namespace {

constexpr size_t kPemFileLimit = size_t{1} << 20;
constexpr size_t kKeyFileLimit = 64 * 1024;

std::filesystem::path selfDir() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
}

// The module, opened once per process and kept.
const poolrun_tls_api& module() {
  static std::once_flag once;
  static const poolrun_tls_api* api = nullptr;
  static std::string why;
  std::call_once(once, [] {
    const std::filesystem::path path = tlsModulePath();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      why = "https:// needs poolrun's TLS module, which cannot be opened (" +
            std::string(e != nullptr ? e : path.string()) + "): reinstall poolrun, or use an http:// pool";
      return;
    }
    using Entry = const poolrun_tls_api* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "poolrun_tls_module"));
    const poolrun_tls_api* found = entry != nullptr ? entry() : nullptr;
    if (found == nullptr || found->abi != POOLRUN_TLS_ABI) {
      why = path.string() + " is not the TLS module of this poolrun (another version?): reinstall poolrun";
      return;
    }
    api = found;
  });
  if (api == nullptr) throw Error(ErrorCode::kUnsupported, why);
  return *api;
}

HttpFailed::Kind failureKind(int kind) {
  return kind == POOLRUN_TLS_REFUSED || kind == POOLRUN_TLS_NOT_TLS ? HttpFailed::Kind::kRefused
                                                                    : HttpFailed::Kind::kConnect;
}

class Channel final : public SecureChannel {
 public:
  Channel(const poolrun_tls_api& api, poolrun_tls_channel* channel) : api_(api), channel_(channel) {}
  ~Channel() override { api_.close(channel_); }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  long read(char* data, size_t size) override {
    return check(api_.read(channel_, data, size, err_, sizeof err_));
  }
  long write(const char* data, size_t size) override {
    return check(api_.write(channel_, data, size, err_, sizeof err_));
  }
  bool pending() const override { return api_.pending(channel_) != 0; }

 private:
  long check(long n) {
    if (n == -1) throw HttpFailed(HttpFailed::Kind::kTransfer, err_);
    if (n == POOLRUN_TLS_REFUSED_IO) throw HttpFailed(HttpFailed::Kind::kRefused, err_);
    return n;
  }

  const poolrun_tls_api& api_;
  poolrun_tls_channel* channel_;
  char err_[512] = "";
};

class Client final : public SecureTransport {
 public:
  Client(const poolrun_tls_api& api, poolrun_tls_client* client) : api_(api), client_(client) {}
  ~Client() override { api_.client_free(client_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  std::unique_ptr<SecureChannel> open(int fd, const std::string& host, int port,
                                      std::chrono::milliseconds timeout) const override {
    char err[1024] = "";
    int kind = POOLRUN_TLS_FAILED;
    poolrun_tls_channel* channel = api_.connect(client_, fd, host.c_str(), port,
                                                static_cast<int>(timeout.count()), &kind, err, sizeof err);
    if (channel == nullptr) throw HttpFailed(failureKind(kind), err);
    return std::make_unique<Channel>(api_, channel);
  }

 private:
  const poolrun_tls_api& api_;
  poolrun_tls_client* client_;
};

}  // namespace

std::filesystem::path tlsModulePath() {
  const std::filesystem::path installed = selfDir() / ".." / "lib" / "poolrun" / "libpoolrun-tls.so";
  std::error_code ec;
  if (std::filesystem::exists(installed, ec)) return installed.lexically_normal();
  return POOLRUN_TLS_MODULE_BUILT;
}

std::shared_ptr<const SecureTransport> tlsClient(const TlsClientFiles& files) {
  if (files.cert.empty() != files.key.empty())
    throw badInput(files.cert.empty()
                       ? "a client key (" + files.key.string() + ") without its certificate: give both"
                       : "a client certificate (" + files.cert.string() + ") without its key: give both");
  std::optional<std::string> ca, cert, key;
  if (!files.ca.empty()) ca = readRegularFile(files.ca, kPemFileLimit, "CA certificate files");
  if (!files.cert.empty()) {
    cert = readRegularFile(files.cert, kPemFileLimit, "certificate files");
    std::string readable;
    key = readSecretFile(files.key, kKeyFileLimit, "private key files", nullptr, &readable, "private key");
    if (!readable.empty()) throw badInput(readable + " (a private key must be readable by its owner only)");
  }
  const poolrun_tls_api& api = module();
  char err[1024] = "";
  int kind = 0;
  const std::string caName = files.ca.string();
  poolrun_tls_client* client =
      api.client_new(ca ? ca->data() : nullptr, ca ? ca->size() : 0, cert ? cert->data() : nullptr,
                     cert ? cert->size() : 0, key ? key->data() : nullptr, key ? key->size() : 0,
                     ca ? caName.c_str() : nullptr, &kind, err, sizeof err);
  // The key's bytes are not left in freed memory.
  if (key) std::fill(key->begin(), key->end(), '\0');
  if (client == nullptr) {
    std::string what = err;
    if (what.rfind("the client", 0) == 0)
      what = files.cert.string() + " / " + files.key.string() + ": " + what;
    throw badInput(what);
  }
  return std::make_shared<Client>(api, client);
}

}  // namespace poolrun::common
