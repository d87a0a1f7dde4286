#include "poolrun/pool/etcd_leader.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/etcd_client.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t nanos(Steady::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string advertisedBy(const std::string& value) {
  try {
    return json::parse(value).value("advertise", value);
  } catch (const json::exception&) {
    return value;
  }
}

}  // namespace

EtcdLeadership::EtcdLeadership(std::shared_ptr<EtcdClient> client, std::string prefix, std::string advertise,
                               std::chrono::seconds ttl)
    : client_(std::move(client)), advertise_(std::move(advertise)), ttl_(ttl) {
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  key_ = prefix + "/leader";
}

EtcdLeadership::~EtcdLeadership() {
  stop();
  if (renewer_.joinable()) renewer_.join();
  if (lease_ != 0 && leading_) {
    try {
      client_->revokeLease(lease_);
    } catch (const std::exception&) {  // it expires after the TTL instead
    }
  }
}

void EtcdLeadership::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

bool EtcdLeadership::leading() const {
  return leading_ && nanos(Steady::now()) < valid_until_ns_.load();
}

int64_t EtcdLeadership::countElection(const EtcdFence& fence) {
  const std::string key = key_.substr(0, key_.size() - 6) + "elections";
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto kvs = client_->range(key);
    int64_t count = 0;
    if (!kvs.empty()) {
      try {
        count = json::parse(kvs[0].value).at("count").get<int64_t>();
      } catch (const std::exception&) {  // a damaged count starts again
      }
    }
    EtcdTxnResult r = client_->txn(
        {{fence.key, EtcdCompare::Target::kCreate, EtcdCompare::Result::kEqual, fence.create_revision, ""},
         {key, EtcdCompare::Target::kMod, EtcdCompare::Result::kEqual, kvs.empty() ? 0 : kvs[0].mod_revision,
          ""}},
        {{EtcdOp::Kind::kPut, key, json{{"count", count + 1}}.dump(), "", 0}});
    if (r.succeeded) return count + 1;
  }
  throw Error(ErrorCode::kIo, key + ": could not count this election (it changed under every attempt)");
}

std::vector<std::string> EtcdLeadership::replicas() {
  const std::string dir = key_.substr(0, key_.size() - 6) + "replicas/";
  std::vector<std::string> out;
  for (const EtcdKeyValue& kv : client_->range(dir, EtcdClient::prefixEnd(dir)))
    out.push_back(advertisedBy(kv.value));
  return out;
}

std::string EtcdLeadership::leader() {
  auto kvs = client_->range(key_);
  return kvs.empty() ? "" : advertisedBy(kvs[0].value);
}

std::optional<EtcdFence> EtcdLeadership::campaign(const std::function<void(const std::string&)>& seen,
                                                  const std::function<void(const std::string&)>& unreachable,
                                                  std::function<void(const std::string&)> lost) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string value =
      json{{"advertise", advertise_}, {"host", std::string(host)}, {"pid", static_cast<int64_t>(getpid())}}
          .dump();
  std::string last = "-";
  std::string lastError;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return std::nullopt;
    }
    try {
      // A lease of our own, renewed while waiting, so that the key we create is bound to a lease
      // with its whole TTL ahead.
      if (lease_ == 0 || client_->keepAlive(lease_) == 0) {
        lease_ = client_->grantLease(ttl_.count());
        // Listed among the replicas while this process renews its lease (poolctl status).
        client_->put(key_.substr(0, key_.size() - 6) + "replicas/" + advertise_, value, lease_);
      }
      const Steady::time_point asked = Steady::now();
      EtcdTxnResult r = client_->txn(
          {{key_, EtcdCompare::Target::kCreate, EtcdCompare::Result::kEqual, 0, ""}},
          {{EtcdOp::Kind::kPut, key_, value, "", lease_}}, {{EtcdOp::Kind::kRange, key_, "", "", 0}});
      const bool recovered = !lastError.empty();  // etcd answers again: tell who leads, even unchanged
      lastError.clear();
      if (r.succeeded) {
        valid_until_ns_ = nanos(asked + ttl_ - milliseconds(500));
        leading_ = true;
        seen(advertise_);
        renewer_ = std::thread([this, lost = std::move(lost)] { renewals(lost); });
        return EtcdFence{key_, r.revision};
      }
      const EtcdKeyValue* held = r.ranges.empty() || r.ranges[0].empty() ? nullptr : &r.ranges[0][0];
      if (held && held->lease == lease_) {
        // Our own key: an earlier attempt landed though its reply was lost.
        valid_until_ns_ = nanos(asked + ttl_ - milliseconds(500));
        leading_ = true;
        seen(advertise_);
        renewer_ = std::thread([this, lost = std::move(lost)] { renewals(lost); });
        return EtcdFence{key_, held->create_revision};
      }
      std::string now = held ? advertisedBy(held->value) : "";
      if (now != last || recovered) seen(now);
      last = now;
    } catch (const Error& e) {
      if (e.what() != lastError) unreachable(e.what());
      lastError = e.what();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, milliseconds(250), [this] { return stopping_; });
  }
}

void EtcdLeadership::renewals(std::function<void(const std::string&)> lost) {
  const auto every =
      std::max<milliseconds>(milliseconds(200), std::chrono::duration_cast<milliseconds>(ttl_) / 4);
  std::string why;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, every, [this] { return stopping_; })) return;
    }
    const Steady::time_point asked = Steady::now();
    try {
      int64_t left = client_->keepAlive(lease_);
      if (left <= 0) {
        why = "its etcd lease " + std::to_string(lease_) + " expired (no renewal reached etcd for " +
              std::to_string(ttl_.count()) + " s)";
        break;
      }
      valid_until_ns_ = nanos(asked + ttl_ - milliseconds(500));
    } catch (const Error& e) {
      if (nanos(Steady::now()) >= valid_until_ns_.load()) {
        why = std::string("no renewal of its etcd lease succeeded for ") + std::to_string(ttl_.count()) +
              " s (" + e.what() + ")";
        break;
      }
    }
  }
  leading_ = false;
  lost(why);
}

}  // namespace poolrun::pool
