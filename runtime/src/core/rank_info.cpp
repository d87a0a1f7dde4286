#include "rank_info.hpp"

namespace poolrun::runtime::core {
namespace {

constexpr long kMaxRank = 1L << 30;

struct Number {
  const char* name = nullptr;  // null: none of the names is set
  long value = 0;
};

// The first of `names` that is set and not empty, as a number.
bool number(const Variables& env, const char* name, Number& out, Line& error) {
  Text v = env.get(name);
  if (v.empty()) return true;
  long n = 0;
  if (!parseNumber(v, kMaxRank, n)) {
    error.add(name).add("=").quoted(v).add(
        " is not a non-negative number (it is set by poolrun or Open MPI; unset it or start the job with "
        "poolrun)");
    return false;
  }
  out = {name, n};
  return true;
}

// The plan's variable against Open MPI's, where both are set: they must agree.
bool agreed(const Variables& env, const char* plan, const char* ompi, Number& out, Line& error) {
  Number p, o;
  if (!number(env, plan, p, error) || !number(env, ompi, o, error)) return false;
  if (p.name != nullptr && o.name != nullptr && p.value != o.value) {
    error.add(plan).add("=").add(p.value).add(" but ").add(ompi).add("=").add(o.value).add(
        ": the job was not started as it was planned (start it with poolrun, and pass no -np/--map-by of "
        "your own)");
    return false;
  }
  out = p.name != nullptr ? p : o;
  return true;
}

bool contradiction(Line& error) {
  error.add(" (these variables are set by poolrun or Open MPI; do not set them by hand)");
  return false;
}

}  // namespace

bool rankInfo(const Variables& env, RankInfo& info, Line& error) {
  Number rank, world, local, localWorld, port;
  if (!agreed(env, "RANK", "OMPI_COMM_WORLD_RANK", rank, error)) return false;
  if (rank.name == nullptr && !number(env, "PMIX_RANK", rank, error)) return false;
  if (!agreed(env, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", world, error) ||
      !agreed(env, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", local, error) ||
      !agreed(env, "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", localWorld, error)) {
    return false;
  }
  info = RankInfo();
  if (rank.name != nullptr) info.rank = static_cast<int>(rank.value);
  if (world.name != nullptr) info.world_size = static_cast<int>(world.value);
  info.local_rank = local.name != nullptr ? static_cast<int>(local.value) : info.rank;
  info.local_world_size = localWorld.name != nullptr ? static_cast<int>(localWorld.value) : info.world_size;
  if (info.world_size < 1) {
    error.add("WORLD_SIZE=0: a job has at least one rank");
    return contradiction(error);
  }
  if (info.rank >= info.world_size) {
    error.add("rank ").add(info.rank).add(" is not below WORLD_SIZE=").add(info.world_size);
    return contradiction(error);
  }
  if (info.local_world_size < 1 || info.local_world_size > info.world_size ||
      info.local_rank >= info.local_world_size) {
    error.add("LOCAL_RANK=").add(info.local_rank).add(" and LOCAL_WORLD_SIZE=").add(info.local_world_size);
    error.add(" do not fit WORLD_SIZE=").add(info.world_size);
    return contradiction(error);
  }
  info.master_addr = env.get("MASTER_ADDR");
  if (!number(env, "MASTER_PORT", port, error)) return false;
  if (port.name != nullptr) {
    if (port.value < 1 || port.value > 65535) {
      error.add("MASTER_PORT=")
          .add(port.value)
          .add(" is not a TCP port (1-65535); unset it and poolrun picks one, or -x MASTER_PORT=N");
      return false;
    }
    info.master_port = static_cast<int>(port.value);
  }
  return true;
}

bool torchVariables(const RankInfo& info, VariableSink& sink) {
  auto put = [&sink](const char* name, long n) {
    Line value;
    value.add(n);
    return sink.set(name, value.text());
  };
  bool ok = put("RANK", info.rank) && put("WORLD_SIZE", info.world_size) &&
            put("LOCAL_RANK", info.local_rank) && put("LOCAL_WORLD_SIZE", info.local_world_size);
  if (ok && info.master_addr.isSet() && !info.master_addr.empty())
    ok = sink.set("MASTER_ADDR", info.master_addr);
  if (ok && info.master_port > 0) ok = put("MASTER_PORT", info.master_port);
  return ok;
}

}  // namespace poolrun::runtime::core
