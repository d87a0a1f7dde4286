#pragma once

// poold's route tables, one a resource, in the order the dispatcher tries them.

#include <vector>

#include "route.hpp"

namespace poolrun::pool {

std::vector<RouteSpec>
statusRoutes();                        // status.cpp: /healthz, /v1/status, /v1/quotas, /v1/replicas, /metrics
std::vector<RouteSpec> nodeRoutes();   // nodes.cpp: /v1/nodes..., an administrator's node changes
std::vector<RouteSpec> agentRoutes();  // agents.cpp: a node agent's register and heartbeat
std::vector<RouteSpec> leaseRoutes();  // leases.cpp: /v1/leases...
std::vector<RouteSpec> queueRoutes();  // queue.cpp: /v1/queue...
std::vector<RouteSpec> eventRoutes();  // events.cpp: /v1/events
std::vector<RouteSpec> memberRoutes();       // members.cpp: join tokens, a node's join, revocation
std::vector<RouteSpec> jobRoutes();          // jobs.cpp: /v1/jobs..., a node's jobs
std::vector<RouteSpec> usageRoutes();        // usage.cpp: /v1/usage, /v1/fairshare
std::vector<RouteSpec> reservationRoutes();  // reservations.cpp: /v1/reservations...

}  // namespace poolrun::pool
