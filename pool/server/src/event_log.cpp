#include "poolrun/pool/event_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "poolrun/common/error.hpp"
#include "poolrun/common/time_text.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr size_t kBlock = 64 * 1024;

// The seq of a line that is a whole event of this schema; nullopt for anything else.
std::optional<uint64_t> eventSeq(std::string_view line) {
  json doc = json::parse(line, nullptr, false);
  if (!doc.is_object()) return std::nullopt;
  auto schema = doc.find("schema");
  auto seq = doc.find("seq");
  if (schema == doc.end() || *schema != kEventSchema || seq == doc.end() || !seq->is_number_unsigned() ||
      seq->get<uint64_t>() == 0)
    return std::nullopt;
  return seq->get<uint64_t>();
}

std::string readAt(int fd, uint64_t offset, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

uint64_t fileSize(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// The lines of a file from an offset, read in blocks.
class LineReader {
 public:
  LineReader(int fd, uint64_t from, uint64_t end) : fd_(fd), pos_(from), end_(end) {}
  // The next line (without '\n') and where it starts; false at the end. A last line without its
  // '\n' (being written) is not returned.
  bool next(std::string& line, uint64_t& start) {
    for (;;) {
      size_t nl = buffer_.find('\n', scanned_);
      if (nl != std::string::npos) {
        start = pos_;
        line.assign(buffer_, 0, nl);
        buffer_.erase(0, nl + 1);
        pos_ += nl + 1;
        scanned_ = 0;
        return true;
      }
      scanned_ = buffer_.size();
      uint64_t at = pos_ + buffer_.size();
      if (at >= end_) return false;
      std::string more = readAt(fd_, at, static_cast<size_t>(std::min<uint64_t>(kBlock, end_ - at)));
      if (more.empty()) return false;
      buffer_ += more;
    }
  }
  // Moves to the start of the next line (past the next '\n'); false at the end.
  bool skipPartial() {
    std::string line;
    uint64_t start;
    return next(line, start);
  }

 private:
  int fd_;
  uint64_t pos_, end_;
  std::string buffer_;
  size_t scanned_ = 0;
};

// The line that ends at `end` (just past its '\n', or the end of the file for a last line without
// one): where it starts, and its text without the '\n'.
// A line longer than any event (one is a few hundred bytes) is not read: its text comes back empty.
std::pair<uint64_t, std::string> lineBefore(int fd, uint64_t end, bool endsWithNewline) {
  constexpr uint64_t kLongestEvent = uint64_t{1} << 20;
  const uint64_t textEnd = endsWithNewline ? end - 1 : end;
  uint64_t start = textEnd;  // found by reading back block by block, keeping nothing
  while (start > 0) {
    const uint64_t from = start > kBlock ? start - kBlock : 0;
    const std::string block = readAt(fd, from, static_cast<size_t>(start - from));
    const size_t nl = block.rfind('\n');
    if (nl != std::string::npos) {
      start = from + nl + 1;
      break;
    }
    start = from;
  }
  if (textEnd - start > kLongestEvent) return {start, ""};
  return {start, readAt(fd, start, static_cast<size_t>(textEnd - start))};
}

// The last whole event of a file: its seq and the end of its line; 0, 0 where there is none.
std::pair<uint64_t, uint64_t> lastEvent(int fd, uint64_t size, size_t* dropped) {
  uint64_t end = size;
  bool newline = size > 0 && readAt(fd, size - 1, 1) == "\n";
  while (end > 0) {
    auto [start, text] = lineBefore(fd, end, newline);
    if (std::optional<uint64_t> seq = eventSeq(text)) return {*seq, end};
    if (dropped != nullptr) ++*dropped;
    end = start;
    newline = true;
  }
  return {0, 0};
}

// The seq of the first whole event in a file; 0 where there is none.
uint64_t firstEvent(int fd, uint64_t size) {
  LineReader reader(fd, 0, size);
  std::string line;
  uint64_t start;
  while (reader.next(line, start))
    if (std::optional<uint64_t> seq = eventSeq(line)) return *seq;
  return 0;
}

// The offset of the first event whose seq is above `since` (lines are in seq order); `size` where
// there is none. A binary search over byte offsets, each probe reading from a line's start.
uint64_t firstAfter(int fd, uint64_t size, uint64_t since) {
  // The first event at or after `pos`: whether it is past `since`, and where its line starts.
  auto probe = [&](uint64_t pos) -> std::pair<bool, uint64_t> {
    LineReader reader(fd, pos == 0 ? 0 : pos - 1, size);
    if (pos > 0 && !reader.skipPartial()) return {true, size};
    std::string line;
    uint64_t start;
    while (reader.next(line, start))
      if (std::optional<uint64_t> seq = eventSeq(line)) return {*seq > since, start};
    return {true, size};
  };
  uint64_t lo = 0, hi = size;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (probe(mid).first)
      hi = mid;
    else
      lo = mid + 1;
  }
  return probe(lo).second;
}

int openLog(const std::filesystem::path& file) {
  int fd = open(file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0)
    throw Error(ErrorCode::kIo, file.string() + ": cannot open the event log (" + std::strerror(errno) +
                                    "); check that the state directory is writable");
  // A device or a pipe in its place (a link to /dev/zero, say) would read as no history and take
  // every new event into it.
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw Error(ErrorCode::kBadInput, file.string() +
                                          ": the event log is not a regular file (a device, a pipe or a "
                                          "socket, or a link to one); move it away and start poold again");
  }
  return fd;
}

