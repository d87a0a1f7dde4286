#include "poolrun/pool/server.hpp"

#include <fcntl.h>
#include <httplib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "poolrun/pool/json.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using Clock = std::chrono::system_clock;
using Steady = std::chrono::steady_clock;

// A request the server refuses, with its HTTP status.
struct HttpError {
  int status;
  std::string message;
  std::string reason;
};

std::string abbreviate(const std::string& token) {
  return token.size() <= 8 ? token : token.substr(0, 4) + "...";
}

// Prometheus histogram with fixed buckets.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
  }
  void write(std::ostream& out, const std::string& name, const std::string& labels) const {
    uint64_t cumulative = 0;
    std::string sep = labels.empty() ? "" : ",";
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += counts_[i];
      out << name << "_bucket{" << labels << sep << "le=\"" << bounds_[i] << "\"} " << cumulative << "\n";
    }
    cumulative += counts_.back();
    out << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << cumulative << "\n";
    out << name << "_sum" << (labels.empty() ? "" : "{" + labels + "}") << " " << sum_ << "\n";
    out << name << "_count" << (labels.empty() ? "" : "{" + labels + "}") << " " << count_ << "\n";
  }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

const std::vector<double> kLatencyBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                         0.01,   0.025,   0.05,   0.1,   0.25,   1};
const std::vector<double> kWaitBounds{0.1, 1, 10, 60, 600, 3600};

}  // namespace

std::map<std::string, TokenEntry> parseTokenFile(const std::string& text, const std::string& file) {
  std::map<std::string, TokenEntry> out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string token, owner, role, extra;
    if (!(words >> token)) continue;
    std::string where = file + ":" + std::to_string(number) + ": ";
    if (!(words >> owner >> role) || (words >> extra))
      throw badInput(where + "expected `TOKEN OWNER ROLE` (ROLE user or admin)");
    if (role != "user" && role != "admin")
      throw badInput(where + "unknown role '" + role + "' (use user or admin)");
    if (out.count(token)) throw badInput(where + "token of " + owner + " appears twice");
    out[token] = {owner, role == "admin"};
  }
  return out;
}

struct PoolServer::Impl {
  ServerOptions opt;
  int lock_fd = -1;
  std::unique_ptr<Store> store;

  std::mutex state_mu;
  std::condition_variable state_cv;
  PoolState state;
  uint64_t applied = 0;

  std::mutex commit_mu;
  std::condition_variable commit_cv;
  bool committing = false;
  uint64_t committed = 0;

  httplib::Server http;
  std::thread ticker;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;

  // Recent acquire replies by client request id (retries get the same answer); under state_mu.
  std::map<std::string, json> recent;
  std::deque<std::string> recent_order;

  std::mutex token_mu;
  std::map<std::string, TokenEntry> tokens;
  struct timespec token_mtime {};
  off_t token_size = -1;
  ino_t token_ino = 0;

  std::mutex metrics_mu;
  std::map<std::string, Histogram> latency;   // by "METHOD route"
  std::map<std::string, uint64_t> responses;  // by "route,status"
  Histogram waits{kWaitBounds};

  explicit Impl(ServerOptions o) : opt(std::move(o)) {}

  // --- tokens
  void reloadTokens(bool initial) {
    struct stat st {};
    if (stat(opt.token_file.c_str(), &st) != 0) {
      if (initial) throw Error(ErrorCode::kNotFound, opt.token_file.string() + ": no such token file");
      return;
    }
    if (!initial && st.st_size == token_size && st.st_ino == token_ino &&
        st.st_mtim.tv_sec == token_mtime.tv_sec && st.st_mtim.tv_nsec == token_mtime.tv_nsec)
      return;
    std::ifstream in(opt.token_file);
    std::stringstream text;
    text << in.rdbuf();
    try {
      tokens = parseTokenFile(text.str(), opt.token_file.string());
    } catch (const Error& e) {
      if (initial) throw;
      std::cerr << "poold: warning: keeping the previous tokens: " << e.what() << "\n";
    }
    token_size = st.st_size;
    token_ino = st.st_ino;
    token_mtime = st.st_mtim;
  }

