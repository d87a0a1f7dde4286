#pragma once

// A node that joins (docs/agent.md, "Joining a pool"): poold-agent --join TOKEN exchanges a one-time
// join token for a credential the node makes itself, once, and keeps that credential as its token.

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>

#include "poolrun/agent/agent.hpp"

namespace poolrun::agent {

// Sends the join with the node's credential: true for a new join, false for one poold had already
// (pool::joinPool). Throws as joinPool: kIo where poold cannot be reached, else a refusal.
using JoinCall = std::function<bool(const std::string& credential)>;

// Where `tokenFile` does not exist yet: makes the node's credential, keeps it in TOKEN_FILE.joining
// (mode 0600, written and synced before it is sent), joins with it, and once poold took it renames
// it to `tokenFile`. A TOKEN_FILE.joining left by an attempt cut off half-way is sent again (poold
// answers the same join as done). Retries every few seconds while poold cannot be reached, until
// `stop` (then false). Throws poolrun::Error: poold's refusal as it is, and kBadInput or kIo for a
// folder or file that cannot be written.
bool joinIfNeeded(const std::filesystem::path& tokenFile, const JoinCall& join, StopSignal& stop,
                  std::ostream& log);

}  // namespace poolrun::agent
