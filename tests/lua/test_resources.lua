-- Resources: compile / T.compiler.reset() cycles keep the process's memory flat (and, in the
-- sanitizer build, leak nothing), running out of memory is a Lua error the VM survives, and a
-- damaged entry of the on-disk kernel cache is detected, discarded and compiled again.
--
-- CRESCENT_RESOURCE_CYCLES=n runs n cycles of each kind instead of the defaults (the 10,000-cycle
-- run: CRESCENT_RESOURCE_CYCLES=10000); CRESCENT_RESOURCE_VERBOSE=1 prints the memory figures
-- (RSS, or the live heap bytes under ASan).
local T = require "crescent"
local S = expect

local saved = { sync = T.config.sync_compile, dir = T.config.cache_dir }
T.config.sync_compile = true  -- compile in line: the first calls run native code

local CYCLES = tonumber(os.getenv("CRESCENT_RESOURCE_CYCLES") or "")
local VERBOSE = os.getenv("CRESCENT_RESOURCE_VERBOSE") == "1"

local SH = require "shell"
local temp_dir, read, write = SH.tmpdir, SH.read, SH.write
-- the cache entries (file names) in dir
local function entries(dir) return SH.ls(dir, "%.so$") end

-- The memory in use, in KiB: the resident set size, or under AddressSanitizer (which keeps freed
-- memory in quarantine, so RSS says little) the live heap bytes it counts.
local ffi = require "ffi"
local asan = pcall(ffi.cdef, "size_t __sanitizer_get_current_allocated_bytes(void);")
  and pcall(function() return ffi.C.__sanitizer_get_current_allocated_bytes end)
local MEMORY = asan and "live heap" or "RSS"
local function memory_kb()
  if asan then return math.floor(tonumber(ffi.C.__sanitizer_get_current_allocated_bytes()) / 1024) end
  local s = read("/proc/self/statm")
  return tonumber(s:match("^%S+%s+(%S+)")) * 4
end

local fn = function(x) return (x * 1.4375 + 0.3125):tanh():sum(1), (x - 0.5):exp() end
local other = function(x) return (x * x - 2):relu():amax(1) end
local x = T.arange(12):float():view(3, 4) / 7

-- Compiles `f` afresh, runs it until its graph ran as native code and returns its results and
-- the compiler stats of the run (since the last reset).
local function compiled_run(f)
  local c = T.compile(f, { hot = 0 })
  local a, b
  for _ = 1, 3 do a, b = c(x) end
  return a, b, T.compiler.stats()
end

local function same(got, want, what)
  S.eq(got.shape, want.shape, what .. ": shape")
  S.eq(got:totable(), want:totable(), what .. ": values")
end

-- n compile / reset cycles; returns the memory growth in KiB over them, after `warm` cycles
local function cycles(n, warm)
  local want1, want2 = fn(x)
  local function one()
    local a, b, s = compiled_run(fn)
    -- compiled or loaded from disk: a hit in the memory cache would mean the last cycle's
    -- kernels were never unloaded
    if s.graphs_compiled < 1 or s.eager_fallbacks ~= 0 or s.kernels_compiled + s.disk_cache_hits < 1 then
      error(("a cycle did not load native code: %d graphs compiled, %d kernels compiled, %d disk cache hits, %d eager fallbacks")
        :format(s.graphs_compiled, s.kernels_compiled, s.disk_cache_hits, s.eager_fallbacks))
    end
    T.compiler.reset()
    return a, b
  end
  for _ = 1, warm do one() end
  collectgarbage()
  local start = memory_kb()
  local a, b
  for _ = 1, n do a, b = one() end
  collectgarbage()
  local finish = memory_kb()
  same(a, want1, "last cycle, result 1")
  same(b, want2, "last cycle, result 2")
  if VERBOSE then io.stderr:write(("%d cycles: %s %d KiB -> %d KiB (%+d KiB)\n"):format(n, MEMORY, start, finish, finish - start)) end
  return finish - start
end

