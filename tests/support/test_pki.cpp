#include "support/test_pki.hpp"

#include <sys/stat.h>

#include <fstream>
#include <stdexcept>

#include "support/process.hpp"

namespace poolrun::test {
namespace {

std::string quoted(const std::filesystem::path& p) {
  return "'" + p.string() + "'";
}

}  // namespace

TestPki::TestPki(const std::string& ca_name) {
  ca_cert_ = dir_.path() / "ca.crt";
  ca_key_ = dir_.path() / "ca.key";
  run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + quoted(ca_key_) +
      " -out " + quoted(ca_cert_) + " -days 3650 -subj '/CN=" + ca_name +
      "' -addext 'basicConstraints=critical,CA:true' -addext 'keyUsage=critical,keyCertSign,cRLSign'");
  // `openssl ca` (for explicit dates) keeps a database of what it issued.
  const std::filesystem::path db = dir_.path() / "db";
  std::filesystem::create_directories(db);
  dir_.write("db/index.txt", "");
  dir_.write("db/serial", "1000\n");
  dir_.write("ca.cnf", "[ca]\ndefault_ca = test_ca\n[test_ca]\ndir = " + db.string() +
                           "\ndatabase = $dir/index.txt\nserial = $dir/serial\nnew_certs_dir = $dir\n"
                           "certificate = " +
                           ca_cert_.string() + "\nprivate_key = " + ca_key_.string() +
                           "\ndefault_md = sha256\npolicy = anything\nunique_subject = no\n"
                           "copy_extensions = none\n[anything]\ncommonName = optional\n"
                           "organizationName = optional\norganizationalUnitName = optional\n");
}

void TestPki::run(const std::string& command) const {
  const ProcessResult r = runShell("cd " + quoted(dir_.path()) + " && " + command);
  if (r.status != 0) throw std::runtime_error("openssl failed (" + command + "): " + r.err);
}

CertFiles TestPki::issue(const std::string& name, const std::string& subject, const std::string& names,
                         int days) const {
  const std::filesystem::path ext =
      dir_.write(name + ".ext", "subjectAltName=" + names +
                                    "\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:false\n");
  CertFiles f{dir_.path() / (name + ".crt"), dir_.path() / (name + ".key")};
  run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + quoted(f.key) + " -out " +
      name + ".csr -subj '" + subject + "'");
  run("openssl x509 -req -in " + name + ".csr -CA " + quoted(ca_cert_) + " -CAkey " + quoted(ca_key_) +
      " -CAcreateserial -out " + quoted(f.cert) + " -days " + std::to_string(days) + " -extfile " +
      quoted(ext));
  ::chmod(f.key.c_str(), 0600);
  return f;
}

CertFiles TestPki::issueDated(const std::string& name, const std::string& subject, const std::string& names,
                              const std::string& start, const std::string& end) const {
  dir_.write(name + ".cnf", "[ext]\nsubjectAltName=" + names +
                                "\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:false\n");
  CertFiles f{dir_.path() / (name + ".crt"), dir_.path() / (name + ".key")};
  run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + quoted(f.key) + " -out " +
      name + ".csr -subj '" + subject + "'");
  run("openssl ca -batch -notext -config ca.cnf -extfile " + name + ".cnf -extensions ext -in " + name +
      ".csr -out " + quoted(f.cert) + " -startdate " + start + " -enddate " + end);
  ::chmod(f.key.c_str(), 0600);
  return f;
}

}  // namespace poolrun::test
