#include "poolrun/launcher/mpi.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "poolrun/common/error.hpp"
#include "poolrun/common/text.hpp"

namespace poolrun::launcher {
namespace {

using ojson = nlohmann::ordered_json;

std::string joinSlots(const std::vector<unsigned>& slots) {
  return topo::CpuSet(slots).toList();
}

// A planned rankfile slot list (logical indexes on the planned node) mapped onto this machine:
// index modulo the cores here.
std::string mapSlots(const std::string& planned, int localCount) {
  topo::CpuSet set = topo::CpuSet::parseList(planned);
  std::vector<unsigned> mapped;
  for (unsigned s : set.cpus()) mapped.push_back(s % static_cast<unsigned>(std::max(localCount, 1)));
  return joinSlots(mapped);
}

}  // namespace

std::string toString(MpiFlavor flavor) {
  return flavor == MpiFlavor::kOmpi4 ? "ompi4" : "ompi5";
}

std::optional<std::pair<MpiFlavor, std::string>> parseMpiVersion(const std::string& output) {
  // "mpirun (Open MPI) 4.1.4", "prterun (PRRTE) 3.0.5": the first launcher name, brand and
  // major.minor[.patch] so written anywhere in the output decides.
  using common::takeDigits;
  using common::takePrefix;
  auto takeOneOf = [](std::string_view& rest, std::initializer_list<std::string_view> words) {
    for (std::string_view word : words) {
      if (takePrefix(rest, word)) return word;
    }
    return std::string_view();
  };
  for (size_t at = 0; at < output.size(); ++at) {
    std::string_view rest = std::string_view(output).substr(at), brand, major, minor;
    if (takeOneOf(rest, {"mpirun", "prterun", "prte", "mpiexec"}).empty() || !takePrefix(rest, " (") ||
        (brand = takeOneOf(rest, {"Open MPI", "OpenRTE", "PRRTE"})).empty() || !takePrefix(rest, ") ") ||
        (major = takeDigits(rest)).empty() || !takePrefix(rest, ".") || (minor = takeDigits(rest)).empty())
      continue;
    std::string version = std::string(major) + "." + std::string(minor);
    std::string_view patch = rest;
    if (takePrefix(patch, ".") && !takeDigits(patch).empty())
      version += rest.substr(0, rest.size() - patch.size());
    int number = common::digitsValue(major);
    if (brand == "PRRTE" || number >= 5) return std::make_pair(MpiFlavor::kOmpi5, version);
    if (number == 4) return std::make_pair(MpiFlavor::kOmpi4, version);
    return std::nullopt;
  }
  return std::nullopt;
}

MpiInstall detectMpi(const std::string& mpirun, std::optional<MpiFlavor> forced) {
  MpiInstall install;
  install.mpirun = mpirun;
  if (forced) {
    install.flavor = *forced;
    return install;
  }
  std::string cmd = shellJoin({mpirun, "--version"}) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  int status = -1;
  if (p != nullptr) {
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    status = pclose(p);
  }
  if (status != 0 && out.empty()) {
    throw Error(ErrorCode::kNotFound, "cannot run '" + mpirun +
                                          " --version': is Open MPI installed (apt-get install openmpi-bin)? "
                                          "Or name the binary with --mpirun PATH");
  }
  auto parsed = parseMpiVersion(out);
  if (!parsed) {
    std::string first = out.substr(0, out.find('\n'));
    throw Error(ErrorCode::kUnsupported, "'" + mpirun + " --version' says \"" + first +
                                             "\": poolrun drives Open MPI 4.x and 5.x; use --mpirun PATH or "
                                             "--mpi-flavor ompi4|ompi5");
  }
  install.flavor = parsed->first;
  install.version = parsed->second;
  return install;
}

std::string shellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("-_./:=,@%+").find(c) != std::string_view::npos;
    });
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

std::string launchScript(const MpiCommand& cmd, const std::filesystem::path& workdir) {
  std::string out =
      "#!/bin/sh\n"
      "# Written by poolrun: the job's mpirun with every variable poolrun sets for it. Without\n"
      "# poolrun nothing holds a lease on these GPUs, renews it or gives it back.\n";
  for (const auto& [k, v] : cmd.env) out += "export " + k + "=" + shellJoin({v}) + "\n";
  return out + "cd " + shellJoin({workdir.string()}) + " || exit 125\nexec " + shellJoin(cmd.argv) + "\n";
}

