#include "vm/lua/lua_vm.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

#include "jit/jit.hpp"
#include "vm/cuda/cudnn.hpp"
#include "vm/lua/api.hpp"
#include "vm/lua/layers.hpp"
#include "vm/lua/stdlib.hpp"
#include "vm/lua/traceback.hpp"

#include "vm/cpu_march.hpp"
#include "vm/env.hpp"
#include "vm/tensor.hpp"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

namespace cr {

const char* embedded(const char* name) { return find_embedded(kEmbedded, kEmbeddedCount, name); }

namespace {

// vm/abi.h then vm/lua/ffi_api.h, without preprocessor lines and without the C++-only blocks,
// for ffi.cdef.
const std::string& cdef_text() {
  static const std::string text = [] {
    std::string out;
    for (const char* file : {"abi.h", "ffi_api.h"}) {
      std::istringstream in(embedded(file));
      std::string line;
      bool skip = false;
      while (std::getline(in, line)) {
        if (line.rfind("#ifdef __cplusplus", 0) == 0) skip = true;
        else if (line.rfind("#endif", 0) == 0) skip = false;
        else if (!skip && line.rfind("#", 0) != 0) out += line + "\n";
      }
    }
    return out;
  }();
  return text;
}

// Tensor handles are full userdata holding a cr_handle (stdlib/core.lua). LuaJIT finalises a
// userdata by walking its list of them at each collection; a cdata with a finaliser costs two
// hash operations in the FFI's finaliser table (one when made, one when finalised) and lives a
// collection longer (3x the cost per short-lived handle: bench/RESULTS.md H35).
// Userdata can only be made through the C API, so the stdlib takes them from a pool that this
// function refills, n at a time: new_handles(pool, n, mt) sets pool[1..n] to fresh handles
// (p = NULL) with the metatable mt. A call from a compiled trace costs a stitch, once per n.
int new_handles(lua_State* L) {
  int n = int(luaL_checkinteger(L, 2));
  for (int i = 1; i <= n; ++i) {
    auto* h = static_cast<cr_handle*>(lua_newuserdata(L, sizeof(cr_handle)));
    h->p = nullptr;
    lua_pushvalue(L, 3);
    lua_setmetatable(L, -2);
    lua_rawseti(L, 1, i);
  }
  return 0;
}

// The tensor handle's finaliser (the metatable's __gc). A lua_CFunction, not an FFI function
// pointer: the collector calls it directly, where a cdata function pointer goes through the FFI's
// generic call path (several hundred instructions per handle), and a collection never re-enters
// Lua (which would abort a JIT trace recording at that moment). Handles still in the pool hold no
// tensor.
int release_handle(lua_State* L) {
  auto* h = static_cast<cr_handle*>(lua_touserdata(L, 1));
  if (h && h->p) {
    tensor_release(h->p);
    h->p = nullptr;
  }
  return 0;
}

// package.preload loader: compiles the embedded module named by upvalue 1. The core module
// also receives the FFI declarations, the api table and this VM's context.
int load_embedded(lua_State* L) {
  const char* name = lua_tostring(L, lua_upvalueindex(1));
  const char* src = embedded(name);
  std::string chunk = std::string("=[crescent] ") + name;
  if (luaL_loadbuffer(L, src, std::strlen(src), chunk.c_str()) != 0) return lua_error(L);
  if (std::strcmp(name, "crescent.core") == 0) {
    lua_pushlstring(L, cdef_text().data(), cdef_text().size());
    lua_pushlightuserdata(L, const_cast<cr_api*>(api_table()));
    lua_pushlightuserdata(L, lua_touserdata(L, lua_upvalueindex(2)));
    lua_pushcfunction(L, release_handle);
    lua_pushcfunction(L, new_handles);
    lua_call(L, 5, 1);
  } else {
    lua_pushstring(L, name);
    lua_call(L, 1, 1);
  }
  return 1;
}

}  // namespace

static void check_cpu() {
#if defined(__x86_64__) && defined(__AVX2__)
  if (!cpu_has_avx2_fma())
    throw std::runtime_error(std::string("crescent: this build needs a CPU with AVX2 and FMA (-march=") + CRESCENT_MARCH +
                             "); rebuild with -DCRESCENT_MARCH=x86-64");
#endif
}

// CRESCENT_LOGS, the numbers of the environment and CRESCENT_CUDNN_API checked before the state
// exists (Context parses the logs again), so that a wrong value fails the VM's creation, leaving
// nothing behind.
static void check_env() {
  if (const char* list = env_setting(Setting::Logs)) Logs().parse(list);
  check_environment();
  cuda::cudnn_api_setting();
}

LuaVM::LuaVM(bool ignore_env) : L_((check_cpu(), check_env(), install_hooks(), luaL_newstate())) {
  if (!L_) throw std::runtime_error("crescent: cannot create a Lua state (out of memory)");
  if (ignore_env) {  // read by luaopen_package (luajit.c's FLAGS_NOENV)
    lua_pushboolean(L_, 1);
    lua_setfield(L_, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  luaL_openlibs(L_);
  // Collect when the heap has grown by half (Lua's default waits for it to double). Tensor
  // handles are tiny on the Lua heap but each holds a C++ tensor: fewer dead handles waiting
  // means memory reused sooner (it was ~15 % less time per small op, eager and compiled, when
  // handles were cdata with entries in the FFI's finaliser table).
  // Scripts may still call collectgarbage("setpause", n).
  lua_gc(L_, LUA_GCSETPAUSE, 150);
  lua_getglobal(L_, "package");
  lua_getfield(L_, -1, "preload");
  for (int i = 0; i < kEmbeddedCount; ++i) {
    if (std::string_view(kEmbedded[i].name).ends_with(".h")) continue;  // (the FFI declarations)
    lua_pushstring(L_, kEmbedded[i].name);
    lua_pushlightuserdata(L_, &ctx_.ffi);
    lua_pushcclosure(L_, load_embedded, 2);
    lua_setfield(L_, -2, kEmbedded[i].name);
  }
  lua_pop(L_, 2);
  // the executable and embedding hosts see the module as the global `crescent`
  if (!run_string("crescent = require 'crescent'", "=[crescent] init"))
    throw std::runtime_error("loading the standard library failed: " + error_.substr(0, error_.find("\nstack traceback:")));
}

// A graph of this VM may still be compiling on the background thread: it finishes before the
// state closes (and, in the executable, before exit destroys the statics a compile uses); the
// ones queued are dropped (their graphs cannot run again).
LuaVM::~LuaVM() {
  jit::cancel_background_compiles(ctx_.recorder.get());
  lua_close(L_);
}

bool LuaVM::pcall(int nargs, int nresults) {
  int base = lua_gettop(L_) - nargs;
  lua_pushcfunction(L_, traceback);
  lua_insert(L_, base);
  int rc = lua_pcall(L_, nargs, nresults, base);
  lua_remove(L_, base);
  if (rc != 0) {
    const char* m = lua_tostring(L_, -1);
    error_ = m ? m : "(error object is not a string)";
    lua_pop(L_, 1);
    return false;
  }
  return true;
}

bool LuaVM::run_file(const std::string& path, const std::vector<std::string>& args) {
  // the `arg` table as the stand-alone lua interpreter makes it: arg[0] = script
  lua_createtable(L_, int(args.size()), 1);
  lua_pushstring(L_, path.c_str());
  lua_rawseti(L_, -2, 0);
  for (size_t i = 0; i < args.size(); ++i) {
    lua_pushstring(L_, args[i].c_str());
    lua_rawseti(L_, -2, int(i + 1));
  }
  lua_setglobal(L_, "arg");
  if (luaL_loadfile(L_, path.c_str()) != 0) {
    error_ = lua_tostring(L_, -1);
    lua_pop(L_, 1);
    return false;
  }
  for (const std::string& a : args) lua_pushstring(L_, a.c_str());
  return pcall(int(args.size()), 0);
}

bool LuaVM::run_string(const std::string& code, const std::string& chunkname) {
  if (luaL_loadbuffer(L_, code.data(), code.size(), chunkname.c_str()) != 0) {
    error_ = lua_tostring(L_, -1);
    lua_pop(L_, 1);
    return false;
  }
  return pcall(0, 0);
}

}  // namespace cr
