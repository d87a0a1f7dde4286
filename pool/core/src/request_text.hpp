// What a request asks for, in words, for the messages of submit, the queue and the wait reason.
#pragma once

#include <string>

#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

// "8 GPUs", "7 MIG instances 1g.10gb", "2 MIG instances 3g.40gb or larger", "4 MPS shares of 25%
// and 10 GiB": what a request asks for.
inline std::string unitsText(const LeaseRequest& r) {
  if (r.shared())
    return std::to_string(r.gpus) + " MPS share" + (r.gpus == 1 ? "" : "s") + " of " +
           (r.share_percent > 0 ? std::to_string(r.share_percent) + "% of a GPU" : "a GPU") +
           (r.share_memory_bytes > 0 ? " and " + common::byteSizeText(r.share_memory_bytes) : "");
  if (!r.mig()) return std::to_string(r.gpus) + " GPUs";
  return std::to_string(r.gpus) + " MIG instance" + (r.gpus == 1 ? " " : "s ") + r.mig_profile +
         (r.mig_or_larger ? " or larger" : "");
}

// " as whole nodes", " as 8 per node", " under one leaf switch" or "": the shape a request asks for.
inline std::string shapeText(const LeaseRequest& r) {
  return r.whole_nodes         ? " as whole nodes"
         : r.gpus_per_node > 0 ? " as " + std::to_string(r.gpus_per_node) + " per node"
         : r.one_switch        ? " under one leaf switch"
                               : "";
}

}  // namespace poolrun::pool
