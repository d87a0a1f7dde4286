#pragma once

// A lease request's fields from the text of an option (poolrun's, poolctl acquire's), each with one
// wording of its errors: kBadInput naming the option and the text.

#include <string>
#include <string_view>

#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

// Sets request.mig_profile (and mig_or_larger, for a trailing '+') from an option's text: a MIG
// profile as nvidia-smi names it, "1g.10gb", "3g.40gb+", "1g.20gb+me". Throws kBadInput naming
// `option` and the text where it is empty, over 64 bytes, or has characters no profile has.
void setMigProfile(LeaseRequest& request, std::string_view text, const std::string& option);
// Sets request.share_percent from an option's text (poolrun --share): a fraction of a GPU, "0.25",
// or a percentage, "25%", from 1% to the whole GPU. Throws kBadInput naming `option` and the text.
void setSharePercent(LeaseRequest& request, std::string_view text, const std::string& option);
// Sets request.share_memory_bytes from an option's text (poolrun --gpu-memory): bytes, or a whole
// number with a binary unit: "512M", "10G", "10GiB", "1T" (at most 1 PiB). Throws kBadInput.
void setShareMemory(LeaseRequest& request, std::string_view text, const std::string& option);

// The placement options poolctl acquire and poolrun share, with one wording of their errors
// (kBadInput naming `option` and the text): --model TEXT (a substring of the GPU model, text as
// the name rules take it), --min-memory-gib G (whole GiB, at most kMinMemoryBytesRange), --label
// KEY=VALUE (repeatable; a key given twice takes the last).
// Sets request.account (--account A, docs/fairshare.md): an account's name as accounts files take it.
void setAccount(LeaseRequest& request, std::string_view text, const std::string& option);
// Sets request.reservation (--reservation NAME, docs/reservations.md).
void setReservation(LeaseRequest& request, std::string_view text, const std::string& option);
// --placement strict|best-effort (docs/placement.md).
void setPlacement(LeaseRequest& request, std::string_view text, const std::string& option);
void setGpuModel(LeaseRequest& request, std::string_view text, const std::string& option);
void setMinMemoryGib(LeaseRequest& request, std::string_view text, const std::string& option);
void addLabel(LeaseRequest& request, std::string_view text, const std::string& option);
// --exclude NODES: a hostlist ("n01,n[05-08]"), each a node name; added to those excluded already.
void addExcludedNodes(LeaseRequest& request, std::string_view text, const std::string& option);

}  // namespace poolrun::pool
