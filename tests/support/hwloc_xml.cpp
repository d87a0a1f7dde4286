#include "support/hwloc_xml.hpp"

#include <cstdio>

namespace poolrun::test::hwloc {
namespace {

int next_gp = 1000;

std::string mask(int first, int count) {
  // hwloc bitmap text: comma-separated 32-bit words, most significant first.
  unsigned long long bits = 0;
  for (int i = first; i < first + count; ++i) bits |= 1ULL << i;
  char buf[40];
  if (bits >> 32) {
    std::snprintf(buf, sizeof buf, "0x%08llx,0x%08llx", bits >> 32, bits & 0xffffffffULL);
  } else {
    std::snprintf(buf, sizeof buf, "0x%08llx", bits);
  }
  return buf;
}

std::string gp() {
  return " gp_index=\"" + std::to_string(next_gp++) + "\"";
}

}  // namespace

std::string osdev(const std::string& name, int type,
                  const std::vector<std::pair<std::string, std::string>>& infos) {
  std::string s =
      "<object type=\"OSDev\"" + gp() + " name=\"" + name + "\" osdev_type=\"" + std::to_string(type) + "\">";
  for (const auto& [k, v] : infos) s += "<info name=\"" + k + "\" value=\"" + v + "\"/>";
  return s + "</object>\n";
}

std::string pciDev(const std::string& busid, const std::string& cls, const std::string& ids,
                   const std::string& children) {
  return "<object type=\"PCIDev\"" + gp() + " pci_busid=\"" + busid + "\" pci_type=\"" + cls + " [" + ids +
         "] [0000:0000] 00\" pci_link_speed=\"15.75\">\n" + children + "</object>\n";
}

std::string pciBridge(const std::string& busid, int depth, const std::string& children) {
  std::string bus = busid.substr(5, 2);
  return "<object type=\"Bridge\"" + gp() + " bridge_type=\"1-1\" depth=\"" + std::to_string(depth) +
         "\" bridge_pci=\"0000:[" + bus + "-ff]\" pci_busid=\"" + busid +
         "\" pci_type=\"0604 [10b5:8796] [0000:0000] 00\" pci_link_speed=\"15.75\">\n" + children +
         "</object>\n";
}

std::string hostBridge(const std::string& buses, const std::string& children) {
  return "<object type=\"Bridge\"" + gp() + " bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"" + buses +
         "\">\n" + children + "</object>\n";
}

std::string machine(const std::vector<Package>& packages, const std::string& extra) {
  int total = 0;
  for (const Package& p : packages) total += p.pus;
  std::string nodes = mask(0, static_cast<int>(packages.size()));
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n";
  s += "<topology version=\"2.0\">\n";
  s += "<object type=\"Machine\" os_index=\"0\" cpuset=\"" + mask(0, total) + "\" complete_cpuset=\"" +
       mask(0, total) + "\" allowed_cpuset=\"" + mask(0, total) + "\" nodeset=\"" + nodes +
       "\" complete_nodeset=\"" + nodes + "\" allowed_nodeset=\"" + nodes + "\" gp_index=\"1\">\n";
  s += "<info name=\"HostName\" value=\"testnode\"/>\n";
  int pu = 0;
  for (size_t p = 0; p < packages.size(); ++p) {
    std::string cpus = mask(pu, packages[p].pus);
    std::string node = mask(static_cast<int>(p), 1);
    s += "<object type=\"Package\" os_index=\"" + std::to_string(p) + "\" cpuset=\"" + cpus +
         "\" complete_cpuset=\"" + cpus + "\" nodeset=\"" + node + "\" complete_nodeset=\"" + node + "\"" +
         gp() + ">\n<info name=\"CPUVendor\" value=\"GenuineIntel\"/>\n";
    s += "<object type=\"NUMANode\" os_index=\"" + std::to_string(p) + "\" cpuset=\"" + cpus +
         "\" complete_cpuset=\"" + cpus + "\" nodeset=\"" + node + "\" complete_nodeset=\"" + node + "\"" +
         gp() + " local_memory=\"1073741824\"/>\n";
    for (int i = 0; i < packages[p].pus; ++i, ++pu) {
      std::string c = mask(pu, 1);
      s += "<object type=\"PU\" os_index=\"" + std::to_string(pu) + "\" cpuset=\"" + c +
           "\" complete_cpuset=\"" + c + "\" nodeset=\"" + node + "\" complete_nodeset=\"" + node + "\"" +
           gp() + "/>\n";
    }
    s += packages[p].io;
    s += "</object>\n";
  }
  s += "</object>\n" + extra + "</topology>\n";
  return s;
}

}  // namespace poolrun::test::hwloc
