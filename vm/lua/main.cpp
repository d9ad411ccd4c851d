// The `crescent` executable (API.md section 7): `crescent script.lua [args...]` (`-` reads the
// script from stdin), `-e chunk`, `-i` (REPL after the script and chunks), `--version`, `--help`;
// with neither a script nor -e, the REPL. An error prints the message with the Lua traceback to
// stderr and exits with status 1.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "jit/disk_cache.hpp"
#include "jit/jit.hpp"
#include "vm/config.hpp"
#include "vm/lua/lua_vm.hpp"
#include "vm/lua/repl.hpp"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

namespace {

const char* kUsage =
    "usage: crescent [options] [script.lua [args...]]\n"
    "  -e chunk       run the Lua chunk (may be repeated; runs before the script)\n"
    "  -i             enter the REPL after running the script / chunks\n"
    "  -v, --version  print the version\n"
    "  --cache-info   print the kernel cache's directory, entries, size and bound\n"
    "  --cache-clear  remove every entry of the kernel cache\n"
    "  -h, --help     print this help\n"
    "  --             stop handling options\n"
    "  -              run the script read from stdin\n"
    "With no script and no -e, starts the REPL. The module is preloaded as the global `crescent`.\n"
    "Environment:\n";

struct Options {
  std::vector<std::string> chunks;  // -e, in order
  bool interactive = false;
  int script = 0;  // argv index of the script; 0 when there is none
};

int fail_usage(const std::string& msg) {
  std::fprintf(stderr, "crescent: %s\n%s%s", msg.c_str(), kUsage, cr::settings_help().c_str());
  return 1;
}

// --cache-info / --cache-clear: the kernel cache of T.config.cache_dir's default.
int cache_command(bool clear) {
  const std::string dir = cr::jit::default_cache_dir();
  if (dir == "0") return std::printf("the kernel cache on disk is disabled (CRESCENT_CACHE_DIR=0)\n"), 0;
  try {
    const double max_mb = cr::jit::cache_max_mb();
    const cr::jit::DiskUsage u = clear ? cr::jit::clear_disk_cache(dir) : cr::jit::disk_usage(dir);
    std::printf("kernel cache %s%s\n%s%lld entries, %.1f MB (bound %g MB: T.config.cache_max_mb, CRESCENT_CACHE_MAX_MB)\n",
                dir.c_str(), u.exists ? "" : " (no such directory yet)", clear ? "removed " : "", (long long)u.entries,
                double(u.bytes) / (1024 * 1024), max_mb);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crescent: %s\n", e.what());
    return 1;
  }
}

// Parses the options before the script. Returns -1 to go on, or the exit status.
int parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "-e") == 0) {
      if (i + 1 >= argc) return fail_usage("-e needs an argument");
      o.chunks.push_back(argv[++i]);
    } else if (std::strcmp(a, "-i") == 0) {
      o.interactive = true;
    } else if (std::strcmp(a, "-v") == 0 || std::strcmp(a, "--version") == 0) {
      std::printf("%s\n", cr::version_line().c_str());
      return 0;
    } else if (std::strcmp(a, "--cache-info") == 0 || std::strcmp(a, "--cache-clear") == 0) {
      return cache_command(a[8] == 'c');
    } else if (std::strcmp(a, "-h") == 0 || std::strcmp(a, "--help") == 0) {
      std::printf("%s%s", kUsage, cr::settings_help().c_str());
      return 0;
    } else if (std::strcmp(a, "--") == 0) {
      if (i + 1 < argc) o.script = i + 1;
      return -1;
    } else if (a[0] == '-' && a[1] != '\0') {
      return fail_usage(std::string("unknown option ") + a);
    } else {
      o.script = i;
      return -1;
    }
  }
  return -1;
}

// The global `arg` as the stand-alone lua makes it: arg[0] is the script, arg[1..] its
// arguments, negative indices the executable and options before it (with no script, arg[0]
// is the executable).
void set_arg(lua_State* L, int argc, char** argv, int script) {
  lua_createtable(L, argc - script, script + 1);
  for (int i = 0; i < argc; ++i) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

int report(const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "crescent: %s\n", msg.c_str());
  return 1;
}

// Runs argv[script] with the rest of argv as its `...`; false with the error reported.
bool run_script(cr::LuaVM& vm, int argc, char** argv, int script) {
  lua_State* L = vm.state();
  const char* path = argv[script];
  if (luaL_loadfile(L, std::strcmp(path, "-") == 0 ? nullptr : path) != 0) {
    const char* m = lua_tostring(L, -1);
    report(m ? m : "cannot load the script");
    lua_pop(L, 1);
    return false;
  }
  for (int i = script + 1; i < argc; ++i) lua_pushstring(L, argv[i]);
  if (!vm.pcall(argc - script - 1, 0)) return report(vm.error()), false;
  return true;
}

}  // namespace

// In the sanitizer builds: an allocation AddressSanitizer cannot serve (T.empty(2^45)) returns
// null, which crescent reports as a Lua error ("empty: out of memory allocating N bytes"),
// instead of ASan ending the process. ASAN_OPTIONS still overrides it. Unused without ASan.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

// Runs the chunks, the script and the REPL in one VM; returns the exit status.
static int run(int argc, char** argv, const Options& o) {
  try {
    cr::LuaVM vm;
    set_arg(vm.state(), argc, argv, o.script);
    for (const std::string& c : o.chunks)
      if (!vm.run_string(c)) return report(vm.error());
    if (o.script && !run_script(vm, argc, argv, o.script)) return 1;
    std::fflush(stdout);
    if (o.interactive || (!o.script && o.chunks.empty())) return cr::run_repl(vm);
  } catch (const std::exception& e) {
    return report(e.what());
  }
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  if (int status = parse(argc, argv, o); status >= 0) return status;
  int status = run(argc, argv, o);
  // The VM is gone; no background compile may still run (an eager CUDA kernel's specialisation
  // belongs to no VM) when exit destroys the statics and NVRTC's state a compile uses.
  cr::jit::stop_background_compiles();
  return status;
}
