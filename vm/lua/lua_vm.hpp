// One crescent VM: a LuaJIT state with the crescent modules preloaded, and its per-VM Context.
// Used by the executable, the REPL and the embedding APIs alike.
#pragma once
#include <string>
#include <vector>

#include "vm/context.hpp"

struct lua_State;

namespace cr {

class LuaVM {
 public:
  // ignore_env: LUA_PATH and LUA_CPATH are not read (package.path / cpath keep their defaults),
  // as `luajit -E` does.
  explicit LuaVM(bool ignore_env = false);
  ~LuaVM();
  LuaVM(const LuaVM&) = delete;
  LuaVM& operator=(const LuaVM&) = delete;

  lua_State* state() const { return L_; }
  Context& context() { return ctx_; }
  // Runs a chunk; on error returns false and sets error() to the message plus a traceback.
  bool run_file(const std::string& path, const std::vector<std::string>& args = {});
  bool run_string(const std::string& code, const std::string& chunkname = "=(command line)");
  // Calls the function on the stack top with nargs below it ... (pcall with traceback).
  bool pcall(int nargs, int nresults);
  const std::string& error() const { return error_; }

 private:
  lua_State* L_;
  Context ctx_;
  std::string error_;
};

}  // namespace cr
