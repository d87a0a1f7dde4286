// `poolctl top` in a terminal (poolctl_top.hpp): the loop that reads the pool every interval and
// draws its frame in place, and gives the terminal back on every way out.

#include "poolrun/pool/poolctl_top.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>

#include "poolrun/common/error.hpp"
#include "poolrun/common/options.hpp"
#include "view_text.hpp"

namespace poolrun::pool {

namespace {

using namespace view;

// A positive number from the environment ($COLUMNS, $LINES), else 0.
int fromEnvironment(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  try {
    return common::parseOption<int>(name, v, 1, 10000);
  } catch (const Error&) {
    return 0;
  }
}

// The terminal's size (TIOCGWINSZ on stdout), else $COLUMNS x $LINES, else 80x24.
std::pair<int, int> screenSize() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
    return {ws.ws_col, ws.ws_row};
  int cols = fromEnvironment("COLUMNS"), rows = fromEnvironment("LINES");
  return {cols > 0 ? cols : 80, rows > 0 ? rows : 24};
}

TopSnapshot readSnapshot(PoolControl& pool) {
  TopSnapshot s;
  s.status = pool.status();
  s.nodes = pool.nodes();
  s.leases = pool.leases();
  s.queue = pool.queue();
  return s;
}

void writeAll(const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(STDOUT_FILENO, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone: nothing to draw on
    done += static_cast<size_t>(n);
  }
}

// The signals top acts on, noted by the handler and written to a pipe that wakes the loop.
int g_wake[2] = {-1, -1};
volatile sig_atomic_t g_quit = 0, g_resized = 0, g_suspend = 0, g_resumed = 0;

void onSignal(int sig) {
  int saved = errno;
  if (sig == SIGWINCH)
    g_resized = 1;
  else if (sig == SIGTSTP)
    g_suspend = 1;
  else if (sig == SIGCONT)
    g_resumed = 1;
  else
    g_quit = 1;
  char c = 's';
  [[maybe_unused]] ssize_t n = ::write(g_wake[1], &c, 1);
  errno = saved;
}

// The handlers while top runs; the previous ones come back when it goes. A signal the process was
// started ignoring (nohup) stays ignored.
class TopSignals {
 public:
  TopSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      sigaction(kSignals[i], nullptr, &previous_[i]);
      if (previous_[i].sa_handler == SIG_IGN && kSignals[i] != SIGWINCH && kSignals[i] != SIGCONT) continue;
      struct sigaction sa {};
      sa.sa_handler = onSignal;
      sigemptyset(&sa.sa_mask);
      sigaction(kSignals[i], &sa, nullptr);  // no SA_RESTART: poll() returns at once
    }
  }
  ~TopSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  }
  TopSignals(const TopSignals&) = delete;
  TopSignals& operator=(const TopSignals&) = delete;

  // Ctrl-Z: stops the process as SIGTSTP would have (the caller restored the terminal first).
  static void stopHere() {
    struct sigaction dfl {
    }, ours{};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGTSTP, &dfl, &ours);
    raise(SIGTSTP);  // returns once the job is continued
    sigaction(SIGTSTP, &ours, nullptr);
  }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP, SIGCONT};
  struct sigaction previous_[std::size(kSignals)]{};
};

// The terminal while top draws: stdin without echo or line editing (keys come one at a time; ^C
// still sends SIGINT), the alternate screen, the cursor hidden. Left as it was found by leave() and
// the destructor, whichever way top ends.
class TopTerminal {
 public:
  TopTerminal() : stdin_tty_(isatty(STDIN_FILENO) == 1) {
    if (stdin_tty_ && tcgetattr(STDIN_FILENO, &saved_) != 0) stdin_tty_ = false;
    enter();
  }
  ~TopTerminal() { leave(); }
  TopTerminal(const TopTerminal&) = delete;
  TopTerminal& operator=(const TopTerminal&) = delete;

  void enter() {
    if (entered_) return;
    if (stdin_tty_) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    writeAll("\x1b[?1049h\x1b[?25l");
    entered_ = true;
  }
  void leave() {
    if (!entered_) return;
    writeAll("\x1b[?25h\x1b[?1049l");
    if (stdin_tty_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    entered_ = false;
  }
  bool keys() const { return stdin_tty_; }

 private:
  bool stdin_tty_;
  termios saved_{};
  bool entered_ = false;
};

// Draws `lines` from the top left. `full`: clears the screen first (the first frame, a resize);
// otherwise each line is cleared to its end, and what is below the frame.
void draw(const std::vector<std::string>& lines, int width, int height, bool full) {
  std::string out = full ? "\x1b[H\x1b[2J" : "\x1b[H";
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\r\n";
    out += lines[i];
    // A line of the full width leaves the cursor on its last character, which \x1b[K would clear.
    if (shownWidth(lines[i]) < static_cast<size_t>(width)) out += "\x1b[K";
  }
  if (lines.size() < static_cast<size_t>(height)) out += "\r\n\x1b[J";
  writeAll(out);
}

