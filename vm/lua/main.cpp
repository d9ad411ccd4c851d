// The `crescent` executable (API.md section 7), a drop-in for `luajit`: `crescent script.lua
// [args...]` (`-` reads the script from stdin), luajit's options -e -l -j -O -b -i -v -E, `--`,
// and LUA_INIT; with neither a script nor -e, the REPL. An error prints the message with the Lua traceback to
// stderr and exits with status 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "jit/disk_cache.hpp"
#include "jit/jit.hpp"
#include "vm/config.hpp"
#include "vm/lua/launch.hpp"
#include "vm/lua/lua_vm.hpp"
#include "vm/lua/repl.hpp"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

namespace {

const char* kUsage =
    "usage: crescent [options] [script.lua [args...]]\n"
    "  -e chunk       run the Lua chunk (options run in order, before the script)\n"
    "  -l name        require the module `name` (its result is also the global `name`)\n"
    "  -j cmd         LuaJIT control: -jon, -joff, -jflush, or a jit.* module's start,\n"
    "                 e.g. -jv, -jdump=im,out.txt (LuaJIT's jit/*.lua files)\n"
    "  -O[opt]        LuaJIT optimiser flags, as jit.opt.start: -O3, -O-fold, -Ohotloop=10\n"
    "  -b ...         save or list bytecode as `luajit -b` (jit.bcsave; must come first)\n"
    "  -i             enter the REPL after running the script / chunks\n"
    "  -v, --version  print the version (then go on with the other options)\n"
    "  -E             ignore the environment variables LUA_INIT, LUA_PATH and LUA_CPATH\n"
    "  --cache-info   print the kernel cache's directory, entries, size and bound\n"
    "  --cache-clear  remove every entry of the kernel cache\n"
    "  --nproc N      run the script in N processes, one per GPU (T.distributed): rank r gets\n"
    "                 RANK=r, LOCAL_RANK=r, WORLD_SIZE=N; when one fails the others are stopped\n"
    "  -h, --help     print this help\n"
    "  --             stop handling options\n"
    "  -              run the script read from stdin\n"
    "With no script and no -e, starts the REPL. The module is preloaded as the global `crescent`.\n"
    "Lua C modules (luaopen_*) load with require: the executable exports LuaJIT's C API.\n"
    "Environment:\n"
    "  LUA_INIT  run before the options and the script: \"@file\" runs the file, any other value\n"
    "            is a Lua chunk (as luajit, LUA_INIT_5_1 is not read)\n"
    "  LUA_PATH, LUA_CPATH  package.path, package.cpath (\";;\": the default)\n";

// An option that runs in the VM, in command-line order: -e chunk, -l module, -j cmd, -O flags.
struct Action {
  char kind;
  std::string text;
};

struct Options {
  std::vector<Action> actions;
  bool interactive = false, version = false, exec = false;  // exec: some -e
  bool ignore_env = false;                                  // -E
  int script = 0;    // argv index of the script; 0 when there is none
  int bytecode = 0;  // argv index of -b; the rest of argv is jit.bcsave's
  int nproc = 0;     // --nproc N: run under the launcher (vm/lua/launch.hpp)
  int nproc_at = 0, nproc_len = 0;  // its place in argv, left out of the ranks' command line
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

// A long option or -h; -1 when `a` is none of them, else the exit status (--version is -v).
int long_option(const char* a) {
  if (std::strcmp(a, "--cache-info") == 0 || std::strcmp(a, "--cache-clear") == 0) return cache_command(a[8] == 'c');
  if (std::strcmp(a, "-h") == 0 || std::strcmp(a, "--help") == 0)
    return std::printf("%s%s", kUsage, cr::settings_help().c_str()), 0;
  return -1;
}

// Parses the options before the script as luajit does (-e, -l and -j take the next argument or
// the rest of their own). Returns -1 to go on, or the exit status.
// --nproc N or --nproc=N at argv[*i]: 1 when it is one (N in o.nproc), 0 when not, -1 when bad.
int nproc_option(int argc, char** argv, int* i, Options& o) {
  const char* a = argv[*i];
  const char* n = nullptr;
  const int at = *i;
  if (std::strncmp(a, "--nproc=", 8) == 0) n = a + 8;
  else if (std::strcmp(a, "--nproc") == 0 && *i + 1 < argc) n = argv[++*i];
  else if (std::strcmp(a, "--nproc") != 0) return 0;
  char* end = nullptr;
  const long v = n ? std::strtol(n, &end, 10) : 0;
  if (!n || *end != '\0' || v < 1 || v > 1024) return fail_usage("--nproc needs a number of processes, 1 to 1024"), -1;
  o.nproc = int(v);
  o.nproc_at = at, o.nproc_len = *i - at + 1;
  return 1;
}

int parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (int r = nproc_option(argc, argv, &i, o); r != 0) {
      if (r < 0) return 1;
      continue;
    }
    if (a[0] != '-' || a[1] == '\0') return o.script = i, -1;  // the script, or `-` for stdin
    if (std::strcmp(a, "--") == 0) return o.script = i + 1 < argc ? i + 1 : 0, -1;
    if (int status = long_option(a); status >= 0) return status;
    const char opt = std::strcmp(a, "--version") == 0 ? 'v' : a[1];
    if (opt == 'v') a = "-v";
    if ((opt == 'i' || opt == 'v' || opt == 'E') && a[2] == '\0') {
      (opt == 'i' ? o.interactive : opt == 'v' ? o.version : o.ignore_env) = true;
    } else if (opt == 'b') {
      if (i != 1) return fail_usage("-b must be the first option (the rest of the command line is jit.bcsave's)");
      return o.bytecode = i, -1;
    } else if (opt == 'O') {
      o.actions.push_back({'O', a + 2});
    } else if (opt == 'e' || opt == 'l' || opt == 'j') {
      const char* text = a + 2;
      if (*text == '\0') {
        if (i + 1 >= argc) return fail_usage(std::string(a) + " needs an argument");
        text = argv[++i];
      }
      o.actions.push_back({opt, text});
      o.exec = o.exec || opt == 'e';
    } else {
      return fail_usage(std::string("unknown option ") + a);
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

// -l, -j, -O and -b as luajit.c runs them: `-jcmd=a,b` calls jit.cmd(a, b) when jit has such a
// function (on, off, flush), else require("jit.cmd").start(a, b); an empty piece is nil.
const char* kLuajitOptions = R"lua(
local kind, text = ...
local function call(f, args)
  local a, n = {}, 0
  for piece in args:gmatch("([^,]*),") do n = n + 1; a[n] = piece ~= "" and piece or nil end
  return f(unpack(a, 1, n))
end
local function start(name)
  local ok, mod = pcall(require, "jit." .. name)
  if ok and type(mod) == "table" and type(mod.start) == "function" then return mod.start end
  if ok or tostring(mod):find("^module 'jit%." .. name:gsub("%p", "%%%0") .. "' not found") then
    error("unknown LuaJIT command, or LuaJIT's jit.* modules are not installed (jit/" .. name ..
          ".lua, Debian package libluajit-5.1-common)", 0)
  end
  error(mod, 0)
end
local function run(...)
  if kind == "l" then
    _G[text] = require(text)
  elseif kind == "O" then
    call(require("jit.opt").start, text ~= "" and text .. "," or "")
  elseif kind == "j" then
    local name, args = text:match("^([^=]*)=?(.*)$")
    local f = type(jit[name]) == "function" and jit[name] or start(name)
    call(f, args ~= "" and args .. "," or "")
  else  -- -b: every argument after it
    start("bcsave")(select(3, ...))
  end
end
local ok, err = pcall(run, ...)
if not ok then  -- the option, not this chunk, is the position
  local label = kind == "b" and "-b" or kind == "l" and "-l " .. text or "-" .. kind .. text
  error(label .. ": " .. tostring(err):gsub("^%[crescent%] options:%d+: ", ""), 0)
end
)lua";

// Runs one -l / -j / -O action (or -b with `args`); false with the error reported.
bool run_luajit_option(cr::LuaVM& vm, char kind, const std::string& text, const std::vector<const char*>& args = {}) {
  lua_State* L = vm.state();
  if (luaL_loadbuffer(L, kLuajitOptions, std::strlen(kLuajitOptions), "=[crescent] options") != 0)
    return report(lua_tostring(L, -1)), false;
  lua_pushlstring(L, &kind, 1);
  lua_pushstring(L, text.c_str());
  for (const char* a : args) lua_pushstring(L, a);
  if (!vm.pcall(int(args.size()) + 2, 0)) return report(vm.error()), false;
  return true;
}

bool run_action(cr::LuaVM& vm, const Action& a) {
  if (a.kind != 'e') return run_luajit_option(vm, a.kind, a.text);
  if (!vm.run_string(a.text)) return report(vm.error()), false;
  return true;
}

// LUA_INIT as luajit.c runs it: "@file" runs the file, any other value is a chunk named
// "=LUA_INIT"; false with the error reported.
bool run_lua_init(cr::LuaVM& vm) {
  const char* init = std::getenv("LUA_INIT");
  if (!init) return true;
  if (init[0] != '@') return vm.run_string(init, "=LUA_INIT") || (report(vm.error()), false);
  lua_State* L = vm.state();
  if (luaL_loadfile(L, init + 1) != 0) {
    report(lua_tostring(L, -1));
    lua_pop(L, 1);
    return false;
  }
  return vm.pcall(0, 0) || (report(vm.error()), false);
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

// Runs -b, or the options, the script and the REPL in one VM; returns the exit status.
static int run(int argc, char** argv, const Options& o) {
  try {
    cr::LuaVM vm(o.ignore_env);
    if (o.bytecode) {  // `-bl` is bcsave's `-l`, as in luajit.c
      std::vector<const char*> args;
      std::string flag = argv[o.bytecode][2] ? std::string("-") + (argv[o.bytecode] + 2) : "";
      if (!flag.empty()) args.push_back(flag.c_str());
      for (int i = o.bytecode + 1; i < argc; ++i) args.push_back(argv[i]);
      return run_luajit_option(vm, 'b', "", args) ? 0 : 1;
    }
    set_arg(vm.state(), argc, argv, o.script);
    if (!o.ignore_env && !run_lua_init(vm)) return 1;
    if (o.version) std::printf("%s\n", cr::version_line().c_str());
    for (const Action& a : o.actions)
      if (!run_action(vm, a)) return 1;
    if (o.script && !run_script(vm, argc, argv, o.script)) return 1;
    std::fflush(stdout);
    if (o.interactive || (!o.script && !o.exec && !o.version)) return cr::run_repl(vm);
  } catch (const std::exception& e) {
    return report(e.what());
  }
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  if (int status = parse(argc, argv, o); status >= 0) return status;
  if (o.nproc > 0) {
    std::vector<char*> args;
    for (int i = 0; i < argc; ++i)
      if (i < o.nproc_at || i >= o.nproc_at + o.nproc_len) args.push_back(argv[i]);
    return cr::launch(o.nproc, int(args.size()), args.data());
  }
  int status = run(argc, argv, o);
  // The VM is gone; no background compile may still run (an eager CUDA kernel's specialisation
  // belongs to no VM) when exit destroys the statics and NVRTC's state a compile uses.
  cr::jit::stop_background_compiles();
  return status;
}
