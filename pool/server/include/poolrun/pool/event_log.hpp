#pragma once

// poold's event log: one JSON line per change an operator looks back at (a lease granted,
// released or expired, a node's state, a GPU failed) in STATE/events.jsonl, and the last of them
// in memory for GET /v1/events (docs/operations.md has the format).
//
// Every event has a `seq` one above the one before it, across restarts: at start the log reads
// its last good line (a line cut short by a crash is dropped, with a warning). Events are recorded
// inside the mutation that made the change, under the state's lock, so that their order is the
// state's; nothing of one is seen (in a reply, in the file) before publish() says its mutation is
// committed. A writer thread appends what is published every flush_interval, off the request
// path; the file is not fsynced (a crash of poold loses nothing written, a power loss the last
// second or so). Past rotate_bytes FILE becomes FILE.1 (the one before is removed).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

inline constexpr const char* kEventSchema = "poolrun.event/1";

struct EventLogOptions {
  std::filesystem::path file;                     // STATE/events.jsonl; FILE.1 is the one before
  uint64_t rotate_bytes = uint64_t{64} << 20;     // FILE becomes FILE.1 before it grows past this
  size_t memory_events = 10000;                   // the last events kept in memory
  std::chrono::milliseconds flush_interval{250};  // how often the writer appends
};

class EventLog {
 public:
  using Warn = std::function<void(const std::string&)>;

  // Events after a seq, as GET /v1/events returns them.
  struct Page {
    std::vector<nlohmann::json> events;  // in seq order, each as its line in the file
    uint64_t last = 0;                   // the last published event's seq (0: none yet)
    uint64_t oldest = 0;                 // the oldest event kept, in memory or a file (0: none)
  };

  // Opens (creates) the file, drops a damaged tail, takes the last seq and starts the writer.
  // Throws poolrun::Error (kIo) when the file cannot be opened.
  EventLog(EventLogOptions options, Warn warn);
  ~EventLog();  // writes what is published, then stops the writer
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Records one event and returns its seq: {"schema","seq","time","kind", ...fields}. `fields` is
  // an object (lease, owner, gpus, node, index, reason, ...). Call inside the mutation that made
  // the change; it is seen once publish() reaches its seq.
  uint64_t record(std::string_view kind, nlohmann::ordered_json fields, TimePoint time);
  uint64_t lastRecorded() const;
  // Every event up to `seq` is committed: readers see it, the writer appends it.
  void publish(uint64_t seq);

  // At most `limit` events after `since`, from memory or, for older ones, the files. Where none
  // is published after `since` yet, waits for one until `deadline` (or wakeAll()); where `since`
  // is past the last event (a log started again), answers at once.
  Page read(uint64_t since, size_t limit, std::chrono::steady_clock::time_point deadline);
  void wakeAll();  // ends every read() now, and later ones at once (poold is stopping)
  void flush();    // returns once what is published now is in the file

 private:
  struct Entry {
    uint64_t seq;
    std::string line;  // without its '\n'
  };
  void recover();
  void writerLoop();
  void append(const std::vector<Entry>& entries);  // under file_mu_
  std::vector<nlohmann::json> readFiles(uint64_t since, size_t limit);
  uint64_t oldestLocked() const;

  EventLogOptions opt_;
  Warn warn_;

  mutable std::mutex mu_;
  std::condition_variable published_cv_;  // readers wait here
  std::condition_variable writer_cv_;
  std::condition_variable written_cv_;  // flush() waits here
  uint64_t seq_ = 0;                    // the last recorded
  uint64_t published_ = 0;
  uint64_t written_ = 0;      // the last handed to the file (or lost to a write error)
  std::deque<Entry> staged_;  // recorded, not yet published
  std::deque<Entry> memory_;  // published: the last memory_events, and all not yet written
  bool woken_ = false;
  bool stopping_ = false;
  bool flush_wanted_ = false;

  std::mutex file_mu_;                  // the file, its size and rotation; never taken under mu_
  std::set<std::string> warned_lines_;  // under file_mu_: "log@OFFSET" of damaged lines said once
  int fd_ = -1;
  uint64_t size_ = 0;
  bool failing_ = false;
  std::atomic<uint64_t> file_first_{0};  // the first seq in FILE (0: empty)
  std::atomic<uint64_t> old_first_{0};   // the first seq in FILE.1 (0: none)

  std::thread writer_;
};

// "grant", "release", "expiry".
const char* leaseEventKind(LeaseEvent::Kind kind);

// A lease event's fields: lease, owner, job, gpu_count, gpus, and ttl_s and priority for a grant;
// held_s, gpu_seconds and reason for a lease that ended at `now`.
nlohmann::ordered_json leaseEventFields(const LeaseEvent& event, TimePoint now);

}  // namespace poolrun::pool