// What the reader thread hands the drawing loop.
struct Refresh {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool reading = false;
  bool fresh = false;
  std::optional<TopSnapshot> snapshot;
  Clock::time_point read_at;
  std::string error;
};

void readLoop(PoolControl& pool, Refresh& r, seconds interval) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the signals are the drawing thread's
  std::unique_lock<std::mutex> lock(r.mu);
  while (!r.stop) {
    r.reading = true;
    lock.unlock();
    std::optional<TopSnapshot> snapshot;
    std::string error;
    try {
      snapshot = readSnapshot(pool);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    r.reading = false;
    if (snapshot) {
      r.snapshot = std::move(snapshot);
      r.read_at = Clock::now();
    }
    r.error = error;
    r.fresh = true;
    char c = 'd';
    [[maybe_unused]] ssize_t n = ::write(g_wake[1], &c, 1);
    r.cv.wait_for(lock, interval, [&] { return r.stop; });
  }
}

int liveTop(const TopOptions& options, PoolControl& pool) {
  if (pipe(g_wake) != 0)
    throw Error(ErrorCode::kIo, "poolctl top: cannot make a pipe: " + std::string(strerror(errno)));
  for (int fd : g_wake) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  g_quit = 0;
  g_resized = 0;
  g_suspend = 0;
  g_resumed = 0;
  Refresh refresh;
  TopView view;
  view.pool = pool.describe();
  view.interval = options.interval;
  view.interactive = true;
  bool abandoned = false;
  {
    TopSignals signals;
    TopTerminal terminal;
    std::thread reader(readLoop, std::ref(pool), std::ref(refresh), options.interval);
    bool full = true;
    while (g_quit == 0) {
      {
        std::lock_guard<std::mutex> lock(refresh.mu);
        if (refresh.fresh) {
          view.snapshot = refresh.snapshot;
          view.read_at = refresh.read_at;
          view.error = refresh.error;
          refresh.fresh = false;
        }
      }
      auto [width, height] = screenSize();
      draw(renderTopFrame(view, Clock::now(), width, height), width, height, full);
      full = false;
      // Until the reader has news, a key, or a signal; the clock in the header moves each second.
      pollfd fds[2] = {{g_wake[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      int ready = poll(fds, terminal.keys() ? 2 : 1, 1000);
      if (ready > 0 && (fds[0].revents & POLLIN)) {
        char buf[64];
        while (::read(g_wake[0], buf, sizeof buf) > 0) {
        }
      }
      if (ready > 0 && terminal.keys() && (fds[1].revents & (POLLIN | POLLHUP))) {
        char buf[64];
        ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0 && (fds[1].revents & POLLHUP)) break;  // the terminal hung up
        for (ssize_t i = 0; i < n; ++i)
          if (buf[i] == 'q' || buf[i] == 'Q') g_quit = 1;
      }
      if (g_suspend != 0) {
        g_suspend = 0;
        terminal.leave();
        TopSignals::stopHere();
        terminal.enter();
        full = true;
      }
      if (g_resized != 0 || g_resumed != 0) {
        g_resized = 0;
        g_resumed = 0;
        full = true;
      }
    }
    {
      std::lock_guard<std::mutex> lock(refresh.mu);
      refresh.stop = true;
    }
    refresh.cv.notify_all();
    // A read in progress from a poold that does not answer may take its whole timeout: the
    // terminal is restored now and the process ends without waiting for it.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    for (;;) {
      std::lock_guard<std::mutex> lock(refresh.mu);
      if (!refresh.reading || std::chrono::steady_clock::now() >= deadline) {
        abandoned = refresh.reading;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (abandoned)
      reader.detach();
    else
      reader.join();
  }
  if (abandoned) {
    std::cout.flush();
    std::_Exit(0);
  }
  for (int& fd : g_wake) {
    close(fd);
    fd = -1;
  }
  return 0;
}

}  // namespace

int topCommand(const TopOptions& options, PoolControl& pool) {
  if (!options.once && isatty(STDOUT_FILENO) == 1) return liveTop(options, pool);
  TopView view;
  view.pool = pool.describe();
  view.interval = options.interval;
  try {
    view.snapshot = readSnapshot(pool);
    view.read_at = Clock::now();
  } catch (const std::exception& e) {
    view.error = e.what();
  }
  auto [width, height] = screenSize();
  for (const std::string& line : renderTopFrame(view, Clock::now(), width, height)) std::cout << line << "\n";
  std::cout << std::flush;
  if (view.error.empty()) return 0;
  std::cerr << "poolctl: error: " << view.error << "\n";
  return 1;
}

}  // namespace poolrun::pool
