-- Peak CPU tensor storage of a small GPT training step (T.memory_stats), eager or compiled: the
-- peak-memory specs of test_compile_step.lua (T.compile(step), and "model": T.compile(model) in
-- the eager loop). Bytes, never time.
local T = require "crescent"
local ffi = require "ffi"
local root = debug.getinfo(1, "S").source:sub(2):match("^(.*)/tests/lua/") or "."
package.path = root .. "/examples/?.lua;" .. package.path
local G = require "models.gpt2"

local M = {}

local V = 128

-- The model, its optimizer, a batch and the forward (T.compile(model) in mode "model"), seeded.
local function setup(mode)
  T.manual_seed(0)
  local L, B = 64, 4
  local m = G.new({ vocab = V, n_ctx = L, d = 64, n_head = 4, n_layer = 2 })
  local opt = T.optim.AdamW(m:parameters(), { lr = 1e-3 })
  local ids, targets = T.randint(0, V, { B, L }), T.randint(1, V + 1, { B * L })
  return opt, ids, targets, mode == "model" and T.compile(m) or m
end

-- The collections crescent asks for after an op (core.service) are skipped while `held`: when
-- they come depends on time (vm/context.cpp host_garbage_due), and they lowered eager's peak.
local core = require "crescent.core"
local GC_BITS = bit.bnot(bit.bor(ffi.C.CR_SERVICE_GC_FULL, ffi.C.CR_SERVICE_GC_STEP))
local function without_asked_collections(fn)
  local service = core.service
  core.service = function()
    core.ctx.service = bit.band(core.ctx.service, GC_BITS)
    if core.ctx.service ~= 0 then service() end
  end
  local ok, r = pcall(fn)
  core.service = service
  if not ok then error(r, 0) end
  return r
end

-- mode "eager", "model" (T.compile(model) in the eager loop) or "step" (T.compile of the step):
-- the largest rise of the bytes in use over the steps after the third (compiled by then), from a
-- full collection before each step; the last step's loss; and each step's rise. held: Lua's
-- collector stopped during each step, and crescent's asked collections skipped (a compiled call's
-- own full collection at its return still runs), so that where they would have run does not move
-- the eager peak.
function M.peak(mode, steps, held)
  local opt, ids, targets, forward = setup(mode)
  local function step()
    opt:zero_grad()
    local loss = T.F.cross_entropy(forward(ids):view(-1, V), targets)
    loss:backward()
    opt:step()
    return loss
  end
  local run = mode == "step" and T.compile(step) or step
  local peak, loss, each = 0, nil, {}
  for i = 1, steps do
    collectgarbage()
    local before = T.memory_stats().in_use
    T.reset_peak_memory()
    if held then
      collectgarbage("stop")
      loss = without_asked_collections(function() return run():item() end)
    else
      loss = run():item()
    end
    collectgarbage("restart")
    each[i] = T.memory_stats().peak - before
    if i > 3 then peak = math.max(peak, each[i]) end
  end
  return peak, loss, each
end

-- Mode "eager" or "model": each step's backward peak over what was in use before the step, its
-- forward's garbage collected first (so that Lua's collection times do not move it).
function M.backward_peaks(mode, steps)
  local opt, ids, targets, forward = setup(mode)
  local each = {}
  for i = 1, steps do
    collectgarbage()
    local before = T.memory_stats().in_use
    opt:zero_grad()
    local loss = T.F.cross_entropy(forward(ids):view(-1, V), targets)
    collectgarbage()
    T.reset_peak_memory()
    loss:backward()
    each[i] = T.memory_stats().peak - before
    opt:step()
  end
  return each
end

return M
