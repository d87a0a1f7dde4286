#include "poolrun/tuner/config.hpp"

#include <sys/stat.h>

#include <initializer_list>
#include <set>
#include <sstream>

#include "poolrun/common/json_fields.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"

namespace poolrun::tuner {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& origin, const std::string& message) {
  throw ConfigError("tuner config " + origin + ": " + message);
}

using common::trim;
using Fields = common::JsonFields;

std::string shown(const json& v) {
  return common::shownJson(v);
}

// A key as messages show it (as JsonFields shows it): as it is where it is printable ASCII, else with
// JSON's escapes, so that a message stays one printable line.
std::string keyText(const std::string& key) {
  bool plain = true;
  for (char c : key) plain = plain && c >= 0x20 && c < 0x7f && c != '\'' && c != '\\';
  if (plain) return key;
  std::string quoted = json(key).dump(-1, ' ', false, json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

// The "comment" and "x-..." keys of any object are the user's own.
bool userKey(std::string_view key) {
  return key == "comment" || key.starts_with("x-");
}

// The fields of the object `v`, named `path` in messages (a null is a value here, of the wrong type).
Fields fieldsOf(const json& v, std::string path, const std::string& origin) {
  return Fields(
      v, std::move(path), [origin](const std::string& message) { fail(origin, message); },
      Fields::Nulls::kValues);
}

constexpr const char* kCollList = "allreduce, allgather, reducescatter, broadcast or reduce";
constexpr const char* kAlgoList = "Ring, Tree, NVLS, NVLSTree, CollNetDirect, CollNetChain or PAT";
constexpr const char* kProtoList = "LL, LL128 or Simple";

Coll collField(const Fields& f, const std::string& key, const std::string& origin) {
  std::string s = f.string(key);
  auto c = parseColl(s);
  if (!c) fail(origin, f.name(key) + " '" + s + "' is not a collective (use " + kCollList + ")");
  return *c;
}

Algo algoField(const Fields& f, const std::string& key, const std::string& origin) {
  std::string s = f.string(key);
  auto a = parseAlgo(s);
  if (!a) fail(origin, f.name(key) + " '" + s + "' is not an NCCL algorithm (use " + kAlgoList + ")");
  return *a;
}

Proto protoField(const Fields& f, const std::string& key, const std::string& origin) {
  std::string s = f.string(key);
  auto p = parseProto(s);
  if (!p) fail(origin, f.name(key) + " '" + s + "' is not an NCCL protocol (use " + kProtoList + ")");
  return *p;
}

bool simpleOnly(Algo a) {
  return a != Algo::kTree && a != Algo::kRing;
}

// Checks shared by JSON and CSV rules: what is wrong with the rule, or "".
std::string ruleProblem(const Rule& r) {
  if (r.min_bytes > r.max_bytes) {
    return "min_bytes " + std::to_string(r.min_bytes) + " is above max_bytes " + std::to_string(r.max_bytes) +
           " (swap them)";
  }
  if (r.algo && r.proto && simpleOnly(*r.algo) && *r.proto != Proto::kSimple) {
    return std::string(algoName(*r.algo)) + " runs only with Simple, not " +
           std::string(protoName(*r.proto)) + " (set the protocol to Simple)";
  }
  return "";
}

Rule parseRule(const json& v, size_t index, const std::string& origin) {
  Fields f = fieldsOf(v, "rules[" + std::to_string(index) + "]", origin);
  f.allowOnly({"coll", "min_bytes", "max_bytes", "nnodes", "nranks", "pipe_ops", "reg_buff", "algo", "proto",
               "channels"},
              {}, userKey);
  Rule r;
  if (f.has("coll")) r.coll = collField(f, "coll", origin);
  r.min_bytes = f.integer<std::uint64_t>("min_bytes", 0, UINT64_MAX, 0);
  r.max_bytes = f.integer<std::uint64_t>("max_bytes", 0, UINT64_MAX, UINT64_MAX);
  r.nnodes = f.integer("nnodes", -1, 1 << 20, -1);
  r.nranks = f.integer("nranks", -1, 1 << 24, -1);
  r.pipe_ops = f.integer("pipe_ops", -1, 1 << 20, -1);
  r.reg_buff = f.integer("reg_buff", -1, 1, -1);
  if (f.has("algo")) r.algo = algoField(f, "algo", origin);
  if (f.has("proto")) r.proto = protoField(f, "proto", origin);
  if (!r.algo && !r.proto) fail(origin, f.path() + " names neither algo nor proto (set at least one)");
  r.channels = f.integer("channels", 0, 64, 0);
  r.origin = origin + " " + f.path();
  if (std::string problem = ruleProblem(r); !problem.empty()) fail(origin, f.path() + ": " + problem);
  return r;
}

Measurement parseMeasurement(const json& v, size_t index, const std::string& origin) {
  Fields f = fieldsOf(v, "calibration[" + std::to_string(index) + "]", origin);
  f.allowOnly({"coll", "nranks", "nnodes", "algo", "proto", "bytes", "time_us", "source", "gpus_per_process"},
              {}, userKey);
  Measurement m;
  m.coll = collField(f, "coll", origin);
  m.nranks = f.integer("nranks", 1, 1 << 24);
  m.nnodes = f.integer("nnodes", 1, m.nranks);
  // null: not forced (as toJson writes it).
  if (const json* a = f.find("algo"); a != nullptr && !a->is_null()) m.algo = algoField(f, "algo", origin);
  if (const json* p = f.find("proto"); p != nullptr && !p->is_null())
    m.proto = protoField(f, "proto", origin);
  m.bytes = f.integer<std::uint64_t>("bytes", 0, UINT64_MAX, 0);
  m.time_us = f.number("time_us", 1e-3, 1e12);
  if (f.has("source")) m.source = f.string("source");
  if (f.has("gpus_per_process")) m.gpus_per_process = f.integer("gpus_per_process", 1, m.nranks);
  return m;
}

std::string readFile(const std::string& path, const std::string& what, size_t limit,
                     common::FileIdentity* identity) {
  try {
    return common::readRegularFile(path, limit, what + " files", identity);
  } catch (const Error& e) {
    throw ConfigError(what + ": " + e.what());
  }
}

// A configuration file, or the rules of an example-tuner CSV file.
TunerConfig configFromFile(const std::string& path, bool csv, common::FileIdentity* identity) {
  if (!csv) return parseConfig(readFile(path, "tuner config", kConfigFileLimit, identity), path);
  TunerConfig c;
  c.has_hardware = false;
  c.origin = path;
  c.rules = parseExampleCsv(readFile(path, "tuner rules", kConfigFileLimit, identity), path);
  return c;
}

}  // namespace

std::string_view fabricName(Fabric f) {
  switch (f) {
    case Fabric::kIb:
      return "ib";
    case Fabric::kRoce:
      return "roce";
    case Fabric::kTcp:
      return "tcp";
  }
  return "ib";
}

std::string_view cpuVendorName(CpuVendor v) {
  switch (v) {
    case CpuVendor::kIntel:
      return "intel";
    case CpuVendor::kAmd:
      return "amd";
    case CpuVendor::kArm:
      return "arm";
    case CpuVendor::kOther:
      return "other";
  }
  return "other";
}

TunerConfig parseConfig(std::string_view jsonText, const std::string& origin) {
  if (std::optional<size_t> at = common::jsonTooDeepAt(jsonText, kMaxConfigDepth)) {
    fail(origin, "JSON nests deeper than " + std::to_string(kMaxConfigDepth) + " levels at byte " +
                     std::to_string(*at) + " (a tuner configuration nests 3; is it the right file?)");
  }
  // A key given twice in one object is refused, as poold refuses it in a request body: the parser
  // would keep the last, and a reader of the file (or another tool) taking the first would disagree
  // with the plugin about which rule or figure counts.
  struct Level {
    std::string path;  // as messages name fields: "", "gpu", "rules[2]"
    bool array = false;
    size_t index = 0;
    std::string key;
    std::set<std::string> keys;
  };
  std::vector<Level> levels;
  auto childPath = [&levels]() -> std::string {
    if (levels.empty()) return "";
    const Level& up = levels.back();
    if (up.array) return up.path + "[" + std::to_string(up.index) + "]";
    return up.path.empty() ? keyText(up.key) : up.path + "." + keyText(up.key);
  };
  auto once = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        levels.push_back({childPath(), event == json::parse_event_t::array_start, 0, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        levels.pop_back();
        if (!levels.empty() && levels.back().array) ++levels.back().index;
        break;
      case json::parse_event_t::key: {
        Level& here = levels.back();
        here.key = parsed.get<std::string>();
        if (!here.keys.insert(here.key).second) {
          std::string name = here.path.empty() ? keyText(here.key) : here.path + "." + keyText(here.key);
          fail(origin, "field '" + name +
                           "' given twice in one object (the parser would keep only the last); give each "
                           "field once");
        }
        break;
      }
      case json::parse_event_t::value:
        if (!levels.empty() && levels.back().array) ++levels.back().index;
        break;
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(jsonText, once);
  } catch (const json::parse_error& e) {
    fail(origin, std::string("not valid JSON at byte ") + std::to_string(e.byte) +
                     " (check quotes, commas and braces there)");
  } catch (const json::exception& e) {
    // out_of_range 406: a number beyond a double ("1e999"). Its text without nlohmann's "[json...] ".
    std::string what = e.what();
    fail(origin,
         "unusable JSON: " + what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2) +
             " (use a number a double can hold)");
  }
  Fields top = fieldsOf(doc, "", origin);
  top.allowOnly(
      {"schema", "fabric", "nodes", "gpus_per_node", "gpu", "net", "cpu_vendor", "rules", "calibration"}, {},
      userKey);
  std::string schema = top.string("schema");
  if (schema != kConfigSchema) {
    fail(origin, "schema '" + schema + "' is not supported (this plugin reads \"" +
                     std::string(kConfigSchema) + "\")");
  }
  TunerConfig c;
  c.origin = origin;
  std::string fabric = top.string("fabric");
  if (fabric == "ib") {
    c.fabric = Fabric::kIb;
  } else if (fabric == "roce") {
    c.fabric = Fabric::kRoce;
  } else if (fabric == "tcp") {
    c.fabric = Fabric::kTcp;
  } else {
    fail(origin, "fabric '" + fabric + "' is not known (use ib, roce or tcp)");
  }
  c.nodes = top.integer("nodes", 1, 1 << 20);
  c.gpus_per_node = top.integer("gpus_per_node", 1, 1024);

  Fields gpu = top.object("gpu");
  gpu.allowOnly({"sm", "nvlink_gbyte_s", "nvswitch", "nvls", "pcie_gbyte_s"}, {}, userKey);
  c.gpu.sm = gpu.integer("sm", 60, 199);
  c.gpu.nvlink_gbyte_s = gpu.number("nvlink_gbyte_s", 0, 100000);
  c.gpu.nvswitch = gpu.boolean("nvswitch", false);
  c.gpu.nvls = gpu.boolean("nvls", false);
  c.gpu.pcie_gbyte_s = gpu.number("pcie_gbyte_s", 0.1, 10000, 12.0);
  if (c.gpu.nvls && (c.gpu.sm < 90 || !c.gpu.nvswitch)) {
    fail(origin, "gpu.nvls is true but NVLink SHARP needs sm >= 90 with an NVSwitch (gpu.sm is " +
                     std::to_string(c.gpu.sm) + ", gpu.nvswitch is " + (c.gpu.nvswitch ? "true" : "false") +
                     "); set gpu.nvls to false");
  }
  if (c.gpu.nvswitch && c.gpu.nvlink_gbyte_s <= 0) {
    fail(origin, "gpu.nvswitch is true but gpu.nvlink_gbyte_s is 0 (give the NVLink bandwidth per GPU)");
  }

  Fields net = top.object("net");
  net.allowOnly({"nics_per_node", "nic_gbit_s", "gdr", "sharp"}, {}, userKey);
  c.net.nics_per_node = net.integer("nics_per_node", 0, 256);
  c.net.nic_gbit_s = net.number("nic_gbit_s", 0, 100000);
  c.net.gdr = net.boolean("gdr", false);
  c.net.sharp = net.boolean("sharp", false);
  if (c.nodes > 1 && (c.net.nics_per_node == 0 || c.net.nic_gbit_s <= 0)) {
    fail(origin, "nodes is " + std::to_string(c.nodes) +
                     " but net describes no network (give net.nics_per_node >= 1 and net.nic_gbit_s > 0)");
  }
  if (c.fabric == Fabric::kTcp && (c.net.gdr || c.net.sharp)) {
    fail(origin,
         std::string("net.") + (c.net.gdr ? "gdr" : "sharp") +
             " is true but fabric is tcp (GPUDirect RDMA and SHARP need ib or roce; set it to false)");
  }

  std::string vendor = top.string("cpu_vendor");
  if (vendor == "intel") {
    c.cpu_vendor = CpuVendor::kIntel;
  } else if (vendor == "amd") {
    c.cpu_vendor = CpuVendor::kAmd;
  } else if (vendor == "arm") {
    c.cpu_vendor = CpuVendor::kArm;
  } else if (vendor == "other") {
    c.cpu_vendor = CpuVendor::kOther;
  } else {
    fail(origin, "cpu_vendor '" + vendor + "' is not known (use intel, amd, arm or other)");
  }

  if (top.has("rules")) {
    const json& rules = top.need("rules");
    if (!rules.is_array()) fail(origin, "rules must be an array of rule objects (got " + shown(rules) + ")");
    for (size_t i = 0; i < rules.size(); ++i) c.rules.push_back(parseRule(rules[i], i, origin));
  }
  if (top.has("calibration")) {
    const json& cal = top.need("calibration");
    if (!cal.is_array()) {
      fail(origin, "calibration must be an array of measurements (got " + shown(cal) +
                       "); `poolrun tuner calibrate` writes it");
    }
    for (size_t i = 0; i < cal.size(); ++i) c.calibration.push_back(parseMeasurement(cal[i], i, origin));
  }
  return c;
}

TunerConfig loadConfig(std::string_view pathOrJson) {
  std::string_view body = trim(pathOrJson);
  if (body.empty()) {
    throw ConfigError(
        "tuner config: POOLRUN_TUNER_CONFIG is empty (set it to a file path or to the JSON text)");
  }
  if (body.front() == '{') return parseConfig(body, "POOLRUN_TUNER_CONFIG");
  return configFromFile(std::string(body), false, nullptr);
}

std::vector<Rule> parseExampleCsv(std::string_view text, const std::string& origin) {
  std::vector<Rule> rules;
  size_t lineNo = 0;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    ++lineNo;
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<std::string_view> fields;
    for (size_t start = 0;;) {
      size_t comma = line.find(',', start);
      fields.push_back(trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    std::string where = origin + ":" + std::to_string(lineNo);
    if (fields.size() < 8 || fields.size() > 10) {
      throw ConfigError("tuner rules " + where + ": " + std::to_string(fields.size()) +
                        " fields, expected 8 to 10 "
                        "(collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"
                        "[,numPipeOps[,regBuff]])");
    }
    auto number = [&](size_t i, const char* name, long long lo) -> long long {
      std::string s(fields[i]);
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (s.empty() || used != s.size() || v < lo) {
        throw ConfigError("tuner rules " + where + ": " + name + " '" + s +
                          "' must be an integer >= " + std::to_string(lo));
      }
      return v;
    };
    Rule r;
    r.origin = where;
    if (fields[0] != "*" && fields[0] != "any") {
      r.coll = parseColl(fields[0]);
      if (!r.coll) {
        throw ConfigError("tuner rules " + where + ": collective '" + std::string(fields[0]) +
                          "' is not known (use " + kCollList + ")");
      }
    }
    r.min_bytes = static_cast<std::uint64_t>(number(1, "min_bytes", 0));
    r.max_bytes = static_cast<std::uint64_t>(number(2, "max_bytes", 0));
    r.algo = parseAlgo(fields[3]);
    if (!r.algo) {
      throw ConfigError(
          "tuner rules " + where + ": algorithm '" + std::string(fields[3]) +
          "' is not known (use tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree or pat)");
    }
    r.proto = parseProto(fields[4]);
    if (!r.proto) {
      throw ConfigError("tuner rules " + where + ": protocol '" + std::string(fields[4]) +
                        "' is not known (use ll, ll128 or simple)");
    }
    long long channels = number(5, "channels", -1);
    if (channels > 64) {
      throw ConfigError("tuner rules " + where + ": channels " + std::to_string(channels) +
                        " is above NCCL's 64 (use -1 to keep NCCL's count)");
    }
    r.channels = channels < 0 ? 0 : static_cast<int>(channels);
    r.nnodes = static_cast<int>(number(6, "nNodes", -1));
    r.nranks = static_cast<int>(number(7, "nRanks", -1));
    if (fields.size() > 8) r.pipe_ops = static_cast<int>(number(8, "numPipeOps", -1));
    if (fields.size() > 9) {
      r.reg_buff = static_cast<int>(number(9, "regBuff", -1));
      if (r.reg_buff > 1) {
        throw ConfigError("tuner rules " + where + ": regBuff " + std::to_string(r.reg_buff) +
                          " must be 0, 1 or -1");
      }
    }
    if (std::string problem = ruleProblem(r); !problem.empty()) {
      throw ConfigError("tuner rules " + where + ": " + problem);
    }
    rules.push_back(std::move(r));
  }
  return rules;
}

TunerConfig loadExampleCsvFile(const std::string& path) {
  return configFromFile(path, true, nullptr);
}

std::string readConfigFile(const std::string& path, const std::string& what, size_t limit) {
  return readFile(path, what, limit, nullptr);
}

struct ConfigCache::Entry {
  common::FileIdentity identity;  // of the file read; none for JSON text
  std::shared_ptr<const TunerConfig> config;
  std::string error;  // the ConfigError's message where the configuration failed
};

std::shared_ptr<const TunerConfig> ConfigCache::load(std::string_view pathOrJson) {
  return get(false, pathOrJson);
}

std::shared_ptr<const TunerConfig> ConfigCache::loadExampleCsv(const std::string& path) {
  return get(true, path);
}

size_t ConfigCache::parses() const {
  std::lock_guard lock(mutex_);
  return parses_;
}

std::shared_ptr<const TunerConfig> ConfigCache::get(bool csv, std::string_view value) {
  constexpr size_t kMaxEntries = 16;  // a process sees one or two; tests see more
  const std::string_view body = csv ? value : trim(value);
  const bool text = !csv && !body.empty() && body.front() == '{';
  std::lock_guard lock(mutex_);
  auto key = std::make_pair(csv, std::string(value));
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    struct stat st {};
    const bool unchanged = text || (::stat(std::string(body).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                                    common::identityOf(st) == it->second->identity);
    if (!unchanged) {
      entries_.erase(it);
      it = entries_.end();
    }
  }
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());
    auto entry = std::make_shared<Entry>();
    ++parses_;
    try {
      const std::string path(body);
      if (csv || !(text || body.empty())) {
        entry->config = std::make_shared<const TunerConfig>(configFromFile(path, csv, &entry->identity));
      } else {
        entry->config = std::make_shared<const TunerConfig>(loadConfig(body));
      }
    } catch (const ConfigError& e) {
      entry->error = e.what();
    }
    it = entries_.emplace(std::move(key), std::move(entry)).first;
  }
  if (!it->second->error.empty()) throw ConfigError(it->second->error);
  return it->second->config;
}