std::string readableCommand(const MpiCommand& cmd, const std::map<std::string, std::string>& from_files) {
  std::string out;
  for (const auto& [k, v] : cmd.env) {
    auto file = from_files.find(k);
    // Quoted, the substitution stays one word whatever the file holds; the name inside it is a
    // word of its own, quoted as such.
    out += k + "=" +
           (file == from_files.end() ? shellJoin({v}) : "\"$(cat " + shellJoin({file->second}) + ")\"") +
           " \\\n";
  }
  return out + shellJoin(cmd.argv) + "\n";
}

std::string encodeRankEnv(const JobPlan& plan, bool simulated) {
  std::map<std::vector<std::pair<std::string, std::string>>, size_t> setIndex;
  std::vector<std::vector<std::pair<std::string, std::string>>> sets;
  std::map<std::vector<size_t>, size_t> templateIndex;
  std::vector<std::vector<size_t>> templates;
  ojson runs = ojson::array();
  for (const NodePlan& node : plan.nodes) {
    std::vector<size_t> tpl;
    for (int r = node.first_rank; r < node.first_rank + node.ranks; ++r) {
      const RankPlan& rank = plan.ranks[static_cast<size_t>(r)];
      // RANK is the only variable that differs between identical nodes; poolrun-rank takes it
      // from Open MPI's own OMPI_COMM_WORLD_RANK instead.
      std::vector<std::pair<std::string, std::string>> env;
      for (const auto& kv : rank.env) {
        if (kv.first != "RANK") env.push_back(kv);
      }
      // The cores and memory node poolrun-rank binds to. A simulated node's cores are the fixture's:
      // there the rank keeps the cores the mapped rankfile gave it.
      if (simulated) {
        env.emplace_back("POOLRUN_PLANNED_CPUSET", rank.cpuset.toList());
      } else {
        env.emplace_back("POOLRUN_CPUSET", rank.cpuset.toList());
        if (rank.numa != topo::kNone) env.emplace_back("POOLRUN_NUMA", std::to_string(rank.numa));
      }
      auto [it, added] = setIndex.emplace(env, sets.size());
      if (added) sets.push_back(env);
      tpl.push_back(it->second);
    }
    auto [tit, tadded] = templateIndex.emplace(tpl, templates.size());
    if (tadded) templates.push_back(tpl);
    if (!runs.empty()) {
      ojson& last = runs.back();
      int64_t first = last[0], nodes = last[1], per = last[2];
      if (last[3] == tit->second && per == node.ranks && first + nodes * per == node.first_rank) {
        last[1] = nodes + 1;
        continue;
      }
    }
    runs.push_back({node.first_rank, 1, node.ranks, tit->second});
  }
  ojson doc;
  doc["schema"] = "poolrun.rank-env/1";
  ojson jsets = ojson::array();
  for (const auto& set : sets) {
    ojson o = ojson::object();
    for (const auto& [k, v] : set) o[k] = v;
    jsets.push_back(o);
  }
  doc["sets"] = jsets;
  doc["templates"] = templates;
  doc["runs"] = runs;
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::pair<std::string, std::string>> rendezvousVariables(
    const JobPlan& plan, bool simulated, int port, const std::map<std::string, std::string>& user_env) {
  std::vector<std::pair<std::string, std::string>> vars;
  if (plan.nodes.empty()) return vars;
  if (!user_env.contains("MASTER_ADDR"))
    vars.emplace_back("MASTER_ADDR", simulated ? "127.0.0.1" : plan.nodes.front().name);
  if (!user_env.contains("MASTER_PORT")) vars.emplace_back("MASTER_PORT", std::to_string(port));
  // gloo looks the simulated node's name up, finds nothing and falls back to loopback with a warning
  // from every rank: loopback it is, said (a value of the user's, -x or the shell's, stays).
  if (simulated && !user_env.contains("GLOO_SOCKET_IFNAME") && std::getenv("GLOO_SOCKET_IFNAME") == nullptr)
    vars.emplace_back("GLOO_SOCKET_IFNAME", "lo");
  return vars;
}

int pickRendezvousPort() {
  constexpr int kFallback = 29500;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return kFallback;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  int port = kFallback;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool openMpiKnowsShell(const char* shell) {
  if (shell == nullptr) return false;
  const std::string_view path(shell);
  const std::string_view name = path.substr(path.rfind('/') + 1);
  return name == "sh" || name == "bash" || name == "zsh" || name == "ksh" || name == "csh" || name == "tcsh";
}

MpiCommand buildMpiCommand(const LaunchSpec& spec, const MpiInstall& mpi) {
  const JobPlan& plan = *spec.plan;
  MpiCommand cmd;
  bool ompi4 = mpi.flavor == MpiFlavor::kOmpi4;
  for (const NodePlan& n : plan.nodes) cmd.hostfile += n.name + " slots=" + std::to_string(n.ranks) + "\n";
  int localCount = plan.hwthread_slots ? spec.local_cores * spec.local_threads : spec.local_cores;
  for (const RankPlan& r : plan.ranks) {
    std::string slots = spec.simulated ? mapSlots(r.rankfile_slots, localCount) : r.rankfile_slots;
    cmd.rankfile += "rank " + std::to_string(r.rank) + "=" + plan.nodeOf(r).name + " slot=" + slots + "\n";
  }
  std::string hostfile = (spec.job_dir / "hostfile").string();
  std::string rankfile = (spec.job_dir / "rankfile.mpi").string();
  auto& a = cmd.argv;
  a = {mpi.mpirun, "-np", std::to_string(plan.ranks.size()), "--hostfile", hostfile};
  if (ompi4) {
    a.insert(a.end(), {"--rankfile", rankfile});
    if (plan.hwthread_slots) a.push_back("--use-hwthread-cpus");
  } else {
    a.insert(a.end(), {"--map-by", "rankfile:file=" + rankfile + (plan.hwthread_slots ? ":HWTCPUS" : "")});
  }
  auto mca = [&](const std::string& k, const std::string& v) { a.insert(a.end(), {"--mca", k, v}); };
  auto runtimeMca = [&](const std::string& k, const std::string& v) {
    a.insert(a.end(), {ompi4 ? "--mca" : "--prtemca", k, v});
  };
  if (!spec.rsh_agent.empty()) {
    // Each node's daemon from mpirun itself, never from another daemon (a tree spawn would need the
    // launch file and a credential on that node).
    runtimeMca(ompi4 ? "plm_rsh_agent" : "plm_ssh_agent", spec.rsh_agent);
    runtimeMca(ompi4 ? "plm_rsh_no_tree_spawn" : "plm_ssh_no_tree_spawn", "1");
    // Without a tree, Open MPI has each daemon fork into the background and its remote shell end:
    // attached, a daemon stays in its agent's session, which lasts as long as it (and ends its
    // lease's cgroup there with it).
    a.push_back("--leave-session-attached");
    cmd.env.emplace_back("POOLRUN_LAUNCH_FILE", spec.launch_file.string());
  }
  if (spec.simulated) {
    if (spec.rsh_agent.empty()) runtimeMca(ompi4 ? "plm_rsh_agent" : "plm_ssh_agent", spec.sim_agent);
    // A simulated node's name is in no resolver. Open MPI asks DNS whether each host of the rankfile
    // is this machine; where the DNS server drops the query, mpirun waits out the resolver's 5 s
    // timeout (1 launch in 7 here). Open MPI 4.x asks through OPAL, 5.x through PMIx.
    mca("if_base_do_not_resolve", "1");
    mca("pml", "ob1");
    mca("btl", "self,tcp");
    mca("btl_tcp_if_include", "lo");
    runtimeMca("oob_tcp_if_include", "lo");
    mca("mpi_yield_when_idle", "1");
    cmd.env.emplace_back("PMIX_MCA_gds", "hash");
    cmd.env.emplace_back("PMIX_MCA_pif_base_do_not_resolve", "1");
    // Open MPI words its remote command for the local shell (the password database's, then $SHELL)
    // and, knowing neither, warns into the job's output: a service account's nologin, a detached
    // job's bare environment. The simulated agent runs the command with sh.
    if (!openMpiKnowsShell(std::getenv("SHELL"))) cmd.env.emplace_back("SHELL", "/bin/sh");
  } else if (plan.fabric != topo::Fabric::kTcp &&
             std::none_of(spec.user_mca.begin(), spec.user_mca.end(),
                          [](const auto& kv) { return kv.first == "pml"; })) {
    mca("pml", "ucx");  // the user's --mca pml wins (Open MPI refuses a key given twice)
  }
  for (const auto& [k, v] : spec.user_mca) mca(k, v);
  for (const auto& [name, value] : spec.job_env) {
    cmd.env.emplace_back(name, value);
    a.insert(a.end(), {"-x", name});
  }
  for (const std::string& x : spec.user_exports) a.insert(a.end(), {"-x", x});
  if (spec.tag_output) {
    if (ompi4)
      a.push_back("--tag-output");
    else
      a.insert(a.end(), {"--output", "tag"});
  }
  a.insert(a.end(), spec.mpirun_args.begin(), spec.mpirun_args.end());
  a.push_back(spec.rank_wrapper);
  a.insert(a.end(), spec.program.begin(), spec.program.end());
  return cmd;
}

}  // namespace poolrun::launcher
