#pragma once

// The dashboard as poold serves it: its routes and its history's sampling, added to a server's
// options by whoever builds the server (poold's main, the tests), so that the server knows nothing
// of the dashboard (pool/CMakeLists.txt: server <- dashboard).

#include "poolrun/pool/server.hpp"

namespace poolrun::pool {

// Adds to `options`: GET / and /ui/NAME (the page's files, built in; no token), GET /v1/dashboard
// (every GPU in columns, one snapshot shared by the requests of half a second) and GET /v1/history
// (the last options.history_samples samples of the pool's use, one taken every
// options.history_interval by the server's ticker).
void addDashboard(ServerOptions& options);

}  // namespace poolrun::pool
