#pragma once

// A rank's variables from the "poolrun.rank-env/1" document in POOLRUN_RANK_ENV (its format is in
// poolrun/runtime/rank_env.hpp), read without the C++ library: a JSON reader for what the document
// holds (objects, arrays, strings, integers, and any other JSON value skipped where it may appear).

#include "text.hpp"

namespace poolrun::runtime::core {

// Hands `sink` every variable of `rank`. String values are decoded into `scratch`, which needs
// `doc.size` bytes (decoding never lengthens a string). On a malformed document, or one without
// `rank`, returns false with the whole message in `error`.
bool rankVariables(Text doc, int rank, char* scratch, VariableSink& sink, Line& error);

}  // namespace poolrun::runtime::core
