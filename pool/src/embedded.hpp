#pragma once

#include <memory>
#include <string>

#include "poolrun/pool/control.hpp"

namespace poolrun::pool {

std::unique_ptr<PoolControl> openEmbeddedLocal(const ClientOptions& options);
std::unique_ptr<PoolControl> openEmbeddedSim(const std::string& file, const ClientOptions& options);
std::unique_ptr<PoolControl> openHttp(const std::string& uri, const std::string& host, int port,
                                      const ClientOptions& options);

}  // namespace poolrun::pool