describe("compile / reset cycles", function()
  S.native_it("keep RSS flat when every cycle loads its kernels from the disk cache", function()
    local dir = temp_dir()
    T.config.cache_dir = dir
    local ok, err = pcall(function()
      local n = CYCLES or 300
      local growth = cycles(n, 30)
      -- a leak of even 8 KiB a cycle would show: the bound is 4 MiB plus 1 KiB a cycle
      S.truthy(growth < 4096 + n, ("%s grew by %d KiB over %d cycles"):format(MEMORY, growth, n))
      S.eq(#entries(dir), 1, "cache entries")
    end)
    T.config.cache_dir = saved.dir
    SH.rm(dir)
    if not ok then error(err, 0) end
  end)
  S.native_it("keep RSS flat when every cycle compiles (no disk cache)", function()
    T.config.cache_dir = "0"
    local n = CYCLES and math.max(1, math.floor(CYCLES / 20)) or 10
    local ok, err = pcall(function()
      local growth = cycles(n, 3)
      S.truthy(growth < 4096 + 16 * n, ("%s grew by %d KiB over %d cycles"):format(MEMORY, growth, n))
    end)
    T.config.cache_dir = saved.dir
    if not ok then error(err, 0) end
  end)
end)

describe("the collector", function()
  -- vm/lua/api.cpp note_allocations / hand_out: small tensors barely count in bytes, so the handles
  -- handed to Lua count too (a full collection after 4096 of them, more with a larger Lua heap)
  it("collects dropped small tensors by their count, even with Lua's own collector stopped", function()
    collectgarbage()
    collectgarbage("stop")
    local alive = setmetatable({}, { __mode = "k" })
    local ok, err = pcall(function()
      local x = T.ones(4)
      for _ = 1, 30000 do alive[x + 1] = true end
    end)
    local left = 0
    for _ in pairs(alive) do left = left + 1 end
    collectgarbage("restart")
    if not ok then error(err, 0) end
    S.truthy(left < 20000, ("%d of 30000 dropped tensors were still alive"):format(left))
  end)

  -- vm/graph/recorder.cpp collect_pays: a compiled call collects before its return only when the
  -- values Lua may have dropped would hold memory after the run; fused intermediates hold none.
  -- Counts the calls after which a probe (garbage when the call starts) is gone, collector stopped.
  local function collecting_calls(f, ...)
    f(...)
    f(...)
    f(...)
    T.compiler.wait(f)
    collectgarbage()
    collectgarbage("stop")
    local n = 0
    local ok, err = pcall(function(...)
      for _ = 1, 10 do
        local probe = setmetatable({}, { __mode = "k" })
        probe[{}] = true
        f(...)
        if next(probe) == nil then n = n + 1 end
      end
    end, ...)
    collectgarbage("restart")
    if not ok then error(err, 0) end
    return n
  end
  S.native_it("does not collect before a return when the large locals were fused away", function()
    local x, y = T.randn(1024, 2048), T.randn(1024, 2048)  -- 8 MiB each
    for _, dynamic in ipairs { false, true } do  -- (symbolic sizes: the instance of the call's shape)
      local f = T.compile(function(a, b)
        local d = a - b
        local sq = d * d
        return sq:sum()
      end, { dynamic = dynamic })
      S.eq(collecting_calls(f, x, y), 0, "calls that collected, dynamic = " .. tostring(dynamic))
      local want = ((x - y) * (x - y)):sum():item()
      S.truthy(math.abs(f(x, y):item() - want) <= 1e-5 * want, "the sum")
    end
  end)
  -- The stores (6 x an argument's bytes) pass the garbage rule's hard bound, 16 x the Lua heap:
  -- each call collects whatever the time since the last collection (vm/context.cpp).
  S.native_it("still collects when a dropped local is a large value the run stores", function()
    collectgarbage()
    local rows = math.max(1024, math.ceil(6 * collectgarbage("count") * 1024 / 4 / 1024))
    local x, y = T.randn(rows, 1024), T.randn(rows, 1024)
    local f = T.compile(function(a, b)
      local h = T.cat({ a, b })  -- an extern's results: stored
      local h2 = T.cat({ h, h })
      return (h2 * 2):sum()
    end)
    S.eq(collecting_calls(f, x, y), 10, "calls that collected")
  end)
  -- stdlib/core.lua collect: that collection resets the collector's budgets (api_gc_done), and
  -- the run after it counts nothing against them (what it allocates is its own stores). Here each
  -- call stores 30 x the Lua heap (past the garbage rule's hard bound, 16 x the heap: it collects
  -- before its return whatever the time) in blocks of 4 x the heap (host bytes, not blocks too
  -- large for the cache, which count apart), past the byte budget: no other collection.
  S.native_it("counts a collection before a return as the budget's own", function()
    collectgarbage()
    local cols = math.ceil(2 * collectgarbage("count") * 1024 / 4 / 256)
    local x, y = T.randn(256, cols), T.randn(256, cols)
    local f = T.compile(function(a, b)
      local s
      for k = 1, 5 do
        local h = T.cat({ a, b + k })  -- (stored: an extern's result, and its input b + k)
        local d = h * 2
        for _ = 1, 4 do d = d + 1 end  -- (fused: lazy, never stored)
        s = s and s + d:sum() or d:sum()
      end
      return s
    end)
    for _ = 1, 3 do f(x, y) end
    T.compiler.wait(f)
    local cg, full = collectgarbage, 0
    local ok, err = pcall(function()
      _G.collectgarbage = function(what, ...)
        if what == nil or what == "collect" then full = full + 1 end
        return cg(what, ...)
      end
      for _ = 1, 30 do f(x, y) end
    end)
    _G.collectgarbage = cg
    if not ok then error(err, 0) end
    S.eq(full, 30, "full collections in 30 calls that each collect once")
  end)
end)

describe("the collector's byte rule", function()
  -- note_allocations waits for 8 x the last collection's time, up to 16 x its byte budget
  -- (at least 8 MB each): dropped host tensors stay bounded whatever the timing
  it("keeps dropped large outputs within its hard budget, eager and compiled", function()
    collectgarbage()
    local x = T.ones(1024, 1024)  -- 4 MiB
    local f = T.compile(function(a) return a * 2 + 1 end)
    for _, run in ipairs { function() return x * 3 end, function() return f(x) end } do
      collectgarbage()
      T.reset_peak_memory()
      local base = T.memory_stats().in_use
      for _ = 1, 300 do run() end
      local grew = T.memory_stats().peak - base
      local budget = 16 * math.max(8, 8 * collectgarbage("count") / 1024) * 2 ^ 20
      local what = ("peak grew by %.0f MiB over 300 calls of 4 MiB outputs (budget %.0f MiB)")
      -- (slack: the outputs of the call that passes the bound, and the heap's size moving)
      S.truthy(grew <= 1.25 * budget + 16 * 2 ^ 20, what:format(grew / 2 ^ 20, budget / 2 ^ 20))
    end
  end)
end)

describe("tensor handles", function()
  -- stdlib/core.lua: userdata from a pool refilled 256 at a time (vm/lua/lua_vm.cpp new_handles)
  it("are userdata that only tensors pass T.is_tensor for", function()
    local x = T.ones(2)
    S.eq(type(x), "userdata")
    S.truthy(T.is_tensor(x) and T.is_tensor(x + 1) and T.is_tensor(T.zeros(0)))
    for _, v in ipairs { io.stdout, ffi.new("int[1]"), {}, "x", 1, true, print, newproxy(true) } do
      S.eq(T.is_tensor(v), false, "is_tensor(" .. type(v) .. ")")
    end
    S.eq(T.is_tensor(nil), false)
  end)
  it("compare equal when they hold the same tensor", function()
    local x = T.zeros(3)
    S.truthy(x:add_(1) == x, "an in-place op's result is its input")
    S.eq(x == x:clone(), false)
    S.eq(x == 1, false)
    S.eq(x ~= nil, true)
  end)
  it("keep their tensors across pool refills and collections, and drop the rest", function()
    local kept, dropped = {}, setmetatable({}, { __mode = "k" })
    for i = 1, 1000 do  -- several refills of the pool, every other handle dropped
      kept[i] = T.full({ 2 }, i)
      dropped[T.full({ 2 }, -i)] = true
    end
    collectgarbage()
    collectgarbage()
    local left = 0
    for _ in pairs(dropped) do left = left + 1 end
    S.eq(left, 0, "dropped handles left after two collections")
    for i = 1, 1000 do
      local v = kept[i]:totable()
      if v[1] ~= i or v[2] ~= i then S.eq(v, { i, i }, "handle " .. i) end
    end
  end)
end)

describe("out of memory", function()
  it("raises a Lua error naming the op and the size, and the VM keeps working", function()
    -- 2^45 float64 elements: 256 TiB, more than any x86-64 address space (and ASan's limit)
    S.errors(function() local _ = T.empty(2 ^ 45, { dtype = "float64" }) end,
      "test_resources.lua:%d+: empty: out of memory allocating 281474976710656 bytes")
    S.errors(function() return T.zeros({ 2 ^ 23, 2 ^ 22 }, { dtype = "int64" }) end, "zeros: out of memory allocating 281474976710656 bytes")
    -- a small tensor whose result is huge
    local e = T.ones(1, { dtype = "float64" }):expand(2 ^ 45)
    S.errors(function() return e:contiguous() end, "contiguous: out of memory allocating 281474976710656 bytes")
    S.errors(function() return e + 1 end, "add: out of memory")
    local y = T.arange(6):view(2, 3)
    S.eq((y * 2):sum():item(), 30)
    collectgarbage()
    S.eq(T.ones(3):sum():item(), 3)
  end)
  it("inside a compiled function raises the same error", function()
    local f = T.compile(function(n) return T.empty(n, { dtype = "float64" }) end)
    for _ = 1, 3 do S.errors(function() return f(2 ^ 45) end, "empty: out of memory allocating 281474976710656 bytes") end
    S.eq(f(4):numel(), 4)
  end)
end)

-- Each damage done to the entry of `fn`; `other_entry` is the bytes of another kernel's entry.
local DAMAGE = {
  { "truncated to half", function(bytes) return bytes:sub(1, math.floor(#bytes / 2)) end },
  { "emptied", function() return "" end },
  { "overwritten with garbage", function(bytes)
      local t = {}
      for i = 1, #bytes do t[i] = string.char((i * 131 + 7) % 256) end
      return table.concat(t)
    end },
  { "with one byte changed", function(bytes)
      local i = math.floor(#bytes / 3)
      return bytes:sub(1, i - 1) .. string.char((bytes:byte(i) + 1) % 256) .. bytes:sub(i + 1)
    end },
  { "without its trailer", function(bytes) return bytes:sub(1, #bytes - 171) end },
  { "replaced by another kernel's entry", function(_, other_entry) return other_entry end },
}

describe("the disk kernel cache", function()
  for _, d in ipairs(DAMAGE) do
    S.native_it("discards an entry " .. d[1] .. ", compiles it again and gives correct results", function()
      local dir = temp_dir()
      T.config.cache_dir = dir
      local ok, err = pcall(function()
        local want1, want2 = fn(x)
        T.compiler.reset()
        compiled_run(other)
        local before = entries(dir)
        T.compiler.reset()
        local _, _, s = compiled_run(fn)
        S.truthy(s.kernels_compiled >= 1 and s.disk_cache_hits == 0, "first run compiles")
        local names = entries(dir)
        S.eq(#names, 2, "cache entries")
        local mine = names[1] == before[1] and names[2] or names[1]
        local other_entry = read(dir .. "/" .. before[1])
        T.compiler.reset()
        collectgarbage()  -- the compiled graphs go, and with them the loaded objects

        write(dir .. "/" .. mine, d[2](read(dir .. "/" .. mine), other_entry))
        local a, b
        a, b, s = compiled_run(fn)
        same(a, want1, "result 1")
        same(b, want2, "result 2")
        S.eq({ s.disk_cache_hits, s.eager_fallbacks }, { 0, 0 }, "disk cache hits, eager fallbacks")
        S.truthy(s.kernels_compiled >= 1, "the entry is compiled again")
        local key = mine:gsub("%.so$", "")
        S.truthy(read(dir .. "/" .. mine):find("crescent%-kernel%-cache%-2 " .. key .. " %x+ %x+\n$"), "the new entry is sealed")
        T.compiler.reset()
        collectgarbage()

        _, _, s = compiled_run(fn)  -- the new entry is good
        S.eq({ s.kernels_compiled, s.eager_fallbacks }, { 0, 0 }, "kernels compiled, eager fallbacks")
        S.truthy(s.disk_cache_hits >= 1, "loaded from the disk cache")
      end)
      T.config.cache_dir = saved.dir
      T.compiler.reset()
      SH.rm(dir)
      if not ok then error(err, 0) end
    end)
  end
end)

T.config.sync_compile, T.config.cache_dir = saved.sync, saved.dir
