// The `crescent` executable (API.md section 7): run a script, -e chunks, -i, and the REPL.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "vm/lua_vm.hpp"
#include "vm/repl.hpp"

namespace {

const char* kUsage =
    "usage: crescent [options] [script.lua [args...]]\n"
    "  -e chunk     run the Lua chunk (may be repeated)\n"
    "  -i           enter the REPL after running the script / chunks\n"
    "  -v, --version  print the version\n"
    "  -h, --help   print this help\n"
    "With no script and no -e, starts the REPL. The module is preloaded as the global `crescent`.\n"
    "Environment: CRESCENT_NUM_THREADS, CRESCENT_LOGS, CRESCENT_CACHE_DIR, CRESCENT_DEBUG_DIR.\n";

int report(cr::LuaVM& vm) {
  std::fprintf(stderr, "crescent: %s\n", vm.error().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> chunks;
  bool interactive = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-e") {
      if (i + 1 >= argc) { std::fprintf(stderr, "crescent: -e needs an argument\n%s", kUsage); return 1; }
      chunks.push_back(argv[++i]);
    } else if (a == "-i") interactive = true;
    else if (a == "-v" || a == "--version") { std::printf("crescent 0.1.0 (LuaJIT 2.1)\n"); return 0; }
    else if (a == "-h" || a == "--help") { std::printf("%s", kUsage); return 0; }
    else if (a == "--") { ++i; break; }
    else if (a.size() > 1 && a[0] == '-') { std::fprintf(stderr, "crescent: unknown option %s\n%s", a.c_str(), kUsage); return 1; }
    else break;
  }
  try {
    cr::LuaVM vm;
    for (const std::string& c : chunks)
      if (!vm.run_string(c)) return report(vm);
    if (i < argc) {
      std::vector<std::string> args(argv + i + 1, argv + argc);
      if (!vm.run_file(argv[i], args)) return report(vm);
    }
    if (interactive || (i >= argc && chunks.empty())) return cr::run_repl(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crescent: %s\n", e.what());
    return 1;
  }
  return 0;
}
