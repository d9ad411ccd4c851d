-- The GPT training step of bench/train_gpt2_bench.lua and bench/ddp_gpt2_bench.lua: the model of
-- examples/models/gpt2.lua with random weights, one step = forward, cross entropy over the next
-- tokens (under T.autocast when asked), backward, AdamW step, zero_grad.
--   local S = require("lib.gpt2_train").new{ config =, batch =, seq =, device =, autocast =,
--     mode = "eager" | "model" | "step", wrap = fn(model) -> module (DDP), data_seed = n,
--     phases = true (CUDA: events between forward, backward and the update) }
--   S.step() -> the loss as a number; S.model, S.cfg; S.phases() -> the device ms of forward,
--   backward and update, averaged over the steps since the last call (phases = true)
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/examples/?.lua;" .. package.path
local G = require "models.gpt2"

local M = {}

function M.new(o)
  local cfg = G.configs[o.config] or error("gpt2_train: config expected one of tiny, small, gpt2, got " .. tostring(o.config))
  local mode = o.mode or "eager"
  if mode ~= "eager" and mode ~= "model" and mode ~= "step" then
    error("gpt2_train: mode expected eager, model or step, got " .. tostring(mode))
  end
  T.manual_seed(0)
  local model = G.new(cfg):to(o.device)
  for _, p in ipairs(model:parameters()) do p:requires_grad_(true) end
  local wrapped = o.wrap and o.wrap(model) or model
  local forward = mode == "model" and T.compile(wrapped) or wrapped
  local opt = T.optim.AdamW(model:parameters(), { lr = 3e-4 })
  if o.data_seed then T.manual_seed(o.data_seed) end
  local B, L = o.batch, o.seq
  local data = T.randint(0, cfg.vocab, { B, L + 1 }):to(o.device)
  local ids, targets = data:narrow(2, 1, L), data:narrow(2, 2, L):reshape(-1) + 1  -- classes 1-based
  local amp_device = o.device:match("^%a+")

  local function loss_of()
    return T.F.cross_entropy(forward(ids):reshape(B * L, cfg.vocab), targets)
  end
  local ev, sums, timed = {}, { 0, 0, 0 }, 0
  local function mark(i)
    if o.phases then ev[i] = ev[i] or T.cuda.Event { enable_timing = true }; ev[i]:record() end
  end
  local function train_step()
    mark(1)
    local loss = o.autocast and T.autocast(amp_device, { dtype = o.autocast }, loss_of) or loss_of()
    mark(2)
    loss:backward()
    mark(3)
    opt:step()
    opt:zero_grad()
    mark(4)
    return loss
  end
  -- after a step: the device time between its events (the last one waited for)
  local function add_phases()
    if not o.phases then return end
    ev[4]:synchronize()
    for i = 1, 3 do sums[i] = sums[i] + ev[i]:elapsed_time(ev[i + 1]) end
    timed = timed + 1
  end
  local function phases()
    local r = { forward = sums[1] / timed, backward = sums[2] / timed, update = sums[3] / timed }
    sums, timed = { 0, 0, 0 }, 0
    return r
  end
  -- mode "step": forward, backward and the optimizer update in one compiled function; the loss's
  -- item() stays outside it (a host sync would end the capture)
  local run = mode == "step" and T.compile(train_step) or train_step
  if o.phases and mode == "step" then
    error("gpt2_train: phases = true needs mode eager or model (a compiled step has no phases)")
  end
  return { model = model, cfg = cfg, phases = phases, step = function()
    local v = run():item()
    add_phases()
    return v
  end }
end

return M
