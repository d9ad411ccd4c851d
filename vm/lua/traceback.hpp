// The message handler of LuaVM::pcall: the error message and the Lua traceback.
#pragma once

struct lua_State;

namespace cr {

// Pushes the message (arg 1, or its __tostring) with the traceback of L's stack. The frames of
// crescent's own library (chunks named "[crescent] ...") and the C functions they called are
// left out unless CRESCENT_TRACEBACK=full; another value than short / full warns once.
int traceback(lua_State* L);

}  // namespace cr
