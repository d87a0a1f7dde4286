#include "poolrun/runtime/binding.hpp"

#include <algorithm>

#include "core/binding.hpp"
#include "core/system.hpp"
#include "core_adapters.hpp"
#include "poolrun/topo/error.hpp"

namespace poolrun::runtime {
namespace {

topo::CpuSet cpuSet(const core::CpuMask& mask) {
  return topo::CpuSet(members(mask));
}

std::vector<int> nodeList(const core::NodeMask& mask) {
  std::vector<int> out;
  for (unsigned n : members(mask)) out.push_back(static_cast<int>(n));
  return out;
}

core::NodeMask nodeMask(const std::vector<int>& nodes) {
  core::NodeMask mask;
  for (int n : nodes) {
    if (n >= 0) mask.set(static_cast<unsigned>(n));
  }
  return mask;
}

// A Binder of the C++ interface (a test's fake machine) seen by the core: its refusals, thrown as
// poolrun::Error, become the core's reasons.
class CoreView final : public core::Binder {
 public:
  explicit CoreView(runtime::Binder& machine) : machine_(machine) {}

  core::CpuMask machineCpus() override { return coreMask<core::CpuMask::kSize>(machine_.machineCpus()); }
  bool numaNode(unsigned i, unsigned& index, core::CpuMask& cpus) override {
    if (!numa_) numa_ = machine_.numaNodes();
    if (i >= numa_->size()) return false;
    index = static_cast<unsigned>((*numa_)[i].first);
    cpus = coreMask<core::CpuMask::kSize>((*numa_)[i].second);
    return true;
  }
  bool bindCpus(const core::CpuMask& cpus, core::Line& why) override {
    return refusal([&] { machine_.bindCpus(cpuSet(cpus)); }, why);
  }
  core::CpuMask boundCpus() override { return coreMask<core::CpuMask::kSize>(machine_.boundCpus()); }
  bool bindMemory(const core::NodeMask& nodes, core::Line& why) override {
    return refusal([&] { machine_.bindMemory(nodeList(nodes)); }, why);
  }
  core::NodeMask boundMemory() override { return nodeMask(machine_.boundMemory()); }

 private:
  template <class F>
  static bool refusal(F&& bind, core::Line& why) {
    try {
      bind();
      return true;
    } catch (const Error& e) {
      why.add(e.what());
      return false;
    }
  }

  runtime::Binder& machine_;
  std::optional<std::vector<std::pair<int, topo::CpuSet>>> numa_;
};

// The kernel (core::SystemBinder) behind the C++ interface.
class SystemBinder final : public Binder {
 public:
  explicit SystemBinder(std::string root) : root_(std::move(root)), kernel_(coreText(root_)) {}

  topo::CpuSet machineCpus() override { return cpuSet(kernel_.machineCpus()); }
  std::vector<std::pair<int, topo::CpuSet>> numaNodes() override {
    std::vector<std::pair<int, topo::CpuSet>> out;
    unsigned index = 0;
    core::CpuMask cpus;
    for (unsigned i = 0; kernel_.numaNode(i, index, cpus); ++i)
      out.emplace_back(static_cast<int>(index), cpuSet(cpus));
    return out;
  }
  void bindCpus(const topo::CpuSet& cpus) override {
    core::Line why;
    if (!kernel_.bindCpus(coreMask<core::CpuMask::kSize>(cpus), why))
      throw Error(ErrorCode::kIo, why.c_str());
  }
  topo::CpuSet boundCpus() override { return cpuSet(kernel_.boundCpus()); }
  void bindMemory(const std::vector<int>& nodes) override {
    core::Line why;
    if (!kernel_.bindMemory(nodeMask(nodes), why)) throw Error(ErrorCode::kIo, why.c_str());
  }
  std::vector<int> boundMemory() override { return nodeList(kernel_.boundMemory()); }

 private:
  std::string root_;
  core::SystemBinder kernel_;
};

}  // namespace

std::unique_ptr<Binder> systemBinder(const std::string& root) {
  return std::make_unique<SystemBinder>(root);
}

BindingResult applyBinding(Binder& binder, const BindingRequest& request) {
  CoreView machine(binder);
  auto planned = std::make_unique<core::BindingRequest>();
  planned->cpus = coreMask<core::CpuMask::kSize>(request.cpus);
  planned->beyond = static_cast<unsigned>(request.cpus.size()) - planned->cpus.count();
  std::string list = request.cpus.toList();
  planned->list = coreText(list);
  planned->numa = request.numa;
  auto done = std::make_unique<core::BindingResult>();
  core::applyBinding(machine, *planned, *done);
  BindingResult result;
  result.cpus = cpuSet(done->cpus);
  result.memory = nodeList(done->memory);
  result.cpus_as_planned = done->cpus_as_planned;
  result.memory_as_planned = done->memory_as_planned;
  for (unsigned i = 0; i < done->problems.count; ++i)
    result.problems.push_back(done->problems.items[i].c_str());
  return result;
}

std::optional<BindingRequest> bindingRequest(const Environment& env, const topo::CpuSet& current) {
  core::BindingRequest request;
  core::BindMode mode = core::BindMode::kOn;
  core::Line error;
  if (!core::bindingRequest(EnvironmentVariables(env), coreMask<core::CpuMask::kSize>(current), request, mode,
                            error))
    throw badInput(error.c_str());
  if (mode == core::BindMode::kOff) return std::nullopt;
  BindingRequest out{cpuSet(request.cpus), request.numa};
  // Planned CPUs past what the kernel can have stay in the request, to be reported as not usable.
  if (request.beyond > 0) out.cpus = topo::CpuSet::parseList(hostedString(request.list));
  return out;
}

}  // namespace poolrun::runtime
