// poolrun-sim-agent: the "remote shell" Open MPI uses to start its daemon on a node of a simulated
// cluster. It runs the command here, over loopback, with the node's name in POOLRUN_NODE and, where
// it may create a UTS namespace (root), as the host name too.
//
//   poolrun-sim-agent [ssh-style options] HOST COMMAND...

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "poolrun/topo/version.hpp"

namespace {

// Without a UTS namespace (a user who is not root), every simulated node's daemon is this machine
// by name, and Open MPI gives them one session directory: the daemons of one job then write the
// same hwloc topology file there at once, and one in seven jobs of two nodes died of it (orted's
// SIGSEGV in hwloc_shmem_topology_write, 2026-12-06). Each node gets a directory of its own, which
// its daemon and ranks take as their temporary base: TMPDIR/poolrun-sim-UID-HOST, made 0700 and
// used only where it is this user's own directory (never another's, or a link).
void ownSessionDirectory(const std::string& host) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = std::string(tmp != nullptr && *tmp == '/' ? tmp : "/tmp") + "/poolrun-sim-" +
                           std::to_string(getuid()) + "-" + host;
  mkdir(base.c_str(), 0700);
  struct stat st {};
  if (lstat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
    std::cerr << "poolrun-sim-agent: warning: " << base << " is not a directory of this user's: node " << host
              << "'s daemon shares this machine's Open MPI session directory\n";
    return;
  }
  setenv("OMPI_MCA_orte_tmpdir_base", base.c_str(), 1);  // Open MPI 4
  setenv("PRTE_MCA_prte_tmpdir_base", base.c_str(), 1);  // Open MPI 5 (PRRTE)
}

}  // namespace

int main(int argc, char** argv) {
  // Open MPI starts it as `AGENT [ssh options] HOST COMMAND`: --version alone is never that.
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::cout << poolrun::topo::versionText("poolrun-sim-agent");
    return 0;
  }
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;  // options Open MPI passes for ssh
  if (i + 1 >= argc) {
    std::cerr
        << "usage: poolrun-sim-agent HOST COMMAND... (Open MPI's remote-shell agent for poolrun's simulated "
           "cluster)\n";
    return 2;
  }
  std::string host = argv[i++];
  std::string command;
  for (; i < argc; ++i) command += std::string(command.empty() ? "" : " ") + argv[i];
  setenv("POOLRUN_NODE", host.c_str(), 1);
  if (unshare(CLONE_NEWUTS) == 0) {
    if (sethostname(host.c_str(), host.size()) != 0) {
      std::cerr << "poolrun-sim-agent: warning: cannot set the host name to " << host << ": "
                << std::strerror(errno) << "\n";
    }
  } else {
    ownSessionDirectory(host);
  }
  execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
  std::cerr << "poolrun-sim-agent: error: cannot run /bin/sh: " << std::strerror(errno) << "\n";
  return 127;
}
