/* A Lua C module, as a C library on the system would be (lua-cjson, lpeg): built without LuaJIT,
   its Lua C API calls resolve to the executable's exports when require loads it. */
#include <lauxlib.h>
#include <lua.h>

static int add(lua_State* L) {
  lua_pushnumber(L, luaL_checknumber(L, 1) + luaL_checknumber(L, 2));
  return 1;
}

static int greet(lua_State* L) {
  lua_pushfstring(L, "hello, %s", luaL_checkstring(L, 1));
  return 1;
}

static int fail(lua_State* L) { return luaL_error(L, "test_cmod: failed as asked"); }

static const luaL_Reg kFunctions[] = {{"add", add}, {"greet", greet}, {"fail", fail}, {NULL, NULL}};

int luaopen_test_cmod(lua_State* L) {
  lua_newtable(L);
  luaL_register(L, NULL, kFunctions);
  return 1;
}
