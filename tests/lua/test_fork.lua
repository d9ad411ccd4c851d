-- fork() after the runtime was used (a host loads a model, then forks its workers; docs/usage.md
-- "fork()"): each case runs a script in a crescent process that forks through the FFI. The child
-- reads the parent's tensors, allocates, compiles with its own compiler processes and exits
-- promptly, with compiles in flight at the fork. No timings are asserted: a deadline on the
-- child only turns a hang into a failure.
local S = expect
local it = S.native_it
local SH = require "shell"

-- The script's prelude: fork, and `await(pid, seconds)`, the child's exit status, or "hung" (then
-- it is killed). CHILD(fn) runs fn in the child, which never returns to the script. QUIESCE():
-- under AddressSanitizer (gcc's), whose allocator a fork() can leave locked by another thread,
-- the compiles finish before the fork; elsewhere they are in flight.
local PRELUDE = [[
local ffi = require "ffi"
ffi.cdef [=[ int fork(void); int waitpid(int, int*, int); void _exit(int); int kill(int, int); int usleep(unsigned); ]=]
local T = require "crescent"
local SANITIZED = io.open("/proc/self/maps"):read("*a"):find("libasan", 1, true) ~= nil
local function QUIESCE() if SANITIZED then T.compiler.wait() end end
local function await(pid, seconds)
  local st, t0 = ffi.new("int[1]"), T.time()
  while T.time() - t0 < seconds do
    local r = ffi.C.waitpid(pid, st, 1) -- WNOHANG
    if r == pid then return st[0] end
    ffi.C.usleep(20000)
  end
  ffi.C.kill(pid, 9)
  ffi.C.waitpid(pid, st, 0)
  return "hung"
end
local function CHILD(fn)
  local ok, err = pcall(fn)
  if not ok then print("child error: " .. tostring(err)) end
  io.stdout:flush()
  ffi.C._exit(ok and 0 or 1)
end
]]

-- Runs PRELUDE .. body in a crescent process with its own TMPDIR and no disk cache (each process
-- compiles); returns its output and exit status, and what its run left in TMPDIR.
local function run(body)
  local out, left, status
  SH.with_dir(function(dir)
    local o, e, st = S.crescent({}, { script = PRELUDE .. body, env = "CRESCENT_CACHE_DIR=0 TMPDIR=" .. SH.quote(dir) })
    out, status = o .. e, st
    left = table.concat(SH.ls(dir, "^crescent%-jit"), " ")
  end)
  return out, status, left
end

local function has(out, line) S.truthy(out:find(line, 1, true), "expected \"" .. line .. "\" in:\n" .. out) end

describe("fork()", function()
  S.it("a child reads the parent's large tensors, writes its copies, allocates new ones", function()
    local out, status = run [[
local W = T.full({ 4096, 1024 }, 0.5)                  -- 16 MB: the allocator's large blocks
do local Z = T.ones(4096, 1024) end
collectgarbage(); collectgarbage()                     -- a freed large block stays cached
local pid = ffi.C.fork()
if pid == 0 then
  CHILD(function()
    print("child read", W:sum():item(), W:max():item())
    local Z = T.zeros(4096, 1024) + 2                  -- from the cache, and a fresh block
    print("child new", Z:sum():item(), (Z * W):sum():item())
    W:add_(1)                                          -- its own copy
    print("child wrote", W:sum():item())
  end)
end
print("child status", await(pid, 120))
print("parent after", W:sum():item())
]]
    S.eq(status, 0, out)
    has(out, "child read\t2097152\t0.5")
    has(out, "child new\t8388608\t4194304")
    has(out, "child wrote\t6291456")
    has(out, "child status\t0")
    has(out, "parent after\t2097152")
  end)

  it("a child compiles and runs native code while the parent had compiles in flight", function()
    local out, status = run [[
T.config.sync_compile = false
local function fn(x) local y = x for i = 1, 12 do y = (y:sin() * 1.01 + y:cos()):tanh() + y * 0.5 end return y:sum() end
local f = T.compile(fn)
local x = T.arange(1000):float() / 1000
for _ = 1, 3 do f(x) end                               -- queued (or compiling) at the fork
QUIESCE()
local pid = ffi.C.fork()
if pid == 0 then
  CHILD(function()
    T.compiler.wait()                                  -- the parent's thread is not the child's
    local g = T.compile(function(x) return (x * 2 + 1):exp():sum() end)
    for _ = 1, 3 do g(x) end
    T.compiler.wait()
    local a, b = f(x), g(x)
    local s = T.compiler.stats()
    print("child native", s.kernels_compiled > 0, "fallbacks", s.eager_fallbacks, "pending", s.compiles_pending)
    print("child results", math.abs(a:item() - fn(x):item()) <= 1e-4 * math.abs(fn(x):item()),
      math.abs(b:item() - (x * 2 + 1):exp():sum():item()) <= 1e-4 * b:item())
  end)
end
print("child status", await(pid, 300))
T.compiler.wait()
f(x)
print("parent fallbacks", T.compiler.stats().eager_fallbacks)
]]
    S.eq(status, 0, out)
    has(out, "child native\ttrue\tfallbacks\t0\tpending\t0")
    has(out, "child results\ttrue\ttrue")
    has(out, "child status\t0")
    has(out, "parent fallbacks\t0")
  end)

  it("parent and child compile at once, each with its own compiler processes and directories", function()
    local out, status, left = run [[
T.config.sync_compile = true
local x = T.arange(1, 101):float() / 100
local function body(c, child) return function(x) return (x * c + (child and x:cos() or x:sin()) * (c + 1)):exp():sum() end end
local function work(who, child)
  local bad = 0
  for i = 1, 8 do
    local fn = body(i * 0.01, child)
    local f = T.compile(fn, { dynamic = false })
    local got; for _ = 1, 3 do got = f(x):item() end
    local want = fn(x):item()
    if math.abs(got - want) > 1e-4 * math.abs(want) then bad = bad + 1 end
  end
  local s = T.compiler.stats()
  print(who, "bad", bad, "fallbacks", s.eager_fallbacks, "native", s.kernels_compiled > 0)
end
do local f0 = T.compile(body(0.5), { dynamic = false }); for _ = 1, 3 do f0(x) end end -- the pool is up
local pid = ffi.C.fork()
if pid == 0 then
  local ok, err = pcall(work, "child", true)
  if not ok then print("child error: " .. tostring(err)) end
  io.stdout:flush()
  os.exit(ok and 0 or 1, true)                         -- a whole exit: its own processes end
end
work("parent", false)
print("child status", await(pid, 300))
work("parent again", false)                            -- the child left the parent's processes alone
]]
    S.eq(status, 0, out)
    has(out, "child\tbad\t0\tfallbacks\t0\tnative\ttrue")
    has(out, "parent\tbad\t0\tfallbacks\t0\tnative\ttrue")
    has(out, "child status\t0")
    has(out, "parent again\tbad\t0\tfallbacks\t0\tnative\ttrue")
    S.eq(left, "", "scratch directories left in TMPDIR")
  end)

  it("a child with a compile in flight at the fork exits promptly", function()
    local out, status = run [[
T.config.sync_compile = false
local f = T.compile(function(x) local y = x for i = 1, 40 do y = (y:sin() * 1.01 + y:cos()):tanh() + y * 0.5 end return y:sum() end)
local x = T.randn(1000)
for _ = 1, 3 do f(x) end
QUIESCE()
local pid = ffi.C.fork()
if pid == 0 then
  f(x)
  io.stdout:flush()
  os.exit(0, true)                                     -- cancels the VM's compiles, then exits
end
-- (an exit waits at most for a compile in progress: a hang was 90 s, in a child that no thread served)
print("child status", await(pid, 50))
]]
    S.eq(status, 0, out)
    has(out, "child status\t0")
  end)
end)
