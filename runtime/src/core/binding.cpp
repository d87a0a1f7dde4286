#include "binding.hpp"

namespace poolrun::runtime::core {

void applyBinding(Binder& binder, const BindingRequest& request, BindingResult& result) {
  result = BindingResult();
  CpuMask machine = binder.machineCpus();
  CpuMask target = request.cpus & machine;
  unsigned planned = request.cpus.count() + request.beyond;
  if (target.count() != planned) {
    Line& p = result.problems.add();
    p.add("planned cores ");
    if (request.list.isSet()) {
      p.add(request.list);
    } else {
      request.cpus.addList(p);
    }
    p.add(" are not all usable here (this process may use ");
    machine.addList(p);
    p.add("); check the node's topology file or the container's cpuset");
  }
  if (target.empty()) {
    result.cpus = binder.boundCpus();
    Line& p = result.problems.add();
    p.add("no planned core is usable here: the rank runs on ");
    result.cpus.addList(p);
    p.add(" unbound");
  } else {
    Line why;
    if (!binder.bindCpus(target, why)) {
      Line& p = result.problems.add();
      p.add("binding to cores ");
      target.addList(p);
      p.add(" was refused: ").add(why.text());
    }
    result.cpus = binder.boundCpus();
    result.cpus_as_planned = target.count() == planned && result.cpus == request.cpus;
    if (!(result.cpus == target)) {
      Line& p = result.problems.add();
      p.add("asked for cores ");
      target.addList(p);
      p.add(", the kernel says ");
      result.cpus.addList(p);
      p.add(" (a cgroup, a container or another tool restricts the binding)");
    }
  }

  unsigned nodesHere = 0, index = 0;
  bool numaHere = false;
  NodeMask nodes;
  CpuMask cpus;
  for (; binder.numaNode(nodesHere, index, cpus); ++nodesHere) {
    if (request.numa >= 0 && index == static_cast<unsigned>(request.numa)) numaHere = true;
    if (cpus.intersects(result.cpus)) nodes.set(index);
  }
  if (nodesHere <= 1) {
    result.memory_as_planned = true;  // one memory node: nothing to choose
    return;
  }
  if (request.numa >= 0 && numaHere) {
    nodes = NodeMask();
    nodes.set(static_cast<unsigned>(request.numa));
  } else if (request.numa >= 0) {
    result.problems.add()
        .add("planned NUMA node ")
        .add(request.numa)
        .add(" does not exist here; memory goes to the nodes of the bound cores");
  }
  if (nodes.empty()) return;
  Line why;
  if (!binder.bindMemory(nodes, why)) {
    Line& p = result.problems.add();
    p.add("binding memory to NUMA node ");
    nodes.addList(p, "none");
    p.add(" was refused: ")
        .add(why.text())
        .add(" (in a container this needs CAP_SYS_NICE); memory is placed by first touch");
  }
  result.memory = binder.boundMemory();
  result.memory_as_planned = result.memory == nodes && (request.numa < 0 || numaHere);
  if (!(result.memory == nodes) && result.problems.count == 0) {
    Line& p = result.problems.add();
    p.add("asked to bind memory to NUMA node ");
    nodes.addList(p, "none");
    p.add(", the kernel says ");
    result.memory.addList(p, "none");
  }
}

bool bindingRequest(const Variables& env, const CpuMask& current, BindingRequest& request, BindMode& mode,
                    Line& error) {
  Text bind = env.get("POOLRUN_BIND");
  if (bind == "off") {
    mode = BindMode::kOff;
    return true;
  }
  if (!bind.empty() && !(bind == "on") && !(bind == "strict")) {
    error.add("POOLRUN_BIND=")
        .quoted(bind)
        .add(": use on (the default: warn when the binding did not take), strict (fail the rank) or off");
    return false;
  }
  mode = bind == "strict" ? BindMode::kStrict : BindMode::kOn;
  request = BindingRequest();
  Text cpus = env.get("POOLRUN_CPUSET");
  if (cpus.empty()) {
    request.cpus = current;
  } else if (request.list = cpus; !request.cpus.parseList(cpus, &request.beyond)) {
    error.add("POOLRUN_CPUSET=").quoted(cpus).add(" is not a cpulist like 0-3,8 (it is written by poolrun)");
    return false;
  }
  if (Text numa = env.get("POOLRUN_NUMA"); !numa.empty()) {
    long n = 0;
    if (!parseNumber(numa, (1L << 20) - 1, n)) {
      error.add("POOLRUN_NUMA=").quoted(numa).add(" is not a NUMA node index (it is written by poolrun)");
      return false;
    }
    request.numa = static_cast<int>(n);
  }
  return true;
}

}  // namespace poolrun::runtime::core
