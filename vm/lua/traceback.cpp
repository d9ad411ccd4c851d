#include "vm/lua/traceback.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

#include "vm/env.hpp"

namespace cr {

namespace {

bool full_traceback() {
  static const bool full = env_word(kEnvTraceback) == 1;  // (checked at start: check_environment)
  return full;
}

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// LuaJIT's "stack traceback:\n\t<frame>..." without the library's frames; "" when none is left.
std::string trim(const std::string& text) {
  std::vector<std::string> frames;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // "stack traceback:"
  while (std::getline(in, line)) frames.push_back(line);
  std::string out;
  for (size_t i = 0; i < frames.size(); ++i) {
    const bool called_by_library = i + 1 < frames.size() && starts(frames[i + 1], "\t[crescent]");
    if (starts(frames[i], "\t[crescent]") || (starts(frames[i], "\t[C]:") && called_by_library)) continue;
    out += "\n" + frames[i];
  }
  return out.empty() ? out : "stack traceback:" + out;
}

}  // namespace

int traceback(lua_State* L) {
  const char* msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_isstring(L, -1)) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  if (full_traceback()) {
    luaL_traceback(L, L, msg, 1);
    return 1;
  }
  // an error a compiled call rethrew (stdlib/compile.lua note_frames): the frames where it was raised
  lua_getfield(L, LUA_REGISTRYINDEX, "crescent.error_frames");
  bool noted = false;
  if (lua_istable(L, -1)) {
    lua_rawgeti(L, -1, 1);
    noted = lua_rawequal(L, -1, 1) != 0;
    lua_pop(L, 1);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "crescent.error_frames");
  }
  if (noted) lua_rawgeti(L, -1, 2);
  else luaL_traceback(L, L, nullptr, 1);
  const std::string frames = trim(lua_tostring(L, -1));
  lua_pop(L, 2);
  if (frames.empty()) return lua_pushstring(L, msg), 1;
  lua_pushfstring(L, "%s\n%s", msg, frames.c_str());
  return 1;
}

}  // namespace cr