bool writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::filesystem::path previousFile(const std::filesystem::path& file) {
  return file.string() + ".1";
}

}  // namespace

const char* leaseEventKind(LeaseEvent::Kind kind) {
  switch (kind) {
    case LeaseEvent::Kind::kGranted:
      return "grant";
    case LeaseEvent::Kind::kReleased:
      return "release";
    case LeaseEvent::Kind::kExpired:
      return "expiry";
    case LeaseEvent::Kind::kPreempted:
      return "preemption";
    case LeaseEvent::Kind::kGrown:
      return "growth";
    case LeaseEvent::Kind::kShrinking:
      return "shrink notice";
    case LeaseEvent::Kind::kShrunk:
      return "shrink";
  }
  return "lease";
}

ordered_json leaseEventFields(const LeaseEvent& e, TimePoint now) {
  const Lease& l = e.lease;
  ordered_json f;
  f["lease"] = l.id;
  f["owner"] = l.owner;
  if (!l.job_name.empty()) f["job"] = l.job_name;
  f["gpu_count"] = l.gpus.size();
  f["gpus"] = formatGpus(l.gpus);
  if (e.kind == LeaseEvent::Kind::kGranted) {
    f["ttl_s"] = l.ttl.count();
    f["priority"] = l.priority;
    return f;
  }
  if (e.kind == LeaseEvent::Kind::kPreempted) {  // the notice: the lease ends later
    f["priority"] = l.priority;
    if (l.preempt_at) f["deadline"] = common::rfc3339(*l.preempt_at);
    f["reason"] = e.reason;
    return f;
  }
  if (e.kind == LeaseEvent::Kind::kShrinking) {  // the notice: the GPUs go back later
    f["priority"] = l.priority;
    f["giving_back"] = formatGpus(l.shrink_gpus);
    if (l.shrink_at) f["deadline"] = common::rfc3339(*l.shrink_at);
    f["reason"] = e.reason;
    return f;
  }
  if (e.kind == LeaseEvent::Kind::kGrown || e.kind == LeaseEvent::Kind::kShrunk) {
    f["gpu_count_before"] = e.gpus_before;
    f["resizes"] = l.resizes;
    f["reason"] = e.reason;
    return f;
  }
  // As poold's metrics count it: whole milliseconds of each time.
  auto millis = [](TimePoint t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  int64_t heldMs = std::max<int64_t>(0, millis(now) - millis(l.created));
  f["held_s"] = static_cast<double>(heldMs) / 1000;
  f["gpu_seconds"] = static_cast<double>(heldMs) * static_cast<double>(l.gpus.size()) / 1000;
  std::string reason = e.reason;
  if (reason.empty() && e.kind == LeaseEvent::Kind::kExpired)
    reason = l.max_end && now >= *l.max_end
                 ? "reached its max_duration"
                 : "not renewed within its ttl of " + std::to_string(l.ttl.count()) + " s";
  if (!reason.empty()) f["reason"] = reason;
  return f;
}

EventLog::EventLog(EventLogOptions options, Warn warn) : opt_(std::move(options)), warn_(std::move(warn)) {
  fd_ = openLog(opt_.file);
  recover();
  writer_ = std::thread([this] { writerLoop(); });
}

EventLog::~EventLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    woken_ = true;
  }
  writer_cv_.notify_all();
  published_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (fd_ >= 0) close(fd_);
}

