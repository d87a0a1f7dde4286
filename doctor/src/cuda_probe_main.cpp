// poolrun-cuda-probe MIG-UUID...: whether CUDA opens each MIG device given, as a job's process
// does: CUDA enumerates one MIG device per process, the one CUDA_VISIBLE_DEVICES names, so each is
// asked in a child process of its own (this program has one thread: fork is safe here). The
// doctor runs it for the MIG devices NVML lists (doctor/src/gpu.cpp). One line per device:
//   MIG-...: ok
//   MIG-...: <what CUDA said>
// "no CUDA driver: ..." alone where libcuda.so.1 cannot be loaded. Exit status 0 where it could
// ask, 3 without the driver, 2 for a bad command line.

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

using Result = int;
using Init = Result(unsigned);
using GetCount = Result(int*);
using Get = Result(int*, int);
using GetUuid = Result(unsigned char*, int);
using ErrorName = Result(Result, const char**);

constexpr int kNoDriver = 3;
constexpr auto kLimit = std::chrono::seconds(30);  // a driver that hangs: the device is not usable

// "MIG-7f3c2a10-0000-4000-8000-000000000001": its 16 bytes, where written so (the older
// "MIG-GPU-<uuid>/GI/CI" form has none to compare).
bool uuidBytes(const char* text, unsigned char out[16]) {
  const char* dash = std::strchr(text, '-');
  if (dash == nullptr) return false;
  int n = 0;
  for (const char* p = dash + 1; *p != '\0'; ++p) {
    if (*p == '-') continue;
    const char c = *p;
    const int v = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (v < 0 || n >= 32) return false;
    out[n / 2] = static_cast<unsigned char>(n % 2 == 0 ? v << 4 : out[n / 2] | v);
    ++n;
  }
  return n == 32;
}

// In the child: asks CUDA, prints the line, returns the exit status.
int ask(const char* uuid) {
  setenv("CUDA_VISIBLE_DEVICES", uuid, 1);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    std::printf("no CUDA driver: %s\n", dlerror());
    return kNoDriver;
  }
  auto init = reinterpret_cast<Init*>(dlsym(cuda, "cuInit"));
  auto count = reinterpret_cast<GetCount*>(dlsym(cuda, "cuDeviceGetCount"));
  auto get = reinterpret_cast<Get*>(dlsym(cuda, "cuDeviceGet"));
  auto getUuid = reinterpret_cast<GetUuid*>(dlsym(cuda, "cuDeviceGetUuid_v2"));
  if (getUuid == nullptr) getUuid = reinterpret_cast<GetUuid*>(dlsym(cuda, "cuDeviceGetUuid"));
  auto errorName = reinterpret_cast<ErrorName*>(dlsym(cuda, "cuGetErrorName"));
  if (init == nullptr || count == nullptr || get == nullptr) {
    std::printf("no CUDA driver: libcuda.so.1 lacks cuInit, cuDeviceGetCount or cuDeviceGet\n");
    return kNoDriver;
  }
  auto name = [&](Result r) {
    const char* text = nullptr;
    return errorName != nullptr && errorName(r, &text) == 0 && text != nullptr ? std::string(text)
                                                                               : "error " + std::to_string(r);
  };
  if (Result r = init(0); r != 0) {
    std::printf("%s: cuInit failed with %s with CUDA_VISIBLE_DEVICES set to it\n", uuid, name(r).c_str());
    return 0;
  }
  int n = 0;
  if (Result r = count(&n); r != 0 || n != 1) {
    std::printf("%s: CUDA enumerates %d devices with CUDA_VISIBLE_DEVICES set to it (%s)\n", uuid, n,
                r != 0 ? name(r).c_str() : "one expected");
    return 0;
  }
  unsigned char want[16], got[16];
  int device = 0;
  if (getUuid != nullptr && uuidBytes(uuid, want) && get(&device, 0) == 0 && getUuid(got, device) == 0 &&
      std::memcmp(want, got, 16) != 0) {
    std::printf("%s: CUDA's device is another one\n", uuid);
    return 0;
  }
  std::printf("%s: ok\n", uuid);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: poolrun-cuda-probe MIG-UUID... (run by poolrun doctor)\n");
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      const int status = ask(argv[i]);
      std::fflush(stdout);
      _exit(status);
    }
    if (pid < 0) {
      std::printf("%s: cannot ask CUDA: fork failed: %s\n", argv[i], std::strerror(errno));
      continue;
    }
    const auto end = std::chrono::steady_clock::now() + kLimit;
    int raw = 0;
    while (waitpid(pid, &raw, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= end) {
        kill(pid, SIGKILL);
        waitpid(pid, &raw, 0);
        std::printf("%s: CUDA did not answer within %lld s\n", argv[i],
                    static_cast<long long>(kLimit.count()));
        raw = 0;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (WIFEXITED(raw) && WEXITSTATUS(raw) == kNoDriver) return kNoDriver;
    if (WIFSIGNALED(raw)) std::printf("%s: asking CUDA ended with signal %d\n", argv[i], WTERMSIG(raw));
  }
  return 0;
}
