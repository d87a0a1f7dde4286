#pragma once

// Small hwloc 2.0 XML documents for unit tests: machines the tests describe in a few lines, so that
// every reader rule can be checked on a topology written for it.

#include <string>
#include <vector>

namespace poolrun::test::hwloc {

// <object type="OSDev">: osdev_type 1 gpu, 2 network, 3 openfabrics, 5 coproc.
std::string osdev(const std::string& name, int type,
                  const std::vector<std::pair<std::string, std::string>>& infos = {});
// A PCI function with children (OS devices); class like "0302", ids like "10de:20b0".
std::string pciDev(const std::string& busid, const std::string& cls, const std::string& ids,
                   const std::string& children = "");
// A PCI-to-PCI bridge at `depth` below its host bridge (1 = root port).
std::string pciBridge(const std::string& busid, int depth, const std::string& children);
std::string hostBridge(const std::string& buses, const std::string& children);

struct Package {
  int pus = 2;     // PUs of the package's single NUMA node
  std::string io;  // host bridges hanging off the package
};

// The whole document: packages in order, PUs numbered 0.. across them.
std::string machine(const std::vector<Package>& packages, const std::string& extra = "");

}  // namespace poolrun::test::hwloc