  TokenEntry authenticate(const httplib::Request& req) {
    std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (header.rfind(prefix, 0) != 0 || header.size() == prefix.size())
      throw HttpError{401, "no bearer token (send `Authorization: Bearer TOKEN`)", "unauthorized"};
    std::string token = header.substr(prefix.size());
    std::lock_guard<std::mutex> lock(token_mu);
    reloadTokens(false);
    auto it = tokens.find(token);
    if (it == tokens.end())
      throw HttpError{401, "token '" + abbreviate(token) + "' is not in poold's token file", "unauthorized"};
    return it->second;
  }

  // --- state and commits
  // Runs fn on the state under its lock, then waits until what it changed (and everything before
  // it) is committed. Exceptions from fn are rethrown after the commit, since fn may have changed
  // the state before throwing (renewing an expired lease drops it).
  template <typename F>
  json mutate(F&& fn) {
    std::exception_ptr error;
    json result;
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(state_mu);
      try {
        result = fn(state, Clock::now());
      } catch (...) {
        error = std::current_exception();
      }
      seq = ++applied;
    }
    state_cv.notify_all();
    waitCommitted(seq);
    if (error) std::rethrow_exception(error);
    return result;
  }

  void waitCommitted(uint64_t seq) {
    std::unique_lock<std::mutex> c(commit_mu);
    while (committed < seq) {
      if (committing) {
        commit_cv.wait(c);
        continue;
      }
      committing = true;
      c.unlock();
      uint64_t target;
      try {
        bool any;
        {
          std::lock_guard<std::mutex> lock(state_mu);
          Dirty d = state.takeDirty();
          target = applied;
          any = !d.empty();
          if (any) {
            store->begin();
            store->write(state, d);
          }
        }
        if (any) store->commit();  // the fsync (FULL) happens here, outside the state lock
        for (double w : state_waits()) {
          std::lock_guard<std::mutex> m(metrics_mu);
          waits.observe(w);
        }
      } catch (const std::exception& e) {
        // Memory is now ahead of the file: nothing more may be acknowledged. A restart reloads
        // the last committed state.
        std::cerr << "poold: cannot commit the pool state (" << e.what()
                  << "); exiting so that no unsaved change is acknowledged\n";
        std::_Exit(70);
      }
      c.lock();
      committing = false;
      committed = std::max(committed, target);
      commit_cv.notify_all();
    }
  }

  std::vector<double> state_waits() {
    std::lock_guard<std::mutex> lock(state_mu);
    return state.takeWaitSeconds();
  }

  // --- HTTP
  using Handler = std::function<json(const httplib::Request&, const TokenEntry&, int& status)>;

  static std::string routeLabel(const std::string& path) {
    // "/v1/leases/L123/renew" -> "/v1/leases"
    size_t a = path.find('/', 1);
    if (a == std::string::npos) return path;
    size_t b = path.find('/', a + 1);
    return b == std::string::npos ? path : path.substr(0, b);
  }

  void observe(const std::string& method, const std::string& path, int status, double seconds) {
    std::string route = routeLabel(path);
    std::lock_guard<std::mutex> lock(metrics_mu);
    latency.try_emplace("method=\"" + method + "\",route=\"" + route + "\"", kLatencyBounds)
        .first->second.observe(seconds);
    ++responses["route=\"" + route + "\",code=\"" + std::to_string(status) + "\""];
  }

  httplib::Server::Handler wrap(const std::string& method, bool adminOnly, const std::string& what,
                                Handler h) {
    return [this, method, adminOnly, what, h](const httplib::Request& req, httplib::Response& res) {
      auto start = Steady::now();
      json body;
      int status = 200;
      try {
        TokenEntry who = authenticate(req);
        if (adminOnly && !who.admin)
          throw HttpError{403,
                          "owner " + who.owner + " (role user) may not " + what + "; an administrator may",
                          "forbidden"};
        body = h(req, who, status);
      } catch (const HttpError& e) {
        status = e.status;
        body = {{"error", e.message}, {"reason", e.reason}};
      } catch (const PoolError& e) {
        switch (e.failure()) {
          case PoolFailure::kForbidden:
            status = 403;
            break;
          case PoolFailure::kUnauthorized:
            status = 401;
            break;
          case PoolFailure::kGone:
            status = 404;
            break;
          case PoolFailure::kNeverFits:
            status = 422;
            break;
          default:
            status = e.code() == ErrorCode::kBadInput ? 400 : e.code() == ErrorCode::kNotFound ? 404 : 500;
        }
        const char* reason = e.failure() == PoolFailure::kGone        ? "gone"
                             : e.failure() == PoolFailure::kNeverFits ? "never_fits"
                             : e.failure() == PoolFailure::kForbidden ? "forbidden"
                                                                      : "error";
        body = {{"error", e.what()}, {"reason", reason}};
      } catch (const Error& e) {
        status = e.code() == ErrorCode::kBadInput ? 400 : e.code() == ErrorCode::kNotFound ? 404 : 500;
        body = {{"error", e.what()}, {"reason", "error"}};
      } catch (const json::exception& e) {
        status = 400;
        body = {{"error", std::string("bad request body: ") + e.what()}, {"reason", "bad_request"}};
      } catch (const std::exception& e) {
        status = 500;
        body = {{"error", e.what()}, {"reason", "internal"}};
      }
      res.status = status;
      res.set_content(body.dump(), "application/json");
      observe(method, req.path, status, std::chrono::duration<double>(Steady::now() - start).count());
    };
  }

  static json parseBody(const httplib::Request& req) {
    try {
      return json::parse(req.body);
    } catch (const json::parse_error& e) {
      throw HttpError{400, std::string("malformed JSON: ") + e.what(), "bad_request"};
    }
  }

  static int64_t integer(const std::string& text, const char* what) {
    try {
      size_t used = 0;
      int64_t v = std::stoll(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
    throw HttpError{400, std::string("bad ") + what + " '" + text + "'", "bad_request"};
  }

  void routes() {
    http.Get("/v1/status", wrap("GET", false, "", [this](const httplib::Request&, const TokenEntry&, int&) {
               return mutate([](PoolState& s, TimePoint) { return toJson(s.status()); });
             }));
    http.Get("/v1/nodes", wrap("GET", false, "", [this](const httplib::Request&, const TokenEntry&, int&) {
               return mutate([](PoolState& s, TimePoint) {
                 json out = json::array();
                 for (const NodeInfo& n : s.nodeInfos()) out.push_back(toJson(n));
                 return out;
               });
             }));
    http.Get(R"(/v1/nodes/([^/]+))",
             wrap("GET", false, "", [this](const httplib::Request& req, const TokenEntry&, int&) {
               std::string name = req.matches[1];
               return mutate([&](PoolState& s, TimePoint) {
                 auto it = s.nodeMap().find(name);
                 if (it == s.nodeMap().end())
                   throw HttpError{404, "no node '" + name + "' in the pool", "not_found"};
                 topo::ClusterNode c;
                 c.name = it->second.name;
                 c.topology = it->second.topology;
                 c.switch_name = it->second.switch_name;
                 c.rail_group = it->second.rail_group;
                 c.fabric = it->second.fabric;
                 c.labels = it->second.labels;
                 return toJson(c);
               });
             }));
    http.Post("/v1/nodes", wrap("POST", true, "register nodes",
                                [this](const httplib::Request& req, const TokenEntry&, int&) {
                                  json doc = parseBody(req);
                                  std::vector<topo::ClusterNode> nodes;
                                  if (!doc.is_object() || !doc.contains("nodes") || !doc["nodes"].is_array())
                                    throw HttpError{400, "expected {\"nodes\": [...]}", "bad_request"};
                                  for (const json& n : doc["nodes"]) nodes.push_back(clusterNodeFromJson(n));
                                  return mutate([&](PoolState& s, TimePoint now) {
                                    for (const auto& n : nodes) s.registerNode(n);
                                    s.tick(now, opt.stale_after);
                                    return json{{"registered", nodes.size()}};
                                  });
                                }));
    for (const char* action : {"drain", "resume"}) {
      std::string verb = action;
      http.Post("/v1/nodes/([^/]+)/" + verb,
                wrap("POST", true, verb + " nodes",
                     [this, verb](const httplib::Request& req, const TokenEntry&, int&) {
                       std::string name = req.matches[1];
                       return mutate([&](PoolState& s, TimePoint now) {
                         s.setNodeState(name, verb == "drain" ? NodeState::kDraining : NodeState::kUp);
                         s.tick(now, opt.stale_after);
                         return json{{"node", name}, {"state", verb == "drain" ? "draining" : "up"}};
                       });
                     }));
    }
    http.Post(
        R"(/v1/nodes/([^/]+)/gpus/([^/]+)/fail)",
        wrap("POST", true, "mark GPUs failed", [this](const httplib::Request& req, const TokenEntry&, int&) {
          std::string name = req.matches[1];
          int index = static_cast<int>(integer(req.matches[2], "GPU index"));
          return mutate([&](PoolState& s, TimePoint now) {
            s.failGpu(name, index);
            s.tick(now, opt.stale_after);
            return json{{"node", name}, {"index", index}, {"state", "failed"}};
          });
        }));
    http.Get("/v1/leases", wrap("GET", false, "", [this](const httplib::Request&, const TokenEntry&, int&) {
               return mutate([](PoolState& s, TimePoint) {
                 json out = json::array();
                 for (const Lease& l : s.leaseList()) out.push_back(toJson(l));
                 return out;
               });
             }));
    http.Post(
        "/v1/leases",
        wrap("POST", false, "", [this](const httplib::Request& req, const TokenEntry& who, int& status) {
          json doc = parseBody(req);
          LeaseRequest r = requestFromJson(doc);
          if (!who.admin || r.owner.empty()) r.owner = who.owner;
          bool queue = !(r.wait && r.wait->count() == 0);
          std::string requestId = doc.is_object() ? doc.value("request_id", "") : "";
          if (!requestId.empty()) requestId = r.owner + "/" + requestId;
          return mutate([&](PoolState& s, TimePoint now) {
            if (auto it = recent.find(requestId); !requestId.empty() && it != recent.end()) {
              status = it->second.value("status", 200);
              return it->second["body"];
            }
            SubmitResult sub = s.submit(r, now, queue);
            json out = sub.lease ? json{{"lease", toJson(*sub.lease)}}
                                 : json{{"ticket", sub.ticket}, {"position", sub.position}};
            status = sub.lease ? 200 : 202;
            if (!requestId.empty()) {
              recent[requestId] = {{"status", status}, {"body", out}};
              recent_order.push_back(requestId);
              if (recent_order.size() > 10000) {
                recent.erase(recent_order.front());
                recent_order.pop_front();
              }
            }
            return out;
          });
        }));
    http.Post(R"(/v1/leases/([^/]+)/renew)",
              wrap("POST", false, "", [this](const httplib::Request& req, const TokenEntry& who, int&) {
                std::string id = req.matches[1];
                return mutate([&](PoolState& s, TimePoint now) {
                  return json{{"lease", toJson(s.renew(id, who.owner, who.admin, now))}};
                });
              }));
    http.Delete(R"(/v1/leases/([^/]+))",
                wrap("DELETE", false, "", [this](const httplib::Request& req, const TokenEntry& who, int&) {
                  std::string id = req.matches[1];
                  return mutate([&](PoolState& s, TimePoint now) {
                    return json{{"id", id}, {"released", s.release(id, who.owner, who.admin, now)}};
                  });
                }));
    http.Get("/v1/queue", wrap("GET", false, "", [this](const httplib::Request&, const TokenEntry&, int&) {
               return mutate([](PoolState& s, TimePoint) {
                 json out = json::array();
                 for (const QueueInfo& q : s.queueList()) out.push_back(toJson(q));
                 return out;
               });
             }));
    http.Get(R"(/v1/queue/(\d+))",
             wrap("GET", false, "", [this](const httplib::Request& req, const TokenEntry& who, int&) {
               int64_t ticket = integer(req.matches[1], "ticket");
               int64_t waitMs =
                   req.has_param("wait_ms") ? integer(req.get_param_value("wait_ms"), "wait_ms") : 0;
               int known = req.has_param("position")
                               ? static_cast<int>(integer(req.get_param_value("position"), "position"))
                               : -1;
               auto deadline = Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(waitMs, 0, 5000));
               std::exception_ptr error;
               json out;
               uint64_t seq;
               {
                 std::unique_lock<std::mutex> lock(state_mu);
                 try {
                   for (;;) {
                     auto q = state.queueMap().find(ticket);
                     if (q != state.queueMap().end() && q->second.request.owner != who.owner && !who.admin)
                       throw HttpError{403,
                                       "owner " + who.owner + " may not poll the queue ticket of " +
                                           q->second.request.owner,
                                       "forbidden"};
                     PollResult p = state.poll(ticket, Clock::now());
                     if (p.status == QueueEntry::Status::kGranted) {
                       out = {{"status", "granted"}, {"lease", toJson(*p.lease)}};
                       break;
                     }
                     if (p.status == QueueEntry::Status::kFailed) {
                       out = {{"status", "failed"}, {"error", p.reason}};
                       break;
                     }
                     if (p.position != known || Clock::now() >= deadline) {
                       out = {{"status", "waiting"}, {"position", p.position}};
                       break;
                     }
                     state_cv.wait_until(lock, deadline);
                   }
                 } catch (...) {
                   error = std::current_exception();
                 }
                 seq = ++applied;
               }
               waitCommitted(seq);
               if (error) std::rethrow_exception(error);
               return out;
             }));
    http.Delete(R"(/v1/queue/(\d+))",
                wrap("DELETE", false, "", [this](const httplib::Request& req, const TokenEntry& who, int&) {
                  int64_t ticket = integer(req.matches[1], "ticket");
                  return mutate([&](PoolState& s, TimePoint now) {
                    auto q = s.queueMap().find(ticket);
                    if (q != s.queueMap().end() && q->second.request.owner != who.owner && !who.admin)
                      throw HttpError{403,
                                      "owner " + who.owner + " may not withdraw the request of " +
                                          q->second.request.owner,
                                      "forbidden"};
                    s.cancel(ticket, now);
                    return json{{"ticket", ticket}, {"withdrawn", true}};
                  });
                }));
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        authenticate(req);
      } catch (const HttpError& e) {
        res.status = e.status;
        res.set_content(json{{"error", e.message}}.dump(), "application/json");
        return;
      }
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
  }

  std::string metrics() {
    std::ostringstream out;
    PoolStatus s;
    {
      std::lock_guard<std::mutex> lock(state_mu);
      s = state.status();
    }
    out << "# HELP poolrun_gpus GPUs in the pool by state.\n# TYPE poolrun_gpus gauge\n";
    out << "poolrun_gpus{state=\"free\"} " << s.gpus_free << "\n";
    out << "poolrun_gpus{state=\"leased\"} " << s.gpus_leased << "\n";
    out << "poolrun_gpus{state=\"failed\"} " << s.gpus_failed << "\n";
    out << "# HELP poolrun_nodes Nodes in the pool by state.\n# TYPE poolrun_nodes gauge\n";
    out << "poolrun_nodes{state=\"up\"} " << s.nodes_up << "\n";
    out << "poolrun_nodes{state=\"draining\"} " << s.nodes_draining << "\n";
    out << "poolrun_nodes{state=\"down\"} " << s.nodes_down << "\n";
    out << "# HELP poolrun_leases Leases held now.\n# TYPE poolrun_leases gauge\npoolrun_leases " << s.leases
        << "\n";
    out << "# HELP poolrun_leases_granted_total Leases granted since the pool was created.\n"
           "# TYPE poolrun_leases_granted_total counter\npoolrun_leases_granted_total "
        << s.leases_granted << "\n";
    out << "# HELP poolrun_queue_length Requests waiting.\n# TYPE poolrun_queue_length "
           "gauge\npoolrun_queue_length "
        << s.queued << "\n";
    std::lock_guard<std::mutex> lock(metrics_mu);
    out << "# HELP poolrun_queue_wait_seconds Time from a request's arrival to its lease.\n"
           "# TYPE poolrun_queue_wait_seconds histogram\n";
    waits.write(out, "poolrun_queue_wait_seconds", "");
    out << "# HELP poolrun_request_duration_seconds Time to answer an API request, commit included.\n"
           "# TYPE poolrun_request_duration_seconds histogram\n";
    for (const auto& [labels, h] : latency) h.write(out, "poolrun_request_duration_seconds", labels);
    out << "# HELP poolrun_responses_total API responses by route and status.\n# TYPE "
           "poolrun_responses_total counter\n";
    for (const auto& [labels, n] : responses)
      out << "poolrun_responses_total{" << labels << "} " << n << "\n";
    return out.str();
  }
};

