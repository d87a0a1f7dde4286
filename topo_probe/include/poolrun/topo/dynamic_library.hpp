#pragma once

// A vendor library opened with dlopen (NVML, libcuda), so that binaries start on machines without
// it. Closed when the object goes.

#include <dlfcn.h>

namespace poolrun::topo {

class DynamicLibrary {
 public:
  explicit DynamicLibrary(const char* soname) : handle_(dlopen(soname, RTLD_NOW | RTLD_LOCAL)) {}
  ~DynamicLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  explicit operator bool() const { return handle_ != nullptr; }

  // The function `name` with the signature `Fn`, or nullptr where the library lacks it.
  template <typename Fn>
  Fn* get(const char* name) const {
    return handle_ != nullptr ? reinterpret_cast<Fn*>(dlsym(handle_, name)) : nullptr;
  }

 private:
  void* handle_;
};

}  // namespace poolrun::topo
