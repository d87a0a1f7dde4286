#pragma once

// The embedded pools (embedded.cpp): no daemon, one SQLite file in the state directory.

#include <memory>
#include <string>

#include "poolrun/pool/control.hpp"

namespace poolrun::pool {

std::unique_ptr<PoolControl> openEmbeddedLocal(const ClientOptions& options);
std::unique_ptr<PoolControl> openEmbeddedSim(const std::string& file, const ClientOptions& options);

}  // namespace poolrun::pool
