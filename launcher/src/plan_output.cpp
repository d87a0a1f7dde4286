// What a plan looks like to people (the table), to tools (plan.json), to Open MPI (the rankfile)
// and to NCCL (per-node topology XML).

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "poolrun/launcher/plan.hpp"
#include "poolrun/topo/error.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::launcher {
namespace {

using ojson = nlohmann::ordered_json;

std::string nicList(const RankPlan& r) {
  std::string out;
  for (const NicChoice& n : r.nics) out += (out.empty() ? "" : ",") + n.name;
  return out.empty() ? "-" : out;
}

// The GDR column: on/off where NCCL's IB transport decides by the plan, n/a where NCCL's transport
// has no GPUDirect RDMA (sockets, no NIC), plugin where the aws-ofi-nccl plugin decides (EFA).
std::string gdrCell(const RankPlan& r) {
  switch (r.transport) {
    case NetTransport::kIbVerbs:
      return r.gdr ? "on" : "off";
    case NetTransport::kOfiPlugin:
      return "plugin";
    case NetTransport::kSocket:
    case NetTransport::kNone:
      break;
  }
  return "n/a";
}

}  // namespace

void writeJobFile(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    throw Error(ErrorCode::kIo,
                file.string() + ": cannot write (check that the folder is writable and has space)");
  }
}

void writeJobFileAtomically(const std::filesystem::path& file, const std::string& text,
                            std::filesystem::perms permissions, bool durable) {
  const std::filesystem::path tmp =
      file.parent_path() / ("." + file.filename().string() + ".tmp-" + std::to_string(getpid()));
  auto fail = [&](const std::string& what, int error) {
    unlink(tmp.c_str());
    throw Error(ErrorCode::kIo, file.string() + ": cannot write (" + what + " " + tmp.string() + ": " +
                                    std::strerror(error) +
                                    "); check that the folder is writable and has space");
  };
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(permissions));
  if (fd < 0) fail("creating", errno);
  for (size_t done = 0; done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      fail("writing", e);
    }
    done += static_cast<size_t>(n);
  }
  // The mode given, whatever the umask took from it at creation.
  if (fchmod(fd, static_cast<mode_t>(permissions)) != 0) {
    int e = errno;
    close(fd);
    fail("setting the mode of", e);
  }
  if (durable && fsync(fd) != 0) {
    int e = errno;
    close(fd);
    fail("syncing", e);
  }
  if (close(fd) != 0) fail("closing", errno);
  if (rename(tmp.c_str(), file.c_str()) != 0) fail("renaming", errno);
}

ojson planToJson(const JobPlan& plan) {
  ojson doc;
  doc["schema"] = "poolrun.plan/1";
  doc["fabric"] = toString(plan.fabric);
  doc["world_size"] = plan.ranks.size();
  doc["hwthread_slots"] = plan.hwthread_slots;
  ojson nodes = ojson::array();
  for (const NodePlan& n : plan.nodes) {
    nodes.push_back({{"name", n.name},
                     {"switch", n.node.switch_name.empty() ? ojson(nullptr) : ojson(n.node.switch_name)},
                     {"topology", n.node.topology_file.string()},
                     {"first_rank", n.first_rank},
                     {"ranks", n.ranks}});
  }
  doc["nodes"] = nodes;
  ojson ranks = ojson::array();
  for (const RankPlan& r : plan.ranks) {
    ojson nics = ojson::array(), ports = ojson::array();
    for (const NicChoice& n : r.nics) {
      nics.push_back(n.name);
      ports.push_back(
          {{"name", n.name},
           {"port", n.port},
           {"netdev", n.netdev.empty() ? ojson(nullptr) : ojson(n.netdev)},
           {"link_layer", topo::toString(n.link_layer)},
           {"rate_gbps", n.rate_gbps > 0 ? ojson(n.rate_gbps) : ojson(nullptr)},
           {"roce_v2_gid_index", n.roce_v2_gid_index ? ojson(*n.roce_v2_gid_index) : ojson(nullptr)}});
    }
    ojson env = ojson::object();
    for (const auto& [k, v] : r.env) env[k] = v;
    ojson won = ojson::object();
    for (const auto& [k, planned] : r.user_won) won[k] = {{"user", env[k]}, {"planned", planned}};
    const topo::Gpu& gpu = plan.nodeOf(r).node.topology->gpus[static_cast<size_t>(r.gpu)];
    ranks.push_back(
        {{"rank", r.rank},
         {"node", plan.nodeOf(r).name},
         {"local_rank", r.local_rank},
         {"local_size", r.local_size},
         {"gpu",
          {{"index", r.gpu}, {"cuda_index", r.cuda_index}, {"pci", r.gpu_pci.str()}, {"model", gpu.model}}},
         {"nics", nics},
         {"nic_ports", ports},
         {"gpu_nic_path", r.nics.empty() ? ojson(nullptr) : ojson(r.gpu_nic_path.str())},
         {"transport", toString(r.transport)},
         {"gdr", r.transport == NetTransport::kOfiPlugin ? ojson(nullptr) : ojson(r.gdr)},
         {"gdr_reason", r.gdr_reason},
         {"numa", r.numa == topo::kNone ? ojson(nullptr) : ojson(r.numa)},
         {"cpuset", r.cpuset.toList()},
         {"shares_cpus", r.shares_cpus},
         {"rankfile_slots", r.rankfile_slots},
         {"env", env},
         {"user_won", won},
         {"notes", r.notes}});
  }
  doc["ranks"] = ranks;
  doc["notes"] = plan.notes;
  return doc;
}

