-- Helpers shared by the Lua benches (bench/torch_common.py is the PyTorch side's twin): wall
-- clock in ms, T.bench's median, a timed loop of calls, the compiler's counters, device memory
-- and one JSON line per run (the side-by-side scripts read them).
--   local B = require "lib.timing"   (after package.path gets "<repo>/bench/?.lua")
local T = require "crescent"
local now = require("crescent.core").api.now_us

local M = {}

function M.now_ms()
  return tonumber(now()) / 1e3
end

-- T.bench's median: element floor((n + 1) / 2) of the sorted values (the lower of two middles)
function M.median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[math.floor((#s + 1) / 2)]
end

-- Calls fn() n times: each call's wall time in ms and the last result; after(i, result) sees each.
function M.time_calls(fn, n, after)
  local times, last = {}, nil
  for i = 1, n do
    local t0 = M.now_ms()
    last = fn()
    times[i] = M.now_ms() - t0
    if after then after(i, last) end
  end
  return times, last
end

-- After `warm` calls (and the compiles they start: M.settle), `reps` timed ones: the median wall
-- time and the process's CPU time per call, in ms (on a loaded machine CPU time compares better).
function M.measure(fn, warm, reps)
  for _ = 1, warm do fn() end
  M.settle(fn, 20)
  local c0 = os.clock()
  local times = M.time_calls(fn, reps)
  return M.median(times), (os.clock() - c0) * 1e3 / reps
end

-- A training loop: `warm` steps, then `steps` timed ones; step() returns the loss as a number
-- (so the step's device work is done). The first loss, the last, and the median step in ms.
function M.train_loop(step, warm, steps)
  local first
  for i = 1, warm do
    local l = step()
    if i == 1 then first = l end
  end
  local times, last = M.time_calls(step, steps)
  return { first_loss = first or last, last_loss = last, step_ms = M.median(times), times = times }
end

-- The compiler's counters that say whether compiles are still landing (graphs of the forward and
-- the backward, background compiles queued or running)
function M.compile_state()
  local s = T.compiler.stats()
  return s.graphs_compiled + s.backward_graphs_compiled + s.recompiles, s.compiles_pending
end

-- Waits for the background compiles, then calls fn until `quiet` calls in a row (default 3) start
-- none, at most `limit` calls: the steady state, as T.bench waits before timing. Returns the
-- calls made and when (M.now_ms) the last call that changed the compiler's state ended. agree
-- (optional): quiet = agree(quiet), the verdict of every rank of a data-parallel run (so all
-- ranks make the same calls).
function M.settle(fn, limit, quiet_n, agree)
  limit, quiet_n = limit or 20, quiet_n or 3
  local run, changed = 0, nil
  for i = 1, limit do
    T.compiler.wait()
    local before = M.compile_state()
    fn()
    local after, pending = M.compile_state()
    local quiet = after == before and pending == 0
    if agree then quiet = agree(quiet) end
    if quiet then
      run = run + 1
    else
      run, changed = 0, M.now_ms()
    end
    if run >= quiet_n then return i, changed end
  end
  return limit, changed
end

-- On a GPU the peak of what the caching allocator held from the driver (against
-- torch.cuda.max_memory_reserved) and the ops run on host copies.
function M.device_memory(device)
  if device == "cpu" then return nil end
  local s = T.cuda.stats(device)
  return { reserved_mib = s.peak_reserved / 2 ^ 20, in_use_mib = s.peak_in_use / 2 ^ 20, host_ops = s.host_ops }
end

local function encode(v)
  local t = type(v)
  if t == "number" then
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
    return string.format("%.4f", v)
  elseif t == "string" then
    return string.format("%q", v)
  elseif t == "boolean" then
    return tostring(v)
  elseif t == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = encode(x) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  return "null"
end

-- One JSON line from a list of {key, value} pairs (in that order; nil values left out).
function M.json(fields)
  local parts = {}
  for _, kv in ipairs(fields) do
    if kv[2] ~= nil then parts[#parts + 1] = string.format("%q: %s", kv[1], encode(kv[2])) end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

return M
