// The interactive prompt: readline editing, a history file, multi-line input, printing of
// expression results.
#pragma once
#include "vm/lua_vm.hpp"

namespace cr {
int run_repl(LuaVM& vm);  // returns the process exit status
}
