-- A differential fuzzer for compiled autograd (issue 35): the random programs of the compile
-- fuzzer (tests/lua/lib/fuzz_gen.lua) with their floating inputs requiring grad and a scalar loss
-- of their floating results (each weighted by a fixed tensor), in two forms:
--   - module: T.compile(program), the loss and T.autograd.grad outside it (the segments' backward
--     graphs, run by the engine through their CompiledFunctionBackward nodes);
--   - step: loss:backward() inside T.compile (traced into the graph, vm/graph/step.cpp).
-- Each is run eagerly and compiled on the program's calls; the losses and the inputs' gradients
-- must agree (floats within 1e-4 relative), or both raise. The inputs reach the program through
-- `* 1` (its in-place writes then hit no leaf). CRESCENT_GRAD_FUZZ_PROGRAMS=n (default 60, the CI
-- budget; a long run sets more), CRESCENT_GRAD_FUZZ_SEED=s other programs, CRESCENT_GRAD_FUZZ_ONLY=i
-- program i alone, CRESCENT_GRAD_FUZZ_DUMP=1 prints each program, CRESCENT_GRAD_FUZZ_VERBOSE=1
-- each difference and each call only one side raised on (accepted: see run_program).
local T = require "crescent"
local FG = require "fuzz_gen"
local S = expect

local SEED = tonumber(os.getenv("CRESCENT_GRAD_FUZZ_SEED") or "") or 20261203
local PROGRAMS = tonumber(os.getenv("CRESCENT_GRAD_FUZZ_PROGRAMS") or "") or 60
local ONLY = tonumber(os.getenv("CRESCENT_GRAD_FUZZ_ONLY") or "")
local DUMP = os.getenv("CRESCENT_GRAD_FUZZ_DUMP") == "1"
local VERBOSE = os.getenv("CRESCENT_GRAD_FUZZ_VERBOSE") == "1"
local FLOATING = { float32 = true, float64 = true }

local function program(index)
  return FG.program(bit.bxor(bit.tobit(SEED * 7919), bit.tobit(index * 0x9E3779B1)))
end

-- The floating tensors requiring grad among a call's results (in tables too), in order.
local function differentiable(v, out, seen)
  if T.is_tensor(v) then
    if FLOATING[v.dtype] and v.requires_grad then out[#out + 1] = v end
  elseif type(v) == "table" and not seen[v] then
    seen[v] = true
    for i = 1, v.n or #v do differentiable(v[i], out, seen) end  -- results hold nils: # is any border
    if v.key ~= nil then differentiable(v.key, out, seen) end
  end
  return out
end

-- sum of (r * w):sum() over those results, w a fixed function of r's shape; nil without any.
local function loss_of(rets)
  local loss
  for _, r in ipairs(differentiable(rets, {}, {})) do
    local w = T.arange(r:numel(), { dtype = r.dtype }):mul(0.37):cos():reshape(r.shape)
    local term = (r * w):sum():double()
    loss = loss and loss + term or term
  end
  return loss
end

-- A tensor's text names its grad_fn, a compiled segment's node (CompiledFunctionBackward) where
-- eager has the op's: the programs read their tensors' text without it.
local ENV = setmetatable({
  tostring = function(v) return T.is_tensor(v) and (tostring(v):gsub(", grad_fn=<%w+>", "")) or tostring(v) end,
}, { __index = _G })

-- The program's function for one form: module returns the results, step returns the loss after
-- its backward() (nil without one).
local function body(prog, form)
  local fn = setfenv(loadstring(FG.source(prog), "=fuzz"), ENV)()(T, {})
  return function(x, y, z, k)
    local function through(v) return T.is_tensor(v) and v.requires_grad and v * 1 or v end
    local rets = S.pack(fn(through(x), through(y), through(z), k))
    if form == "module" then return rets end
    local loss = loss_of(rets)
    if loss then loss:backward() end
    return loss
  end
end

-- One call: the inputs (floating ones leaves requiring grad), then what to compare: the loss and
-- the gradients, or the error.
local function call_once(f, prog, form, call)
  local a = S.pack(loadstring(prog.args_src, "=args")()(T, call))
  local leaves = {}
  for i = 1, 3 do
    if T.is_tensor(a[i]) and FLOATING[a[i].dtype] and a[i].is_leaf then
      a[i] = a[i]:requires_grad_(true)
      leaves[#leaves + 1] = a[i]
    end
  end
  local ok, r = pcall(function()
    local out = f(unpack(a, 1, a.n))
    local loss, grads = out, {}
    if form == "module" then
      loss = loss_of(out)
      if loss and #leaves > 0 then grads = T.autograd.grad({ loss }, leaves, nil, { allow_unused = true }) end
    else
      for i, l in ipairs(leaves) do grads[i] = l.grad end
    end
    for i = 1, #leaves do grads[i] = grads[i] or "none" end
    return { loss = loss or "none", grads = grads }
  end)
  if not ok then return { error = tostring(r) } end
  return S.snapshot(r)
end

-- Whether a call where only one side raised is accepted: eager refusing what compiled autograd
-- differentiates (a value saved for backward and then written in place, which a compiled graph
-- functionalises); compiled autograd refusing, saying why (one node per segment checks every
-- value and input it saved or reads, where eager's engine checks those of the nodes the loss
-- reaches), or a path not implemented.
local function accepted(got, want)
  if want.error then return true end
  local e = got.error
  return e:find("saved by CompiledFunctionBackward", 1, true) or e:find("not implemented", 1, true)
    or (e:find("modified by an inplace operation", 1, true) and e:find(", an input of ", 1, true))
end

-- nil, or where the compiled run differs from the eager one; and the last one-sided error
local function run_program(prog, form)
  local fe = body(prog, form)
  local fc = T.compile(body(prog, form), prog.opts[2])
  local refused
  for call = 1, prog.plan.calls do
    local want, got = call_once(fe, prog, form, call), call_once(fc, prog, form, call)
    if want.error and got.error then
      want.error, got.error = true, true
    elseif (want.error or got.error) and accepted(got, want) then
      refused = want.error or got.error
      want, got = {}, {}
    end
    local p, x, y = S.first_difference(got, want, "", { 1e-4, 1e-5 })
    if p then return ("call %d, at %s: compiled %s, eager %s"):format(call, p, S.fmt(x), S.fmt(y)), refused end
  end
  return nil, refused
end

describe("compiled autograd fuzzing: gradients of random programs, compiled == eager", function()
  for _, form in ipairs({ "module", "step" }) do
    it(("%d programs, the %s form (seed %d)"):format(ONLY and 1 or PROGRAMS, form, SEED), function()
      local failures = {}
      for index = ONLY or 1, ONLY or PROGRAMS do
        local prog = program(index)
        if DUMP then print(("-- program %d, options %s\n%s"):format(index, prog.opts[1], FG.source(prog))) end
        T.compiler.reset()
        local ok, f, refused = pcall(run_program, prog, form)
        if refused and VERBOSE then print(index, form, "one side raised:", refused) end
        if not ok then f = "raised outside the program: " .. tostring(f) end
        if f and VERBOSE then print(index, form, prog.opts[1], f) end
        if f then
          failures[#failures + 1] = ("program %d (CRESCENT_GRAD_FUZZ_SEED=%d CRESCENT_GRAD_FUZZ_ONLY=%d), options %s: %s\n%s")
            :format(index, SEED, index, prog.opts[1], f, FG.source(prog))
        end
      end
      S.truthy(#failures == 0, ("%d of %d programs differ; the first:\n%s"):format(#failures, ONLY and 1 or PROGRAMS,
        failures[1] or ""))
    end)
  end
end)