PoolServer::PoolServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  if (m.opt.state_dir.empty()) throw badInput("poold needs --state DIR");
  if (m.opt.token_file.empty()) throw badInput("poold needs --token-file FILE");
  std::error_code ec;
  std::filesystem::create_directories(m.opt.state_dir, ec);
  if (ec) throw Error(ErrorCode::kIo, m.opt.state_dir.string() + ": cannot create (" + ec.message() + ")");
  std::filesystem::path lock = m.opt.state_dir / "poold.lock";
  m.lock_fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (m.lock_fd < 0 || flock(m.lock_fd, LOCK_EX | LOCK_NB) != 0)
    throw Error(
        ErrorCode::kIo,
        lock.string() + ": another poold serves this state directory; stop it or use another --state");
  m.reloadTokens(true);
  m.store = std::make_unique<Store>(m.opt.state_dir / "pool.sqlite", m.opt.durability);
  m.store->load(m.state);
  m.http.set_payload_max_length(m.opt.max_body_bytes);
  m.http.set_keep_alive_max_count(1'000'000);
  m.http.set_keep_alive_timeout(10);
  m.http.set_tcp_nodelay(true);
  int threads = std::max(4, m.opt.threads);
  m.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  m.routes();
}

PoolServer::~PoolServer() {
  stop();
  if (impl_->ticker.joinable()) impl_->ticker.join();
  if (impl_->lock_fd >= 0) close(impl_->lock_fd);
}

