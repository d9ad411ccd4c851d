// The CUDA libraries are loaded at run time (no link-time CUDA dependency): the first of several
// names that dlopen finds, and a symbol into a typed function pointer.
#pragma once
#include <dlfcn.h>

#include <string>
#include <vector>

namespace cr::cuda {

// The first of `names` that loads (RTLD_LOCAL), else null; `tried` gets those that did not.
inline void* open_first(const std::vector<std::string>& names, std::string* tried = nullptr) {
  for (const std::string& n : names) {
    if (void* lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    if (tried) *tried += (tried->empty() ? "" : ", ") + n;
  }
  return nullptr;
}

// Resolves `name` (the versioned symbol where the ABI has one) into `fn`; false when missing.
template <class F> bool resolve(void* lib, const char* name, F*& fn) {
  fn = reinterpret_cast<F*>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace cr::cuda
