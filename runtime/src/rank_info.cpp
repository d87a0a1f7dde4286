#include "poolrun/runtime/rank_info.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <optional>

#include "poolrun/topo/error.hpp"

namespace poolrun::runtime {
namespace {

std::optional<std::pair<std::string, long>> number(const Environment& env,
                                                   std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty()) continue;
    const std::string& v = it->second;
    long n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < 0 || n > (1L << 30)) {
      throw badInput(std::string(name) + "='" + v +
                     "' is not a non-negative number (it is set by poolrun or " +
                     "Open MPI; unset it or start the job with poolrun)");
    }
    return std::make_pair(std::string(name), n);
  }
  return std::nullopt;
}

// The plan's variable against Open MPI's, where both are set: they must agree.
std::optional<std::pair<std::string, long>> agreed(const Environment& env, const char* plan,
                                                   const char* ompi) {
  auto p = number(env, {plan});
  auto o = number(env, {ompi});
  if (p && o && p->second != o->second) {
    throw badInput(std::string(plan) + "=" + std::to_string(p->second) + " but " + ompi + "=" +
                   std::to_string(o->second) +
                   ": the job was not started as it was planned (start it with poolrun, and pass no "
                   "-np/--map-by of your own)");
  }
  return p ? p : o;
}

}  // namespace

Environment processEnvironment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

Environment processEnvironment(std::span<const char* const> names) {
  Environment env;
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) env.emplace(name, value);
  }
  return env;
}

RankInfo rankInfo(const Environment& env) {
  RankInfo info;
  auto rank = agreed(env, "RANK", "OMPI_COMM_WORLD_RANK");
  if (!rank) rank = number(env, {"PMIX_RANK"});
  auto world = agreed(env, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
  auto local = agreed(env, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK");
  auto localWorld = agreed(env, "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE");
  if (rank) info.rank = static_cast<int>(rank->second);
  if (world) info.world_size = static_cast<int>(world->second);
  info.local_rank = local ? static_cast<int>(local->second) : info.rank;
  info.local_world_size = localWorld ? static_cast<int>(localWorld->second) : info.world_size;
  auto contradiction = [](const std::string& what) {
    return badInput(what + " (these variables are set by poolrun or Open MPI; do not set them by hand)");
  };
  if (info.world_size < 1) throw contradiction("WORLD_SIZE=0: a job has at least one rank");
  if (info.rank >= info.world_size) {
    throw contradiction("rank " + std::to_string(info.rank) +
                        " is not below WORLD_SIZE=" + std::to_string(info.world_size));
  }
  if (info.local_world_size < 1 || info.local_world_size > info.world_size ||
      info.local_rank >= info.local_world_size) {
    throw contradiction("LOCAL_RANK=" + std::to_string(info.local_rank) +
                        " and LOCAL_WORLD_SIZE=" + std::to_string(info.local_world_size) +
                        " do not fit WORLD_SIZE=" + std::to_string(info.world_size));
  }
  if (auto it = env.find("MASTER_ADDR"); it != env.end()) info.master_addr = it->second;
  if (auto port = number(env, {"MASTER_PORT"})) {
    if (port->second < 1 || port->second > 65535) {
      throw badInput("MASTER_PORT=" + std::to_string(port->second) +
                     " is not a TCP port (1-65535); unset it and poolrun picks one, or -x MASTER_PORT=N");
    }
    info.master_port = static_cast<int>(port->second);
  }
  return info;
}

std::vector<std::pair<std::string, std::string>> torchVariables(const RankInfo& info) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(info.rank)},
      {"WORLD_SIZE", std::to_string(info.world_size)},
      {"LOCAL_RANK", std::to_string(info.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(info.local_world_size)}};
  if (!info.master_addr.empty()) vars.emplace_back("MASTER_ADDR", info.master_addr);
  if (info.master_port > 0) vars.emplace_back("MASTER_PORT", std::to_string(info.master_port));
  return vars;
}

}  // namespace poolrun::runtime
