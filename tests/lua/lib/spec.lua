-- A small spec framework for the Lua tests: describe / it / expect, run by tests/lua/run.lua.
-- Every assertion failure reports the spec's file:line.
local T = require "crescent"
local SH = require "shell"
T.config.sync_compile = true  -- compiles in line: a spec knows which call runs native code

local S = { results = { passed = 0, failed = 0, skipped = 0 }, failures = {} }
local stack = {}

function S.describe(name, fn)
  stack[#stack + 1] = name
  fn()
  stack[#stack] = nil
end

-- CRESCENT_SPEC_FILTER=text runs only the specs whose full name contains it (a plain substring).
local filter = os.getenv("CRESCENT_SPEC_FILTER")
if filter == "" then filter = nil end

function S.it(name, fn)
  local full = table.concat(stack, " > ") .. " > " .. name
  if filter and not full:find(filter, 1, true) then return end
  local ok, err = xpcall(fn, function(e)
    if type(e) == "table" and e.skip then return e end
    return debug.traceback(tostring(e), 2)
  end)
  if ok then
    S.results.passed = S.results.passed + 1
  elseif type(err) == "table" and err.skip then
    S.results.skipped = S.results.skipped + 1
  else
    S.results.failed = S.results.failed + 1
    S.failures[#S.failures + 1] = full .. "\n    " .. tostring(err):gsub("\n", "\n    ")
  end
end

-- Declares which registry ops a spec file tests; run.lua fails if any registry op is
-- covered by no spec file.
S.covered = {}
function S.covers(...)
  for _, name in ipairs({ ... }) do
    if not T._ops[name] then error("covers: '" .. name .. "' is not a registry op", 2) end
    S.covered[name] = true
  end
end

-- The registry coverage check, once every spec file has been loaded: a failure naming the ops
-- that no file covers, else a pass.
function S.check_coverage()
  local missing = {}
  for name in pairs(T._ops) do if not S.covered[name] then missing[#missing + 1] = name end end
  table.sort(missing)
  if #missing > 0 then
    S.results.failed = S.results.failed + 1
    S.failures[#S.failures + 1] = "registry coverage: ops without a spec: " .. table.concat(missing, ", ")
  else
    S.results.passed = S.results.passed + 1
  end
end

S.DTYPES = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }
S.FLOATS = { "float32", "float64", "float16", "bfloat16" }
S.INT = { int32 = true, int64 = true }
S.FLOAT = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

local function plain(s) return (s:gsub("%p", "%%%0")) end
S.plain = plain

-- An error checker for one spec file: errs(fn, op, text...) requires fn to raise an error located
-- in `file` (the caller's line), naming op, and containing every text literally.
function S.error_checker(file)
  local here = plain(file) .. ":%d+: "
  return function(fn, op, ...)
    local pats = { here .. plain(op) .. ": " }
    for _, t in ipairs({ ... }) do pats[#pats + 1] = plain(t) end
    return S.errors(fn, unpack(pats))
  end, here
end

function S.skip(reason) error({ skip = true, reason = reason }, 0) end

-- Specs of native CPU code need libgccjit, loaded at run time. Where it cannot be loaded (the GPU
-- host has none) they skip; with CRESCENT_REQUIRE_NATIVE_CPU=1 (scripts/test.sh sets it, and CI
-- runs that) its absence fails them instead, so a broken install cannot pass as skips.
function S.need_native_cpu()
  local ok, why = T.compiler.native_available("cpu")
  if ok then return end
  if os.getenv("CRESCENT_REQUIRE_NATIVE_CPU") == "1" then
    error("native CPU code is required (CRESCENT_REQUIRE_NATIVE_CPU=1) but not available: " .. why, 2)
  end
  S.skip("native CPU code is not available: " .. why)
end
-- skips the spec where no CUDA device is present
function S.need_gpu()
  if not T.cuda.is_available() then S.skip("no CUDA device: " .. T.cuda.unavailable_reason()) end
end
-- it(), for a spec that needs native CPU code
function S.native_it(name, fn)
  S.it(name, function(...)
    S.need_native_cpu()
    return fn(...)
  end)
end

local function fmt(v)
  if T.is_tensor(v) then return tostring(v) end
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = fmt(x) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end
S.fmt = fmt

local function deep_eq(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b or (a ~= a and b ~= b) end
  if #a ~= #b then return false end
  for i = 1, #a do if not deep_eq(a[i], b[i]) then return false end end
  for k, v in pairs(a) do if type(k) ~= "number" and not deep_eq(v, b[k]) then return false end end
  return true
end
S.deep_eq = deep_eq

function S.eq(a, b, msg)
  if not deep_eq(a, b) then error((msg or "values differ") .. ": expected " .. fmt(b) .. ", got " .. fmt(a), 2) end
end

function S.truthy(v, msg) if not v then error(msg or "expected a true value", 2) end end

-- Raises unless fn errors with a message matching every given Lua pattern.
function S.errors(fn, ...)
  local ok, err = pcall(fn)
  if ok then error("expected an error, got none", 2) end
  err = tostring(err)
  for _, pat in ipairs({ ... }) do
    if not err:find(pat) then error(string.format("error message %q does not match %q", err, pat), 2) end
  end
  return err
end

function S.pack(...) return { n = select("#", ...), ... } end

-- Plain Lua values for exact comparison: a tensor becomes its dtype, shape, strides and values
-- (tables are copied, cycles kept).
function S.snapshot(v, seen)
  seen = seen or {}
  if T.is_tensor(v) then return { tensor = v.dtype, shape = v.shape, strides = v:stride(), data = v:totable() } end
  if type(v) ~= "table" then return v end
  if seen[v] then return seen[v] end
  local out = {}
  seen[v] = out
  for k, x in pairs(v) do out[k] = S.snapshot(x, seen) end
  return out
end

-- The first place two snapshots differ, strictly: every key of both sides (in sorted order),
-- numbers bitwise (NaN == NaN, 0 ~= -0). Returns path, a's value, b's value; nil when equal.
function S.first_difference(a, b, path, tol)
  path = path or ""
  if type(a) ~= type(b) then return path, a, b end
  if type(a) == "number" then
    if (a ~= a and b ~= b) or (a == b and (a ~= 0 or 1 / a == 1 / b)) then return nil end
    if tol and math.abs(a - b) <= tol[2] + tol[1] * math.abs(b) then return nil end
    return path, a, b
  end
  if type(a) ~= "table" then
    if a ~= b then return path, a, b end
    return nil
  end
  local keys = {}
  for k in pairs(a) do keys[#keys + 1] = k end
  for k in pairs(b) do if a[k] == nil then keys[#keys + 1] = k end end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  for _, k in ipairs(keys) do
    local p, x, y = S.first_difference(a[k], b[k], path .. "." .. tostring(k), tol)
    if p then return p, x, y end
  end
end

-- Compares a tensor with a tensor or nested table elementwise, |a-b| <= atol + rtol*|b|, NaNs
-- equal, same shape. Default tolerances fit the tensor's dtype.
local default_tol = {
  float32 = { 1e-5, 1e-6 }, float64 = { 1e-12, 1e-13 }, float16 = { 1e-2, 1e-3 }, bfloat16 = { 1e-2, 1e-2 },
  int32 = { 0, 0 }, int64 = { 0, 0 }, bool = { 0, 0 },
}
-- Large numeric tensors compare by tensor ops in float64 on the CPU, the walk's test and its
-- message for the first element that fails (walking a table of millions takes seconds).
local function close_tensors(got, want, rtol, atol, what)
  local a, b = got:cpu():double():flatten(), want:cpu():double():flatten()
  local bad = a:ne(b):logical_and(a:isnan():logical_and(b:isnan()):logical_not())
  bad = bad:logical_and((a - b):abs():le(b:abs() * rtol + atol):logical_not())
  if not bad:any():item() then return end
  local at = T.nonzero(bad):view(-1):narrow(1, 1, 1):item()
  local shape, idx, rest = got.shape, {}, at - 1
  for d = #shape, 1, -1 do
    idx[d] = rest % shape[d] + 1
    rest = math.floor(rest / shape[d])
  end
  error(string.format("%sat x[%s]: got %.10g, expected %.10g (rtol %g, atol %g)", what and what .. ": " or "",
    table.concat(idx, "]["), a:narrow(1, at, 1):item(), b:narrow(1, at, 1):item(), rtol, atol), 3)
end

function S.close(got, want, rtol, atol, what)
  assert(T.is_tensor(got), "close: first argument must be a tensor, got " .. type(got))
  local tol = default_tol[got.dtype]
  rtol, atol = rtol or tol[1], atol or tol[2]
  if T.is_tensor(want) and got:numel() > 1024 and got.dtype ~= "bool" and want.dtype ~= "bool" then
    if not deep_eq(got.shape, want.shape) then
      error(string.format("shape %s, expected %s", fmt(got.shape), fmt(want.shape)), 2)
    end
    return close_tensors(got, want, rtol, atol, what)
  end
  local wshape
  if T.is_tensor(want) then wshape = want.shape; want = want:totable()
  end
  local g = got:totable()
  if wshape and not deep_eq(got.shape, wshape) then
    error(string.format("shape %s, expected %s", fmt(got.shape), fmt(wshape)), 2)
  end
  local function cmp(a, b, path)
    if type(b) == "table" then
      if type(a) ~= "table" or #a ~= #b then error(string.format("shape mismatch at %s", path), 3) end
      for i = 1, #b do cmp(a[i], b[i], path .. "[" .. i .. "]") end
      return
    end
    if type(b) == "boolean" or type(a) == "boolean" then
      if a ~= b then error(string.format("at %s: got %s, expected %s", path, tostring(a), tostring(b)), 3) end
      return
    end
    if a ~= a and b ~= b then return end
    if a == b then return end
    if a ~= a or b ~= b or math.abs(a - b) > atol + rtol * math.abs(b) then
      error(string.format("at %s: got %.10g, expected %.10g (rtol %g, atol %g)", path, a, b, rtol, atol), 3)
    end
  end
  cmp(g, want, "x")
end

-- The crescent executable for a spec that starts one; the spec skips where it is unknown.
function S.need_bin()
  local b = SH.crescent_bin()
  if not b then S.skip("the crescent executable is unknown (set CRESCENT_BIN)") end
  return b
end

-- SH.crescent(args, opts) (shell.lua) for a spec: skips where the executable is unknown.
function S.crescent(args, opts)
  S.need_bin()
  return SH.crescent(args, opts)
end

-- With T.config.sync_compile = false, a compiled function gives its eager results while its
-- kernels compile on the background thread, then runs them: a few calls, T.compiler.wait(),
-- then 21 calls that must run native code. `device(t)` moves an input where the graph runs;
-- `compare(got, want, what)` checks one result.
function S.background_compile(device, compare)
  local function arrived() local s = T.compiler.stats() return s.kernels_compiled + s.disk_cache_hits > 0 end
  T.config.sync_compile = false
  local ok, err = pcall(function()
    local fn = function(x, y) return ((x * 1.8125 - y):sigmoid() * y):sum(2), x:amax(1) + 0.4375 end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    local function call(i)
      T.manual_seed(60 + i % 5)
      local x, y = T.randn(8, 16), T.randn(8, 16)
      local w1, w2 = fn(x, y)
      local g1, g2 = f(device(x), device(y))
      compare(g1, w1, "call " .. i .. " sum")
      compare(g2, w2, "call " .. i .. " amax")
    end
    for i = 1, 3 do call(i) end
    T.compiler.wait(f)
    call(4)  -- (a compile's outcome is counted when its graph next runs)
    S.truthy(arrived(), "no kernel compiled once the background compiles were done")
    for i = 5, 24 do call(i) end
    S.eq(T.compiler.stats().eager_fallbacks, 0, "eager fallbacks")
  end)
  T.config.sync_compile = true
  if not ok then error(err, 0) end
end

return S
