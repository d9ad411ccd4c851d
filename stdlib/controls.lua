-- crescent.controls: the everyday settings of the process (API.md section 11) - the CPU threads,
-- tensor printing and a clock. T takes every function of this module.
local ffi = require "ffi"
local core = require "crescent.core"
local api, ctx, fail = core.api, core.ctx, core.fail

local M = {}

local function shown(v)
  if type(v) == "string" then return ("%q"):format(v) end
  if v == nil or type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  return "a " .. type(v)
end
local function whole(v) return type(v) == "number" and v == math.floor(v) and v > -math.huge and v < math.huge end

-- The pool of the CPU kernels (vm/threads.hpp); OpenBLAS runs single-threaded on blocks of a
-- product that this pool shares out, so it follows. CRESCENT_NUM_THREADS sets the first size.
function M.get_num_threads()
  local n = api.num_threads(ctx)
  if n < 0 then core.raise(n) end
  return n
end

-- a bad CRESCENT_NUM_THREADS raises when crescent loads, not at the first parallel op
if (core.setting("CRESCENT_NUM_THREADS") or "") ~= "" then M.get_num_threads() end

function M.set_num_threads(n)
  if not whole(n) then fail("set_num_threads: expected a whole number of threads from 1 to 256, got " .. shown(n)) end
  local rc = api.set_num_threads(ctx, n)
  if rc < 0 then core.raise(rc) end
end

-- T.use_deterministic_algorithms(mode[, {warn_only = false}]), T.are_deterministic_algorithms_enabled(),
-- T.is_deterministic_algorithms_warn_only_enabled(): PyTorch's, for the process (vm/deterministic.hpp).
-- While on, CUDA's scatter-add family sums in a fixed order and CUDA ops without such a path raise
-- (warn once with warn_only); the CPU kernels are deterministic either way.
function M.use_deterministic_algorithms(mode, opts)
  local name = "use_deterministic_algorithms"
  if type(mode) ~= "boolean" then fail(name .. ": argument 1 (mode) expected a boolean, got " .. shown(mode)) end
  if opts ~= nil and type(opts) ~= "table" then fail(name .. ": argument 2 expected an options table, got " .. shown(opts)) end
  for k in pairs(opts or {}) do
    if k ~= "warn_only" then fail(name .. ": unknown option '" .. tostring(k) .. "' (expected warn_only)") end
  end
  local warn_only = (opts or {}).warn_only
  if warn_only ~= nil and type(warn_only) ~= "boolean" then
    fail(name .. ": option warn_only expected a boolean, got " .. shown(warn_only))
  end
  api.deterministic(mode and (warn_only and 2 or 1) or 0)
end
function M.are_deterministic_algorithms_enabled() return api.deterministic(-1) ~= 0 end
function M.is_deterministic_algorithms_warn_only_enabled() return api.deterministic(-1) == 2 end

-- T.set_flush_denormal(mode): PyTorch's, for the process: while true, the CPU kernels read
-- subnormal floats as zero and write zero for subnormal results (x86's DAZ and FTZ), sparing the
-- slow path of the hardware; returns false where the CPU has no such mode (vm/denormal.hpp).
function M.set_flush_denormal(mode)
  if type(mode) ~= "boolean" then
    fail("set_flush_denormal: argument 1 (mode) expected a boolean, got " .. shown(mode))
  end
  return api.flush_denormal(mode and 1 or 0) ~= 0
end

-- T.set_printoptions{precision =, threshold =, edgeitems =, linewidth =, sci_mode =, profile =}:
-- PyTorch's torch.set_printoptions, for the whole process. Options left out keep their value,
-- except sci_mode, which is then chosen from the values again (as PyTorch's None); a profile
-- ("default", "short", "full") sets the others first.
local PROFILES = {
  default = { precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80 },
  short = { precision = 2, threshold = 1000, edgeitems = 2, linewidth = 80 },
  full = { precision = 4, threshold = math.huge, edgeitems = 3, linewidth = 80 },
}
local PRINT_CHECKS = {
  precision = { function(v) return whole(v) and v >= 0 and v <= 60 end, "a whole number from 0 to 60" },
  threshold = { function(v) return v == math.huge or (whole(v) and v >= 0) end, "a non-negative whole number or math.huge" },
  edgeitems = { function(v) return whole(v) and v >= 0 end, "a non-negative whole number" },
  linewidth = { function(v) return whole(v) and v >= 1 and v < 2 ^ 31 end, "a positive whole number" },
  sci_mode = { function(v) return type(v) == "boolean" end, "a boolean (left out: chosen from the values)" },
  profile = { function(v) return PROFILES[v] ~= nil end, '"default", "short" or "full"' },
}
local print_options = { precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80 }

function M.set_printoptions(opts)
  if opts ~= nil and type(opts) ~= "table" then fail("set_printoptions: expected a table of options, got " .. shown(opts)) end
  opts = opts or {}
  for k, v in pairs(opts) do
    local check = PRINT_CHECKS[k]
    if not check then
      fail(("set_printoptions: unknown option %s (expected one of: edgeitems, linewidth, precision, profile, sci_mode, threshold)")
        :format(shown(k)))
    end
    if not check[1](v) then fail(("set_printoptions: %s expected %s, got %s"):format(k, check[2], shown(v))) end
  end
  local o = {}
  for k, v in pairs(print_options) do o[k] = v end
  for k, v in pairs(PROFILES[opts.profile] or {}) do o[k] = v end
  for k in pairs(PROFILES.default) do
    if opts[k] ~= nil then o[k] = opts[k] end
  end
  o.sci_mode = opts.sci_mode
  print_options = o
  core.print_linewidth = o.linewidth  -- (crescent.autograd's suffixes wrap at it too)
  api.set_printoptions(o.precision, o.threshold, o.edgeitems, o.linewidth, o.sci_mode == nil and -1 or o.sci_mode and 1 or 0)
end

-- Seconds on a monotonic wall clock (as Python's time.perf_counter): the difference of two calls
-- is the elapsed time. It does not wait for CUDA work (T.cuda.synchronize() first for that).
function M.time() return api.now_us() / 1e6 end

-- T.memory_stats() -> {in_use =, peak =}: bytes of CPU tensor storage in use now and the most
-- since T.reset_peak_memory() (vm/host_memory.hpp; T.cuda.stats() covers devices). Memory Lua
-- has not collected yet counts: measure after collectgarbage() for what is reachable.
local HOST = ffi.new("double[2]")
function M.memory_stats()
  api.host_memory(0, HOST)
  return { in_use = HOST[0], peak = HOST[1] }
end
function M.reset_peak_memory() api.host_memory(1, HOST) end

return M
