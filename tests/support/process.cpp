#include "support/process.hpp"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "support/temp_dir.hpp"

namespace poolrun::test {

ProcessResult runShell(const std::string& command) {
  TempDir tmp;
  std::string cmd =
      command + " >" + (tmp.path() / "out").string() + " 2>" + (tmp.path() / "err").string() + " </dev/null";
  int raw = std::system(cmd.c_str());
  ProcessResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(tmp.path() / "out");
  r.err = slurp(tmp.path() / "err");
  return r;
}

std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace poolrun::test
