// The interactive prompt: readline editing, a history file, multi-line input, printing of
// expression results. Part of the executable only (it owns the process's SIGINT handler).
#pragma once
#include <string>

#include "vm/lua/lua_vm.hpp"

namespace cr {

// "crescent 0.1.0 (LuaJIT 2.1...)": printed by --version and the REPL banner.
std::string version_line();

// Reads chunks from stdin until end of input and returns the process exit status (0). On a
// terminal: GNU readline with prompts and the history file (CRESCENT_HISTORY, default
// ~/.crescent_history); otherwise plain lines without prompts, so input can be piped in.
int run_repl(LuaVM& vm);

}  // namespace cr
