#include "poolrun/pool/munge.hpp"

#include <munge.h>

#include <cstdlib>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/dynamic_library.hpp"

namespace poolrun::pool {
namespace {

// libmunge's own declarations (libmunge-dev); the functions are found with dlsym, never linked.
constexpr munge_err_t kSuccess = EMUNGE_SUCCESS, kSocket = EMUNGE_SOCKET, kTimeout = EMUNGE_TIMEOUT,
                      kCredInvalid = EMUNGE_CRED_INVALID, kCredExpired = EMUNGE_CRED_EXPIRED,
                      kCredRewound = EMUNGE_CRED_REWOUND, kCredReplayed = EMUNGE_CRED_REPLAYED;
constexpr int kMungeOptSocket = MUNGE_OPT_SOCKET;

class LibMunge final : public Munge {
 public:
  LibMunge() : lib_("libmunge.so.2") {
    create_ = lib_.get<decltype(munge_ctx_create)>("munge_ctx_create");
    destroy_ = lib_.get<decltype(munge_ctx_destroy)>("munge_ctx_destroy");
    set_ = lib_.get<decltype(munge_ctx_set)>("munge_ctx_set");
    encode_ = lib_.get<decltype(munge_encode)>("munge_encode");
    decode_ = lib_.get<decltype(munge_decode)>("munge_decode");
    ctx_error_ = lib_.get<decltype(munge_ctx_strerror)>("munge_ctx_strerror");
    strerror_ = lib_.get<decltype(munge_strerror)>("munge_strerror");
  }
  bool complete() const {
    return lib_ && create_ && destroy_ && set_ && encode_ && decode_ && ctx_error_ && strerror_;
  }

  std::string encode(const std::string& payload, const std::string& socket) const override {
    Context ctx(*this, socket);
    char* cred = nullptr;
    const munge_err_t e = encode_(&cred, ctx.get(), payload.data(), static_cast<int>(payload.size()));
    if (e != kSuccess) {
      const std::string why = reason(ctx.get(), e);
      std::free(cred);
      throw Error(ErrorCode::kIo,
                  "cannot make a MUNGE credential through munged at " + where(socket) + ": " + why +
                      (e == kSocket || e == kTimeout ? " (is munged running on this node?)" : ""));
    }
    std::string out = cred;
    std::free(cred);
    return out;
  }

  MungeIdentity decode(const std::string& credential, const std::string& socket) const override {
    Context ctx(*this, socket);
    MungeIdentity id;
    void* payload = nullptr;
    int len = 0;
    const munge_err_t e = decode_(credential.c_str(), ctx.get(), &payload, &len, &id.uid, &id.gid);
    if (payload != nullptr) {
      id.payload.assign(static_cast<const char*>(payload), static_cast<size_t>(len));
      std::free(payload);
    }
    switch (e) {
      case kSuccess:
        id.status = MungeIdentity::Status::kOk;
        return id;
      case kCredInvalid:
        id.status = MungeIdentity::Status::kInvalid;
        break;
      case kCredExpired:
        id.status = MungeIdentity::Status::kExpired;
        break;
      case kCredRewound:
        id.status = MungeIdentity::Status::kRewound;
        break;
      case kCredReplayed:
        id.status = MungeIdentity::Status::kReplayed;
        break;
      case kSocket:
      case kTimeout:
        id.status = MungeIdentity::Status::kNoDaemon;
        break;
      default:
        id.status = MungeIdentity::Status::kOther;
    }
    id.message = reason(ctx.get(), e);
    return id;
  }

 private:
  // One context per call: libmunge's contexts are not shared between threads.
  class Context {
   public:
    Context(const LibMunge& m, const std::string& socket) : m_(m), ctx_(m.create_()) {
      if (ctx_ == nullptr) throw Error(ErrorCode::kIo, "libmunge could not make a context (out of memory)");
      if (!socket.empty()) m.set_(ctx_, kMungeOptSocket, socket.c_str());
    }
    ~Context() { m_.destroy_(ctx_); }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    munge_ctx_t get() const { return ctx_; }

   private:
    const LibMunge& m_;
    munge_ctx_t ctx_;
  };

  static std::string where(const std::string& socket) {
    return socket.empty() ? kDefaultMungeSocket : socket;
  }
  std::string reason(munge_ctx_t ctx, munge_err_t e) const {
    const char* detail = ctx_error_(ctx);
    return detail != nullptr ? detail : strerror_(e);
  }

  topo::DynamicLibrary lib_;
  decltype(munge_ctx_create)* create_ = nullptr;
  decltype(munge_ctx_destroy)* destroy_ = nullptr;
  decltype(munge_ctx_set)* set_ = nullptr;
  decltype(munge_encode)* encode_ = nullptr;
  decltype(munge_decode)* decode_ = nullptr;
  decltype(munge_ctx_strerror)* ctx_error_ = nullptr;
  decltype(munge_strerror)* strerror_ = nullptr;
};

}  // namespace

std::shared_ptr<Munge> Munge::open(std::string& why) {
  auto m = std::make_shared<LibMunge>();
  if (!m->complete()) {
    why = "libmunge.so.2 cannot be opened (apt-get install libmunge2, the library of MUNGE)";
    return nullptr;
  }
  return m;
}

std::string mungePayload(const std::string& method, const std::string& target) {
  return "poolrun " + method + " " + target;
}

}  // namespace poolrun::pool