void PoolServer::registerNodes(const std::vector<topo::ClusterNode>& nodes) {
  impl_->mutate([&](PoolState& s, TimePoint now) {
    for (const auto& n : nodes) {
      auto it = s.nodeMap().find(n.name);
      bool same = it != s.nodeMap().end() && it->second.topology && *it->second.topology == *n.topology &&
                  it->second.switch_name == n.switch_name && it->second.labels == n.labels &&
                  it->second.fabric == n.fabric && it->second.rail_group == n.rail_group;
      if (!same) s.registerNode(n);
    }
    s.tick(now, impl_->opt.stale_after);
    return json();
  });
}

int PoolServer::bind() {
  int port = impl_->opt.port == 0
                 ? impl_->http.bind_to_any_port(impl_->opt.host)
                 : (impl_->http.bind_to_port(impl_->opt.host, impl_->opt.port) ? impl_->opt.port : -1);
  if (port <= 0)
    throw Error(ErrorCode::kIo, "cannot listen on " + impl_->opt.host + ":" +
                                    std::to_string(impl_->opt.port) +
                                    " (in use, or not an address of this machine)");
  return port;
}

void PoolServer::run() {
  Impl& m = *impl_;
  m.ticker = std::thread([&m] {
    std::unique_lock<std::mutex> lock(m.stop_mu);
    while (!m.stopping) {
      m.stop_cv.wait_for(lock, std::chrono::milliseconds(250));
      if (m.stopping) break;
      lock.unlock();
      m.mutate([&m](PoolState& s, TimePoint now) {
        s.tick(now, m.opt.stale_after);
        return json();
      });
      lock.lock();
    }
  });
  m.http.listen_after_bind();
  stop();
  if (m.ticker.joinable()) m.ticker.join();
}

void PoolServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  impl_->http.stop();
}

}  // namespace poolrun::pool
