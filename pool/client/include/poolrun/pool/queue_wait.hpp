#pragma once

// What every pool client does while a request waits in its queue: notice a signal caught by a
// QueueInterruption, and pace what it tells its caller.

#include <chrono>
#include <optional>
#include <string>

#include "poolrun/pool/client.hpp"

namespace poolrun::pool {

// The signal a QueueInterruption in scope caught, 0 if none (async-signal-safe to set, cheap to read).
int pendingInterrupt();

// The error acquire throws once it acted on the pending signal; `did` says what it did
// ("withdrew the queued request (ticket 18)"). Marks the signal as acted on.
PoolError interrupted(const std::string& did);

// Tells when a waiting client reports: the first time, on every change (QueueProgress::sameAs),
// and every `every` otherwise.
class ProgressPacer {
 public:
  explicit ProgressPacer(std::chrono::seconds every = std::chrono::seconds(30)) : every_(every) {}
  bool due(const QueueProgress& progress, std::chrono::steady_clock::time_point now);

 private:
  std::chrono::seconds every_;
  std::optional<QueueProgress> last_;
  std::chrono::steady_clock::time_point last_at_;
};

}  // namespace poolrun::pool
