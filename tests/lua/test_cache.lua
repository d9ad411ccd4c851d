-- The disk kernel cache as a whole: T.config.cache_max_mb bounds it, least recently used entries
-- going first; `crescent --cache-info` / `--cache-clear`; the test suite never uses the user's
-- home cache (tests/CMakeLists.txt gives every test CRESCENT_CACHE_DIR).
local T = require "crescent"
local S = expect
local SH = require "shell"

local saved = { sync = T.config.sync_compile, dir = T.config.cache_dir, max = T.config.cache_max_mb }
T.config.sync_compile = true

local x = T.arange(12):float():view(3, 4) / 7
local FNS = {  -- one cache entry each, of similar sizes
  a = function(v) return (v * 1.25 + 0.5):tanh() end,
  b = function(v) return (v * 1.75 - 0.5):sigmoid() end,
  c = function(v) return (v * 2.25 + 1.5):exp() end,
}
local function entries(dir) return SH.ls(dir, "^%x+%.so$") end
local function size(path) return #SH.read(path) end
-- compiles fn afresh (nothing of it in memory) and runs it as native code
local function run(fn)
  T.compiler.reset()
  collectgarbage()
  local c = T.compile(fn, { hot = 0 })
  for _ = 1, 2 do c(x) end
  return T.compiler.stats()
end
-- the entry that `step()` adds to dir
local function added(dir, step)
  local before = {}
  for _, n in ipairs(entries(dir)) do before[n] = true end
  step()
  for _, n in ipairs(entries(dir)) do
    if not before[n] then return n end
  end
  error("no new cache entry", 2)
end

local function with_cache(fn)
  SH.with_dir(function(dir)
    T.config.cache_dir = dir
    local ok, err = pcall(fn, dir)
    T.config.cache_dir, T.config.cache_max_mb = saved.dir, saved.max
    T.compiler.reset()
    if not ok then error(err, 0) end
  end)
end

describe("T.config.cache_max_mb", function()
  it("defaults to 1024 MB and takes only a positive number", function()
    if not os.getenv("CRESCENT_CACHE_MAX_MB") then S.eq(saved.max, 1024) end
    for _, bad in ipairs({ 0, -1, "10", 1 / 0, false }) do
      S.errors(function() T.config.cache_max_mb = bad end, "config: cache_max_mb expected a positive number of MB, got")
    end
    S.eq(T.config.cache_max_mb, saved.max, "unchanged by the bad values")
  end)
  it("rejects a bad CRESCENT_CACHE_MAX_MB naming what it expects", function()
    local _, err, status = S.crescent({ "-e", "print(1)" }, { env = "CRESCENT_CACHE_MAX_MB=abc" })
    S.eq(status, 1)
    S.truthy(err:find('CRESCENT_CACHE_MAX_MB: expected a positive number of MB, got "abc"', 1, true), err)
  end)
  S.native_it("evicts the least recently used entries past the bound, never the new one", function()
    with_cache(function(dir)
      local a = added(dir, function() run(FNS.a) end)
      local b = added(dir, function() run(FNS.b) end)
      local biggest = math.max(size(dir .. "/" .. a), size(dir .. "/" .. b))
      T.config.cache_max_mb = 2.5 * biggest / 2 ^ 20  -- two entries fit, not three
      local s = run(FNS.a)  -- a from the disk: now the most recently used
      S.eq({ s.disk_cache_hits, s.kernels_compiled }, { 1, 0 }, "a: disk cache hits, kernels compiled")
      local c = added(dir, function() run(FNS.c) end)
      local left = entries(dir)
      table.sort(left)
      local want = { a, c }
      table.sort(want)
      S.eq(left, want, "entries left (b was the least recently used)")
      T.config.cache_max_mb = 1e-6  -- smaller than any entry: the new one still stays
      local b2 = added(dir, function() run(FNS.b) end)
      S.eq(entries(dir), { b2 }, "entries left under a bound below one entry")
      S.eq(b2, b, "the same key again")
    end)
  end)
end)

describe("crescent --cache-info / --cache-clear", function()
  S.native_it("report and remove the entries of CRESCENT_CACHE_DIR, nothing else", function()
    with_cache(function(dir)
      run(FNS.a)
      run(FNS.b)
      SH.write(dir .. "/notes.txt", "not an entry")
      local env = "CRESCENT_CACHE_DIR=" .. SH.quote(dir)
      local out, err, status = S.crescent({ "--cache-info" }, { env = env })
      S.eq(status, 0, err)
      S.truthy(out:find("kernel cache " .. dir .. "\n2 entries, [%d.]+ MB %(bound 1024 MB"), out)
      out, err, status = S.crescent({ "--cache-clear" }, { env = env })
      S.eq(status, 0, err)
      S.truthy(out:find("removed 2 entries"), out)
      S.eq(SH.ls(dir), { "notes.txt" })
      out = S.crescent({ "--cache-info" }, { env = "CRESCENT_CACHE_DIR=" .. SH.quote(dir .. "/none") })
      S.truthy(out:find("(no such directory yet)\n0 entries", 1, true), out)
    end)
  end)
  it("fails clearly when the directory is a file", function()
    local _, err, status = S.crescent({ "--cache-clear" }, { env = "CRESCENT_CACHE_DIR=/dev/null" })
    S.eq(status, 1)
    S.truthy(err:find("the kernel cache directory /dev/null is not a directory", 1, true), err)
  end)
end)

describe("a cache directory that cannot take entries", function()
  S.native_it("is said once on stderr; the compiled code still runs", function()
    SH.with_dir(function(dir)
      local file = dir .. "/a-file"
      SH.write(file, "not a directory")
      local script = [[
local T = crescent
T.config.sync_compile = true
local v = T.randn(8)
for _, k in ipairs({ 3, 5 }) do
  local f = T.compile(function(x) return (x * k + 1):tanh() end, { hot = 0 })
  for _ = 1, 2 do assert((f(v) - (v * k + 1):tanh()):abs():max():item() == 0) end
end
print("kernels " .. T.compiler.stats().kernels_compiled)]]
      local out, err, status = S.crescent({}, { script = script, env = "CRESCENT_CACHE_DIR=" .. SH.quote(file) })
      S.eq({ out, status }, { "kernels 2\n", 0 }, err)
      local warning = "crescent: warning: the kernel cache " .. file .. " cannot take compiled kernels (Not a directory)"
      local first = err:find(warning, 1, true)
      S.truthy(first and not err:find(warning, first + 1, true), "one warning: " .. err)
    end)
  end)
end)

describe("the test suite", function()
  it("keeps its kernel cache out of the user's home", function()
    local home = os.getenv("HOME")
    if not home or home == "" then S.skip("HOME is not set") end
    S.truthy(saved.dir ~= home .. "/.cache/crescent", "the tests use the user's cache " .. saved.dir)
  end)
end)

T.config.sync_compile = saved.sync
