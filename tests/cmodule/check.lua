-- Run as `crescent -e "package.cpath = ..." -l test_cmod check.lua`: the C module loaded by -l
-- (a global, as Lua 5.4's -l makes it) and again by require, its C functions called from Lua.
assert(type(test_cmod) == "table", "-l test_cmod set no global")
local m = require "test_cmod"
assert(m == test_cmod, "require gave another table than -l")
assert(m.add(1, 2.5) == 3.5, "add")
assert(m.greet("crescent") == "hello, crescent", "greet")
local ok, err = pcall(m.fail)
assert(not ok and err:find("test_cmod: failed as asked", 1, true), tostring(err))
local ok2, err2 = pcall(m.add, "x")
assert(not ok2 and err2:find("bad argument #1", 1, true), tostring(err2))
print("test_cmod ok", crescent.ones(2):sum():item())