void EventLog::recover() {
  size_ = fileSize(fd_);
  size_t dropped = 0;
  auto [last, goodEnd] = lastEvent(fd_, size_, &dropped);
  if (goodEnd < size_) {
    const uint64_t cut = size_ - goodEnd;
    warn_(opt_.file.string() + ": its last " + std::to_string(cut) + " bytes (" + std::to_string(dropped) +
          (dropped == 1 ? " line" : " lines") + ") are not whole events (cut short by a crash?); dropped" +
          (last > 0 ? ", the log goes on after seq " + std::to_string(last) : ""));
    if (ftruncate(fd_, static_cast<off_t>(goodEnd)) != 0)
      throw Error(ErrorCode::kIo, opt_.file.string() + ": cannot cut its damaged end (" +
                                      std::strerror(errno) + "); check the state directory");
    size_ = goodEnd;
  }
  if (size_ > 0 && readAt(fd_, size_ - 1, 1) != "\n") {
    // A whole event whose '\n' was not written: complete the line.
    if (!writeAll(fd_, "\n")) throw Error(ErrorCode::kIo, opt_.file.string() + ": cannot write");
    ++size_;
  }
  file_first_ = firstEvent(fd_, size_);
  int old = open(previousFile(opt_.file).c_str(), O_RDONLY | O_CLOEXEC);
  if (old >= 0) {
    uint64_t oldSize = fileSize(old);
    old_first_ = firstEvent(old, oldSize);
    if (last == 0) last = lastEvent(old, oldSize, nullptr).first;
    close(old);
  }
  seq_ = published_ = written_ = last;
}

uint64_t EventLog::record(std::string_view kind, ordered_json fields, TimePoint time) {
  // The line is written around the seq: only that is taken under the log's lock.
  if (!fields.is_object()) fields = ordered_json::object();  // no fields (null)
  for (const char* key : {"schema", "seq", "time", "kind"}) fields.erase(key);
  const std::string rest =
      fields.empty() ? std::string("}")
                     : "," + fields.dump(-1, ' ', false, ordered_json::error_handler_t::replace).substr(1);
  const std::string head = std::string(R"({"schema":")") + kEventSchema + R"(","seq":)";
  const std::string tail = R"(,"time":")" + common::rfc3339(time) + R"(","kind":)" +
                           json(kind).dump(-1, ' ', false, json::error_handler_t::replace);
  std::lock_guard<std::mutex> lock(mu_);
  ++seq_;
  staged_.push_back({seq_, head + std::to_string(seq_) + tail + rest});
  return seq_;
}

uint64_t EventLog::lastRecorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

void EventLog::publish(uint64_t seq) {
  bool writeSoon = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seq <= published_) return;
    while (!staged_.empty() && staged_.front().seq <= seq) {
      memory_.push_back(std::move(staged_.front()));
      staged_.pop_front();
    }
    published_ = std::max(published_, std::min(seq, seq_));
    writeSoon = published_ - written_ >= opt_.memory_events / 2;
  }
  published_cv_.notify_all();
  if (writeSoon) writer_cv_.notify_one();
}

uint64_t EventLog::oldestLocked() const {
  if (uint64_t old = old_first_) return old;
  if (uint64_t first = file_first_) return first;
  return memory_.empty() ? 0 : memory_.front().seq;
}