nlohmann::json measurementToJson(const Measurement& m) {
  json j = {{"coll", collName(m.coll)}, {"nranks", m.nranks}, {"nnodes", m.nnodes}};
  if (m.algo) j["algo"] = algoName(*m.algo);
  if (m.proto) j["proto"] = protoName(*m.proto);
  j["bytes"] = m.bytes;
  j["time_us"] = m.time_us;
  if (!m.source.empty()) j["source"] = m.source;
  if (m.gpus_per_process > 0) j["gpus_per_process"] = m.gpus_per_process;
  return j;
}

nlohmann::json ruleToJson(const Rule& r) {
  json j = json::object();
  if (r.coll) j["coll"] = collName(*r.coll);
  if (r.min_bytes != 0) j["min_bytes"] = r.min_bytes;
  if (r.max_bytes != std::numeric_limits<std::uint64_t>::max()) j["max_bytes"] = r.max_bytes;
  if (r.nnodes >= 0) j["nnodes"] = r.nnodes;
  if (r.nranks >= 0) j["nranks"] = r.nranks;
  if (r.pipe_ops >= 0) j["pipe_ops"] = r.pipe_ops;
  if (r.reg_buff >= 0) j["reg_buff"] = r.reg_buff;
  if (r.algo) j["algo"] = algoName(*r.algo);
  if (r.proto) j["proto"] = protoName(*r.proto);
  if (r.channels > 0) j["channels"] = r.channels;
  return j;
}

nlohmann::json toJson(const TunerConfig& c) {
  json j = {{"schema", kConfigSchema},
            {"fabric", fabricName(c.fabric)},
            {"nodes", c.nodes},
            {"gpus_per_node", c.gpus_per_node},
            {"gpu",
             {{"sm", c.gpu.sm},
              {"nvlink_gbyte_s", c.gpu.nvlink_gbyte_s},
              {"nvswitch", c.gpu.nvswitch},
              {"nvls", c.gpu.nvls},
              {"pcie_gbyte_s", c.gpu.pcie_gbyte_s}}},
            {"net",
             {{"nics_per_node", c.net.nics_per_node},
              {"nic_gbit_s", c.net.nic_gbit_s},
              {"gdr", c.net.gdr},
              {"sharp", c.net.sharp}}},
            {"cpu_vendor", cpuVendorName(c.cpu_vendor)}};
  if (!c.rules.empty()) {
    j["rules"] = json::array();
    for (const Rule& r : c.rules) j["rules"].push_back(ruleToJson(r));
  }
  if (!c.calibration.empty()) {
    j["calibration"] = json::array();
    for (const Measurement& m : c.calibration) j["calibration"].push_back(measurementToJson(m));
  }
  return j;
}

}  // namespace poolrun::tuner
