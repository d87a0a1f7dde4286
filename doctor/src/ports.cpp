// The RDMA and RoCE port checks: port state, rate against like ports, RoCE GID, MTU and netdev,
// verbs device nodes and the locked-memory limit.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "checks.hpp"
#include "poolrun/common/regular_file.hpp"

namespace poolrun::doctor::detail {
namespace fs = std::filesystem;

// Kernel files: regular (a FIFO or a device planted in a test's tree must not block), and only their
// first 64 KiB (/proc/modules of a node with hundreds of modules is a fraction of that).
std::optional<std::string> readText(const fs::path& file, std::string* why) {
  return common::readAttributeFile(file, common::kSysfsFileLimit, true, why);
}

std::vector<uint8_t> readBytes(const fs::path& file, size_t limit) {
  try {
    std::string bytes = common::readRegularFileHead(file, limit, "PCI configuration files");
    return {bytes.begin(), bytes.end()};
  } catch (const Error&) {
    return {};
  }
}

namespace {

std::string kindOf(uint16_t vendor, uint16_t device, topo::LinkLayer layer) {
  return fmt::format("{:04x}:{:04x} {}", vendor, device,
                     layer == topo::LinkLayer::kEthernet ? "Ethernet" : "InfiniBand");
}

bool inScope(const PortFacts& p, const Scope& scope) {
  if (!scope.planned) return true;
  return std::any_of(scope.ports.begin(), scope.ports.end(),
                     [&](const PlannedPort& pp) { return pp.nic == p.nic && pp.port == p.port; });
}

const PlannedPort* plannedFor(const PortFacts& p, const Scope& scope) {
  for (const PlannedPort& pp : scope.ports) {
    if (pp.nic == p.nic && pp.port == p.port) return &pp;
  }
  return nullptr;
}

std::string formatRate(double gbps) {
  return gbps == static_cast<double>(static_cast<long>(gbps)) ? fmt::format("{}", static_cast<long>(gbps))
                                                              : fmt::format("{:.1f}", gbps);
}

void checkState(const PortFacts& p, Report& report) {
  Check c{"rdma.port", Status::kPass, p.subject(), "", "", ""};
  if (p.state == topo::PortState::kUnknown) {
    c.status = Status::kSkip;
    c.evidence = "port state not recorded (" + p.where + ")";
    report.add(c);
    return;
  }
  std::string state = p.state_text.empty() ? std::string(topo::toString(p.state)) : p.state_text;
  c.evidence =
      "state " + state + (p.phys_state.empty() ? "" : ", phys_state " + p.phys_state) + " (" + p.where + ")";
  bool linkUp = p.phys_state.empty() || p.phys_state.find("LinkUp") != std::string::npos;
  if (p.state == topo::PortState::kActive && linkUp) {
    report.add(c);
    return;
  }
  c.status = Status::kFail;
  bool ib = p.link_layer != topo::LinkLayer::kEthernet;
  if (p.phys_state.find("Disabled") != std::string::npos) {
    c.fix = fmt::format(
        "the port is administratively disabled: enable it (ibportstate, or on the switch port) "
        "or leave {} out of the job",
        p.nic);
  } else if (p.state == topo::PortState::kInit || p.state == topo::PortState::kArmed) {
    c.fix = ib ? "the link is up but no subnet manager has configured the port: start opensm (or enable the "
                 "switch's SM) on this fabric"
               : "the port is not active yet: check the netdev and the switch port (ip link, ethtool " +
                     p.netdev + ")";
  } else {
    c.fix = fmt::format("no link: check the cable and the switch port (ibstat {} {}; mlxlink -d {})", p.nic,
                        p.port, p.nic);
  }
  report.add(c);
}

// Each checked port against the fastest active port of its kind on the node (checked or not).
void checkRates(const std::vector<PortFacts>& all, const std::vector<const PortFacts*>& ports,
                Report& report) {
  std::map<std::string, const PortFacts*> fastestOf;
  for (const PortFacts& p : all) {
    if (p.rate_gbps <= 0 || p.state != topo::PortState::kActive) continue;
    const PortFacts*& f = fastestOf[p.kind];
    if (f == nullptr || p.rate_gbps > f->rate_gbps) f = &p;
  }
  std::map<std::string, std::vector<const PortFacts*>> byKind;
  for (const PortFacts* p : ports) {
    if (p->rate_gbps > 0 && p->state == topo::PortState::kActive) byKind[p->kind].push_back(p);
  }
  for (const auto& [kind, group] : byKind) {
    const PortFacts* fastest = fastestOf[kind];
    double best = fastest->rate_gbps;
    int slow = 0;
    for (const PortFacts* p : group) {
      if (p->rate_gbps >= best) continue;
      ++slow;
      report.add(
          {"rdma.rate", Status::kWarn, p->subject(),
           fmt::format("{} Gb/s ({}) where {} and its other {} ports run {} Gb/s", formatRate(p->rate_gbps),
                       p->rate_text.empty() ? p->where : p->rate_text, fastest->subject(), kind,
                       formatRate(best)),
           fmt::format("the link trained slow: reseat or replace the cable or transceiver, check the switch "
                       "port (mlxlink -d {} -p {})",
                       p->nic, p->port),
           ""});
    }
    if (slow == 0) {
      report.add({"rdma.rate", Status::kPass,
                  fmt::format("{} {} port{}", group.size(), kind, group.size() > 1 ? "s" : ""),
                  fmt::format("all {} Gb/s{}", formatRate(best),
                              fastest->rate_text.empty() ? "" : " (" + fastest->rate_text + ")"),
                  "", ""});
    }
  }
}

void checkRoce(const PortFacts& p, const Scope& scope, Report& report) {
  const PlannedPort* planned = plannedFor(p, scope);
  Check gid{"roce.gid", Status::kPass, p.subject(), "", "", ""};
  if (!p.gids_known) {
    gid.status = Status::kSkip;
    gid.evidence = "GID table not recorded (" + p.where + ")";
  } else if (!p.roce_v2_gid) {
    gid.status = Status::kFail;
    gid.evidence = "no RoCE v2 GID with an IPv4 address (" + p.where + "/gids, gid_attrs/types)";
    gid.fix = fmt::format(
        "NCCL would use a link-local GID that does not route: give {} an IPv4 address "
        "(ip addr add ADDR/PREFIX dev {}) and check that RoCE v2 is enabled",
        p.netdev.empty() ? "the port's netdev" : p.netdev, p.netdev.empty() ? "NETDEV" : p.netdev);
  } else if (planned != nullptr && planned->gid_index && *planned->gid_index != *p.roce_v2_gid) {
    gid.status = Status::kFail;
    gid.evidence =
        fmt::format("the job would use GID index {}, but the RoCE v2 IPv4 GID is index {} ({}/gids/{})",
                    *planned->gid_index, *p.roce_v2_gid, p.where, *p.roce_v2_gid);
    gid.fix = fmt::format("set NCCL_IB_GID_INDEX={} (or unset it and let poolrun choose)", *p.roce_v2_gid);
  } else {
    gid.evidence =
        fmt::format("RoCE v2 IPv4 GID at index {} ({}/gids/{})", *p.roce_v2_gid, p.where, *p.roce_v2_gid);
  }
  report.add(gid);

  if (p.mtu) {
    Check mtu{"roce.mtu", Status::kPass, p.netdev, fmt::format("MTU {} ({}/mtu)", *p.mtu, p.net_dir), "", ""};
    if (*p.mtu < scope.jumbo_mtu) {
      mtu.status = Status::kWarn;
      mtu.fix = fmt::format(
          "RoCE then carries at most {}-byte frames: ip link set {} mtu {} (and the same on the "
          "switch ports)",
          *p.mtu < 4200 ? 1024 : 4096, p.netdev, scope.jumbo_mtu);
    }
    report.add(mtu);
  }
  if (p.operstate) {
    Check up{"roce.netdev",
             Status::kPass,
             p.netdev,
             "operstate " + *p.operstate + " (" + p.net_dir + "/operstate)",
             "",
             ""};
    if (*p.operstate != "up") {
      up.status = Status::kFail;
      up.fix = "bring it up: ip link set " + p.netdev + " up";
    }
    report.add(up);
  } else if (p.gids_known && p.netdev.empty()) {
    report.add({"roce.netdev", Status::kFail, p.subject(),
                "no netdev for this Ethernet port (" + p.where + ")",
                "load the NIC's Ethernet driver (mlx5_core) and check `rdma link show`", ""});
  }
}

}  // namespace

std::vector<PortFacts> livePorts(const Roots& roots, const std::vector<topo::SysfsRdmaDevice>& devices) {
  std::vector<PortFacts> out;
  for (const topo::SysfsRdmaDevice& d : devices) {
    for (const topo::SysfsRdmaPort& sp : d.ports) {
      PortFacts p;
      p.nic = d.name;
      p.port = sp.port.port;
      p.link_layer = sp.port.link_layer;
      p.kind = kindOf(d.vendor, d.device, p.link_layer);
      p.state = sp.port.state;
      p.rate_gbps = sp.port.rate_gbps;
      p.netdev = sp.port.netdev;
      p.roce_v2_gid = sp.port.roce_v2_gid_index;
      p.gids_known = true;
      fs::path dir = roots.sys / "class" / "infiniband" / d.name / "ports" / std::to_string(p.port);
      p.where = dir.string();
      p.state_text = readText(dir / "state").value_or("");
      p.phys_state = readText(dir / "phys_state").value_or("");
      p.rate_text = readText(dir / "rate").value_or("");
      if (!p.netdev.empty()) {
        fs::path net = roots.sys / "class" / "net" / p.netdev;
        p.net_dir = net.string();
        p.operstate = readText(net / "operstate");
        if (auto mtu = readText(net / "mtu")) {
          try {
            p.mtu = std::stoi(*mtu);
          } catch (const std::exception&) {
          }
        }
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<PortFacts> topologyPorts(const topo::NodeTopology& topology) {
  std::vector<PortFacts> out;
  for (const topo::Nic& n : topology.nics) {
    std::vector<topo::NicPort> recorded = n.ports;
    if (recorded.empty()) recorded.emplace_back();  // a NIC whose ports the source does not describe
    for (const topo::NicPort& np : recorded) {
      PortFacts p;
      p.nic = n.name;
      p.port = np.port;
      p.link_layer = np.link_layer;
      p.kind = kindOf(n.vendor, n.device, np.link_layer);
      p.state = np.state;
      p.rate_gbps = np.rate_gbps;
      p.netdev = np.netdev;
      p.roce_v2_gid = np.roce_v2_gid_index;
      // A topology that knows the port's state was read from sysfs, GID table included.
      p.gids_known = np.state != topo::PortState::kUnknown;
      p.where = topology.source.empty() ? "topology" : topology.source;
      out.push_back(std::move(p));
    }
  }
  return out;
}

void checkPorts(const std::vector<PortFacts>& ports, const Scope& scope, Report& report) {
  std::vector<const PortFacts*> chosen;
  for (const PortFacts& p : ports) {
    if (inScope(p, scope)) chosen.push_back(&p);
  }
  for (const PlannedPort& pp : scope.ports) {
    bool found = std::any_of(ports.begin(), ports.end(),
                             [&](const PortFacts& p) { return p.nic == pp.nic && p.port == pp.port; });
    if (!found) {
      report.add({"rdma.port", Status::kFail, pp.nic + "/" + std::to_string(pp.port),
                  "the plan uses this port, but the node has no such RDMA port",
                  "check that the NIC's driver is loaded (rdma link show) or plan with --fabric tcp", ""});
    }
  }
  for (const PortFacts* p : chosen) checkState(*p, report);
  checkRates(ports, chosen, report);
  for (const PortFacts* p : chosen) {
    if (p->link_layer == topo::LinkLayer::kEthernet && p->state != topo::PortState::kUnknown)
      checkRoce(*p, scope, report);
  }
}

void checkVerbs(const Roots& roots, const std::vector<std::string>& nics, Report& report) {
  std::map<std::string, std::string> verbsOf;  // NIC -> uverbsN
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(roots.sys / "class" / "infiniband_verbs", ec)) {
    if (auto ibdev = readText(entry.path() / "ibdev")) verbsOf[*ibdev] = entry.path().filename().string();
  }
  for (const std::string& nic : nics) {
    auto it = verbsOf.find(nic);
    if (it == verbsOf.end()) {
      report.add({"rdma.uverbs", Status::kFail, nic,
                  "no uverbs device names it in " + (roots.sys / "class" / "infiniband_verbs").string(),
                  "load the verbs module: modprobe ib_uverbs", ""});
      continue;
    }
    fs::path node = roots.dev / "infiniband" / it->second;
    Check c{"rdma.uverbs", Status::kPass, nic, node.string(), "", ""};
    if (!fs::exists(node, ec)) {
      c.status = Status::kFail;
      c.evidence += " is missing";
      c.fix = "create the device nodes (udev, or `--device=/dev/infiniband` for a container)";
    } else if (access(node.c_str(), R_OK | W_OK) != 0) {
      c.status = Status::kFail;
      c.evidence += fmt::format(" is not accessible: {}", std::strerror(errno));
      c.fix = "give the job's user read and write access (the rdma group, or a udev rule with MODE=\"0666\")";
    } else {
      c.evidence += " is accessible";
    }
    report.add(c);
  }
}

void checkMemlock(const Roots& roots, Report& report) {
  fs::path file = roots.proc / "self" / "limits";
  std::string why;
  auto text = readText(file, &why);
  Check c{"rdma.memlock", Status::kPass, "ulimit -l", "", "", ""};
  if (!text) {
    c.status = Status::kWarn;
    c.evidence = why;
    c.fix = "check `ulimit -l` in the job's shell: RDMA needs it unlimited";
    report.add(c);
    return;
  }
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with("Max locked memory")) continue;
    std::istringstream fields(line.substr(std::strlen("Max locked memory")));
    std::string soft;
    fields >> soft;
    c.evidence = "soft limit " + soft + (soft == "unlimited" ? "" : " bytes") + " (" + file.string() + ")";
    if (soft == "unlimited") {
      report.add(c);
      return;
    }
    unsigned long long bytes = 0;
    try {
      bytes = std::stoull(soft);
    } catch (const std::exception&) {
      c.status = Status::kWarn;
      c.evidence = "unreadable value '" + soft + "' (" + file.string() + ")";
      c.fix = "check `ulimit -l`: RDMA needs it unlimited";
      report.add(c);
      return;
    }
    // Below this NCCL and UCX fail to register their buffers; above it, large jobs still may.
    constexpr unsigned long long kTooSmall = 64ull << 20;
    c.status = bytes < kTooSmall ? Status::kFail : Status::kWarn;
    c.fix =
        "set `* - memlock unlimited` in /etc/security/limits.conf (and LimitMEMLOCK=infinity for slurmd, "
        "sshd or the container runtime)";
    report.add(c);
    return;
  }
  c.status = Status::kWarn;
  c.evidence = "no 'Max locked memory' line in " + file.string();
  c.fix = "check `ulimit -l`: RDMA needs it unlimited";
  report.add(c);
}

}  // namespace poolrun::doctor::detail