std::string planTable(const JobPlan& plan) {
  struct Row {
    std::vector<std::string> cells;
  };
  std::vector<std::string> head = {"RANK",   "NODE", "LOCAL", "GPU",  "BUS ID",
                                   "NIC(S)", "PATH", "GDR",   "NUMA", "CPUS"};
  std::vector<Row> rows;
  for (const RankPlan& r : plan.ranks) {
    rows.push_back(
        {{std::to_string(r.rank), plan.nodeOf(r).name, std::to_string(r.local_rank), std::to_string(r.gpu),
          r.gpu_pci.str(), nicList(r), r.nics.empty() ? "-" : r.gpu_nic_path.str(), gdrCell(r),
          r.numa == topo::kNone ? "-" : std::to_string(r.numa), r.cpuset.toList()}});
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const Row& row : rows) width[c] = std::max(width[c], row.cells[c].size());
  }
  std::string out = fmt::format("fabric {} · {} ranks on {} nodes\n", toString(plan.fabric),
                                plan.ranks.size(), plan.nodes.size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c)
      l += fmt::format("{:<{}}", cells[c], width[c] + (c + 1 < cells.size() ? 2 : 0));
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(head);
  for (const Row& row : rows) line(row.cells);
  std::set<std::string> notes(plan.notes.begin(), plan.notes.end());
  for (const RankPlan& r : plan.ranks) {
    for (const std::string& n : r.notes) notes.insert(plan.nodeOf(r).name + ": " + n);
    for (const auto& [k, planned] : r.user_won) {
      notes.insert("rank " + std::to_string(r.rank) + ": your " + k + " wins over the planned " + planned);
    }
  }
  if (!notes.empty()) {
    out += "\nnotes:\n";
    for (const std::string& n : notes) out += "  - " + n + "\n";
  }
  return out;
}

std::string rankfile(const JobPlan& plan) {
  std::string out;
  for (const RankPlan& r : plan.ranks) {
    out += fmt::format("rank {}={} slot={}\n", r.rank, plan.nodeOf(r).name, r.rankfile_slots);
  }
  return out;
}

void writeJobDir(const JobPlan& plan, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorCode::kIo, dir.string() + ": cannot create the job directory: " + ec.message());
  writeJobFile(dir / "plan.json",
               planToJson(plan).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  writeJobFile(dir / "rankfile", rankfile(plan));
  std::map<const topo::NodeTopology*, std::string> xml;
  for (const NodePlan& n : plan.nodes) {
    auto it = xml.find(n.node.topology.get());
    if (it == xml.end()) it = xml.emplace(n.node.topology.get(), topo::toNcclXml(*n.node.topology)).first;
    writeJobFile(dir / ("topo-" + n.name + ".xml"), it->second);
  }
}

size_t pruneJobDirs(const std::filesystem::path& jobs, size_t keep, std::chrono::hours max_age,
                    std::chrono::minutes every) {
  namespace fs = std::filesystem;
  // Listing a week of job directories with their times costs milliseconds, so a launch looks only
  // when the last look is `every` old, and reads times only when there are more than `keep`.
  const fs::path stamp = jobs / ".pruned";
  const fs::file_time_type now = fs::file_time_type::clock::now();
  std::error_code ec;
  if (every.count() > 0) {
    fs::file_time_type last = fs::last_write_time(stamp, ec);
    if (!ec && now - last < every && last <= now) return 0;
  }
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(jobs, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e;
    if (it->is_directory(e) && !it->is_symlink(e)) candidates.push_back(it->path());
  }
  if (ec) return 0;  // no job directory yet, or one poolrun cannot read: nothing to do
  if (every.count() > 0) {
    std::ofstream(stamp).close();  // created where missing; its time is the last look's
    fs::last_write_time(stamp, now, ec);
  }
  if (candidates.size() <= keep) return 0;
  std::vector<std::pair<fs::file_time_type, fs::path>> dirs;
  for (fs::path& p : candidates) {
    std::error_code e;
    fs::file_time_type t = fs::last_write_time(p, e);
    if (!e) dirs.emplace_back(t, std::move(p));
  }
  std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const fs::file_time_type cutoff = now - max_age;
  size_t removed = 0;
  for (size_t i = keep; i < dirs.size(); ++i) {
    std::error_code e;
    if (dirs[i].first < cutoff && fs::remove_all(dirs[i].second, e) > 0 && !e) ++removed;
  }
  return removed;
}

}  // namespace poolrun::launcher
