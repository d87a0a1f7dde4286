// poolrun-sim-agent: the "remote shell" Open MPI uses to start its daemon on a node of a simulated
// cluster. It runs the command here, over loopback, with the node's name in POOLRUN_NODE and, where
// it may create a UTS namespace (root), as the host name too.
//
//   poolrun-sim-agent [ssh-style options] HOST COMMAND...

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "poolrun/topo/version.hpp"

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
  }
  execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
  std::cerr << "poolrun-sim-agent: error: cannot run /bin/sh: " << std::strerror(errno) << "\n";
  return 127;
}
