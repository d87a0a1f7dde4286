#pragma once

// Slurm hostlist syntax: "dgx[01-16]", "gpu[1-3,7],login1", "r[1-2]n[01-02]".

#include <string>
#include <string_view>
#include <vector>

namespace poolrun::topo {

// Expands a hostlist into host names, in order. Zero padding follows the range's first bound
// ("dgx[08-10]" gives dgx08 dgx09 dgx10). Throws poolrun::Error (kBadInput) naming the text on
// unbalanced brackets, reversed or non-numeric ranges, or more than `limit` hosts.
std::vector<std::string> expandHostlist(std::string_view text, size_t limit = 1'000'000);

// The shortest-form hostlist of `hosts` (order kept where it can be): "dgx[01-03,05]".
std::string compressHostlist(const std::vector<std::string>& hosts);

}  // namespace poolrun::topo
