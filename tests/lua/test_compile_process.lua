-- The compiler process and the disk cache's directory (issue 32), in child processes of the
-- crescent executable, each with a private TMPDIR: a compiler process that crashes or hangs gives
-- eager results with the reason logged and leaves no temporary directory; those of a program
-- killed in a compile are swept by the next; a read-only cache directory still gives its entries,
-- and one without them leaves native compilation on.
local S = expect
local it = S.native_it

local SH = require "shell"
local quote, bin = SH.quote, S.need_bin
local function sh(cmd) return (SH.run(cmd)) end
-- A private directory (mode 0755: a child of another user reads its scripts), removed after fn.
local function with_dir(fn) SH.with_dir(fn, "755") end

-- The child: writes its pid to `pidfile` (when given), compiles one function (cache `cache`),
-- calls it three times, prints kernels, disk hits, fallbacks and whether results equal eager.
local CHILD = [[
local T = require "crescent"
local pidfile = %q
if pidfile ~= "" then
  local f = io.open(pidfile, "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()
end
T.config.sync_compile = true
T.config.cache_dir = %q
local fn = function(x) return (x * 1.8125 - 0.375):sigmoid():sum(2), x:exp() + 1 end
local f = T.compile(fn, { hot = 0 })
local x = T.arange(20):float():view(4, 5) / 9
local a, b
for _ = 1, 3 do a, b = f(x) end
local wa, wb = fn(x)
local s = T.compiler.stats()
print(string.format("kernels=%%d disk=%%d fallbacks=%%d eq=%%s", s.kernels_compiled, s.disk_cache_hits, s.eager_fallbacks,
  tostring(a:eq(wa):all():item() and b:eq(wb):all():item())))
]]

-- Runs CHILD with TMPDIR `tmp` and `env`; returns its stdout and stderr together.
local function child(dir, tmp, cache, env, pidfile)
  local script = dir .. "/child.lua"
  SH.write(script, CHILD:format(pidfile or "", cache))
  return sh(string.format("TMPDIR=%s %s %s %s 2>&1", quote(tmp), env or "", quote(bin()), quote(script)))
end
local function mkdir(path, mode) os.execute(string.format("mkdir -p %s && chmod %s %s", quote(path), mode, quote(path))) end
local function listing(path) return sh("ls -A " .. quote(path)):gsub("\n", " ") end

-- A child with `env` prints `want` and the log line `reason` (when given) and leaves its TMPDIR empty.
local function outcome(env, want, reason)
  with_dir(function(dir)
    local tmp = dir .. "/tmp"
    mkdir(tmp, 700)
    local out = child(dir, tmp, "0", env)
    S.truthy(out:find(want, 1, true), out)
    if reason then S.truthy(out:find(reason, 1, true), out) end
    S.eq(listing(tmp), "", "left in TMPDIR")
  end)
end

describe("the compiler process", function()
  it("crashes: the graph stays eager with the reason logged, no temporary directory is left", function()
    outcome("CRESCENT_JIT_FAIL=crash", "kernels=0 disk=0 fallbacks=1 eq=true", "the compiler process died (signal 6)")
  end)
  it("hangs: it is killed after CRESCENT_JIT_TIMEOUT, the graph stays eager, nothing is left", function()
    outcome("CRESCENT_JIT_FAIL=hang CRESCENT_JIT_TIMEOUT=1", "kernels=0 disk=0 fallbacks=1 eq=true",
      "the compiler process did not finish in 1 s")
  end)
  it("compiles without leaving a temporary directory", function()
    outcome("", "kernels=1 disk=0 fallbacks=0 eq=true")
  end)
  -- A program killed while its compiler process hangs: its directories stay (the orphaned
  -- process ends by itself); the next program removes them once they are 10 minutes old.
  it("of a killed program leaves directories that the next program sweeps", function()
    with_dir(function(dir)
      local tmp, pidfile = dir .. "/tmp", dir .. "/pid"
      mkdir(tmp, 700)
      SH.write(dir .. "/child.lua", CHILD:format(pidfile, "0"))
      -- (a subshell waits for it: the killed program is reaped, whatever reaps orphans here)
      os.execute(string.format("(TMPDIR=%s CRESCENT_JIT_FAIL=hang %s %s >/dev/null 2>&1; true) &", quote(tmp), quote(bin()),
        quote(dir .. "/child.lua")))
      -- its compile's directory and its compiler process's (no deadline: the run's timeout is one)
      local pid, dirs
      repeat
        os.execute("sleep 0.1")
        local f = io.open(pidfile)
        pid = f and f:read("*n")
        if f then f:close() end
        dirs = pid and select(2, listing(tmp):gsub("crescent%-jit%-" .. pid .. "%-", "")) or 0
      until dirs >= 2
      os.execute("kill -9 " .. pid .. "; while kill -0 " .. pid .. " 2>/dev/null; do sleep 0.1; done")
      S.eq(select(2, listing(tmp):gsub("crescent%-jit%-" .. pid .. "%-", "")), 2, "the killed program's directories")
      os.execute("touch -d '1 hour ago' " .. quote(tmp) .. "/crescent-jit-*")
      local out = child(dir, tmp, "0")
      S.truthy(out:find("kernels=1 disk=0 fallbacks=0 eq=true", 1, true), out)
      S.eq(listing(tmp), "", "left in TMPDIR")
    end)
  end)
end)

-- Runs the child script as a user who cannot write a directory made read-only: this user, or
-- for root (who writes anyway) nobody.
local function reader()
  if sh("id -u"):match("^0%s") == nil then return "" end
  if sh("command -v setpriv") == "" then S.skip("running as root without setpriv: no read-only directory to test") end
  return "setpriv --reuid=65534 --regid=65534 --clear-groups"
end

describe("a read-only cache directory", function()
  it("gives its entries, and one without them leaves native code on", function()
    with_dir(function(dir)
      local tmp, cache, empty = dir .. "/tmp", dir .. "/cache", dir .. "/empty"
      local as = reader()
      mkdir(tmp, 1777)
      mkdir(cache, 755)
      mkdir(empty, 555)
      local first = child(dir, tmp, cache)
      S.truthy(first:find("kernels=1 disk=0 fallbacks=0 eq=true", 1, true), first)
      local entries = listing(cache)
      S.truthy(entries:find("%.so"), "cache: " .. entries)
      os.execute("chmod -R a-w " .. quote(cache))
      local hit = child(dir, tmp, cache, as)
      S.truthy(hit:find("kernels=0 disk=1 fallbacks=0 eq=true", 1, true), "read-only cache with the entry: " .. hit)
      local none = child(dir, tmp, empty, as)
      S.truthy(none:find("kernels=1 disk=0 fallbacks=0 eq=true", 1, true), "read-only cache without it: " .. none)
      S.eq(listing(empty), "", "the read-only directory")
      S.eq(listing(cache), entries, "the read-only cache")
    end)
  end)
end)