EventLog::Page EventLog::read(uint64_t since, size_t limit, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (since == published_ && !woken_)
    if (published_cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  Page page;
  page.last = published_;
  page.oldest = oldestLocked();
  uint64_t next = since;  // the last seq in the page
  // Older events than memory holds come from the files; the writer may move more into them
  // meanwhile (it drops from memory only what it wrote), hence the rounds.
  for (int round = 0; next < page.last && page.events.size() < limit && round < 4; ++round) {
    if (!memory_.empty() && memory_.front().seq <= next + 1) {
      auto it = std::lower_bound(memory_.begin(), memory_.end(), next + 1,
                                 [](const Entry& e, uint64_t s) { return e.seq < s; });
      for (; it != memory_.end() && it->seq <= page.last && page.events.size() < limit; ++it) {
        page.events.push_back(json::parse(it->line));
        next = it->seq;
      }
      break;
    }
    lock.unlock();
    std::vector<json> older = readFiles(next, limit - page.events.size());
    lock.lock();
    if (older.empty()) {
      // Events lost between the files and memory (a write error): go on with memory.
      if (memory_.empty() || memory_.front().seq <= next + 1) break;
      next = memory_.front().seq - 1;
      continue;
    }
    for (json& e : older) {
      next = e["seq"].get<uint64_t>();
      page.events.push_back(std::move(e));
    }
  }
  return page;
}

std::vector<json> EventLog::readFiles(uint64_t since, size_t limit) {
  std::lock_guard<std::mutex> lock(file_mu_);
  std::vector<json> out;
  auto take = [&](int fd, uint64_t size) {
    LineReader reader(fd, firstAfter(fd, size, since), size);
    std::string line;
    uint64_t start;
    while (out.size() < limit && reader.next(line, start)) {
      std::optional<uint64_t> seq = eventSeq(line);
      const bool outOfOrder = seq && !out.empty() && *seq <= out.back()["seq"].get<uint64_t>();
      if ((!seq || outOfOrder) && warned_lines_.size() < 64 &&
          warned_lines_.insert((fd == fd_ ? "log@" : "previous@") + std::to_string(start)).second)
        warn_(opt_.file.string() + (fd == fd_ ? "" : ".1") + ": the line at byte " + std::to_string(start) +
              (seq ? " repeats or goes back to seq " + std::to_string(*seq) : " is not an event (damaged?)") +
              "; skipped (the events around it are read on)");
      if (!seq || *seq <= since || outOfOrder) continue;
      out.push_back(json::parse(line));
    }
  };
  if (uint64_t first = file_first_; first == 0 || since + 1 < first) {
    int old = open(previousFile(opt_.file).c_str(), O_RDONLY | O_CLOEXEC);
    if (old >= 0) {
      take(old, fileSize(old));
      close(old);
    }
  }
  if (out.size() < limit) take(fd_, size_);
  return out;
}

void EventLog::wakeAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  published_cv_.notify_all();
}

void EventLog::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = published_;
  flush_wanted_ = true;
  writer_cv_.notify_one();
  written_cv_.wait(lock, [&] { return written_ >= target || stopping_; });
}

void EventLog::writerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    writer_cv_.wait_for(lock, opt_.flush_interval, [this] {
      return stopping_ || flush_wanted_ || published_ - written_ >= opt_.memory_events / 2;
    });
    const bool stop = stopping_;
    flush_wanted_ = false;
    const uint64_t upTo = published_;
    std::vector<Entry> batch;
    if (upTo > written_) {
      auto it = std::lower_bound(memory_.begin(), memory_.end(), written_ + 1,
                                 [](const Entry& e, uint64_t s) { return e.seq < s; });
      batch.assign(it, memory_.end());
    }
    lock.unlock();
    if (!batch.empty()) {
      std::lock_guard<std::mutex> file(file_mu_);
      append(batch);
    }
    lock.lock();
    written_ = std::max(written_, upTo);
    while (memory_.size() > opt_.memory_events && memory_.front().seq <= written_) memory_.pop_front();
    written_cv_.notify_all();
    if (stop) return;
  }
}

void EventLog::append(const std::vector<Entry>& entries) {
  std::string buffer;
  uint64_t bufferFirst = 0;
  auto writeBuffer = [&] {
    if (buffer.empty()) return;
    if (writeAll(fd_, buffer)) {
      if (size_ == 0) file_first_ = bufferFirst;
      size_ += buffer.size();
      if (failing_) warn_(opt_.file.string() + ": writing events again");
      failing_ = false;
    } else {
      const int err = errno;
      if (ftruncate(fd_, static_cast<off_t>(size_)) != 0) size_ = fileSize(fd_);  // no torn line left
      if (!failing_)
        warn_(opt_.file.string() + ": cannot append events (" + std::strerror(err) +
              "); they are served from memory only until writing works again (free space on the disk?)");
      failing_ = true;
    }
    buffer.clear();
  };
  for (const Entry& e : entries) {
    const uint64_t grown = size_ + buffer.size() + e.line.size() + 1;
    if (grown > opt_.rotate_bytes && size_ + buffer.size() > 0) {
      writeBuffer();
      const std::filesystem::path old = previousFile(opt_.file);
      if (::rename(opt_.file.c_str(), old.c_str()) == 0) {
        int fresh = open(opt_.file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (fresh >= 0) {
          close(fd_);
          fd_ = fresh;
          old_first_ = file_first_.load();
          file_first_ = 0;
          size_ = fileSize(fd_);
        } else {
          warn_(opt_.file.string() + ": cannot create it again after its rotation (" + std::strerror(errno) +
                "); appending to " + old.string());
        }
      } else if (!failing_) {
        warn_(opt_.file.string() + ": cannot rename it to " + old.string() + " (" + std::strerror(errno) +
              "); it grows on");
      }
    }
    if (buffer.empty()) bufferFirst = e.seq;
    buffer += e.line;
    buffer += '\n';
  }
  writeBuffer();
}

}  // namespace poolrun::pool
