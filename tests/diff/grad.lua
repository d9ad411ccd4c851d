-- The gradient mode of the differential test (tests/diff/diff_torch.lua). For every recipe whose
-- op has a derivative rule, a case's floating inputs require grad (their bases: the layout
-- chain runs after), the op runs eagerly, and the gradients of a fixed scalar function of its
-- results, L = sum_k sum(result_k * W_k) with W_k[i] = cos(0.7 i + k) (k from 0, over the
-- floating results that require grad), w.r.t. every floating input are compared with PyTorch's
-- (tests/torch_bridge/crescent_ops.py grads). An unused input's gradient is zeros on both sides. An in-place op
-- works on a clone of its target (an in-place op on a view of a leaf raises in both).
local T = require "crescent"
local core = require "crescent.core"
local G = require "gen"
local C = require "compare"

local M = {}

-- floating dtypes by precision (the gradients of a float32 computation on float64 inputs are
-- compared with float32's tolerance)
local FLOATING = { bfloat16 = 1, float16 = 2, float32 = 3, float64 = 4 }
local function coarser(a, b) return (not a or FLOATING[b] < FLOATING[a]) and b or a end

-- The registry's derivative status of op name: true where it has a rule.
local RULE
function M.has_rule(name)
  if not RULE then
    RULE = {}
    for id = 0, core.api.op_count - 1 do
      RULE[core.ffi.string(core.api.op_info(id).name)] = core.api.autograd.status(id) == 1
    end
  end
  return RULE[name] == true
end

local function differentiable_inputs(case)
  local n = 0
  for _, input in ipairs(case.inputs) do if FLOATING[input.dtype] then n = n + 1 end end
  return n
end

-- Up to per_op cases for each op of `ops` with a rule (keys g1, g2, ...); a case with no floating
-- input gets five more tries at other inputs. make(name, i, attempt) builds a recipe's case.
function M.make_cases(ops, per_op, make)
  local cases = {}
  for _, name in ipairs(ops) do
    if M.has_rule(name) then
      for _ = 1, per_op do
        for attempt = 0, 5 do
          local c = make(name, 1000000 + #cases + 1, attempt)
          if differentiable_inputs(c) > 0 then
            c.key, c.grad, c.target = "g" .. #cases + 1, true, c.extra.inplace and c.extra.inplace.input
            c.py_setup, c.expr = M.python_setup(c), M.python_expr(c)
            c.extra = {}  -- (no base to compare after the call)
            cases[#cases + 1] = c
            break
          end
        end
      end
    end
  end
  return cases
end

-- ---- crescent ----------------------------------------------------------------------------------------

local function weights(y, k)
  local n = y:numel()
  local w = T.cos(T.arange(0, n, { dtype = "float64", device = y.device }) * 0.7 + k)
  return w:to(y.dtype):reshape(y.shape)
end

local function tensor_list(...)
  local n, list = select("#", ...), { ... }
  if n == 1 and type(list[1]) == "table" and not T.is_tensor(list[1]) then return list[1] end
  return list
end

-- { results = gradient snapshots, one per floating input, tol = the coarsest floating dtype's
-- tolerance among the inputs and results } or { error = message }
function M.run(case)
  local coarsest
  local ok, res = pcall(function()
    local I, leaves = {}, {}
    for _, input in ipairs(case.inputs) do
      local x = G.base_tensor(input)
      if case.device ~= "cpu" then x = x:to(case.device) end
      if FLOATING[input.dtype] then leaves[#leaves + 1], coarsest = x:requires_grad_(), coarser(coarsest, input.dtype) end
      for i = #input.chain, 1, -1 do x = input.chain[i].lua(x) end
      if input == case.target then x = x:clone() end
      I[input.name] = x
    end
    local total
    for k, y in ipairs(tensor_list(case.call(I))) do
      if T.is_tensor(y) and FLOATING[y.dtype] and y.requires_grad then
        local t = (y * weights(y, k - 1)):sum()
        coarsest = coarser(coarsest, y.dtype)
        total = total and total + t or t
      end
    end
    if not total then error("no differentiable result", 0) end
    local gs = T.autograd.grad(total, leaves, nil, { allow_unused = true })
    local out = {}
    for i, leaf in ipairs(leaves) do out[i] = C.snapshot(gs[i] or T.zeros_like(leaf)) end
    return out
  end)
  if not ok then return { error = tostring(res) } end
  return { results = res, tol = C.TOL[coarsest] }
end

-- ---- torch ---------------------------------------------------------------------------------------------

function M.python_setup(case)
  local lines, target = {}, case.target
  for _, input in ipairs(case.inputs) do
    local e = input.name .. "_base"
    lines[#lines + 1] = ("%s = L(%q)%s"):format(e, case.key .. "." .. input.name,
      FLOATING[input.dtype] and ".requires_grad_()" or "")
    for i = #input.chain, 1, -1 do e = input.chain[i].py(e) end
    lines[#lines + 1] = ("%s = %s%s"):format(input.name, e, input == target and ".clone()" or "")
  end
  return table.concat(lines, "; ")
end

function M.python_expr(case)
  local leaves = {}
  for _, input in ipairs(case.inputs) do
    if FLOATING[input.dtype] then leaves[#leaves + 1] = input.name .. "_base" end
  end
  return ("grads(lambda: (%s), [%s])"):format(case.expr, table.concat(leaves, ", "))
end

-- ---- judging ---------------------------------------------------------------------------------------------

-- The findings of a gradient case, as diff_torch.lua's judge gives them (mode "grad"). Gradients
-- are sums: the tolerance scales with the inputs as a reduction's does.
function M.judge(case, run, want, excuse)
  if want.crashed then return { { modes = "grad", kind = "crashed", msg = want.crashed, class = "torch-crash" } } end
  local ins = {}
  for i, input in ipairs(case.inputs) do ins[i] = C.snapshot(G.base_tensor(input)) end
  local kind, msg = C.compare(run, want, C.reduce_scale(ins), false, run.tol)
  if not kind then return {} end
  msg = "gradient: " .. msg
  local e = excuse(case, kind, msg)
  return { { modes = "grad", kind = kind, msg = msg, class = e and e.class or "mismatch", why = e and e.why } }
end

return M
