-- crescent.gradcheck: T.autograd.gradcheck(fn, inputs[, {eps =, atol =, rtol =}]) compares the
-- Jacobian autograd computes (one backward per output element) with central differences in
-- float64 (inputs perturbed in place), with PyTorch's default tolerances.
local core = require "crescent.core"
local ffi = core.ffi
local fail, is_tensor = core.fail, core.is_tensor
local unpack = unpack or table.unpack

local M = {}

-- the floating tensors among fn's results (also inside tables), in order
local function floats(list, out)
  out = out or {}
  for i = 1, list.n or #list do
    local v = list[i]
    if is_tensor(v) then
      local d = v.dtype
      if d == "float64" or d == "float32" or d == "float16" or d == "bfloat16" then out[#out + 1] = v end
    elseif type(v) == "table" then
      floats(v, out)
    end
  end
  return out
end

local function values(t)
  if t:numel() == 0 then return {} end
  local v = t:reshape(t:numel()):totable()
  return type(v) == "table" and v or { v }
end

local pack = core.pack
local function call(fn, inputs) return floats(pack(fn(unpack(inputs, 1, inputs.n)))) end
-- the values of fn's float results now (a result may be a view of an input about to change)
local function call_values(fn, inputs)
  local outs = call(fn, inputs)
  for o = 1, #outs do outs[o] = values(outs[o]) end
  return outs
end

-- element j (0-based, row-major) of x's storage, as a double*
local function element(x, j)
  local shape, stride, off = x.shape, x:stride(), 0
  for d = #shape, 1, -1 do
    off = off + (j % shape[d]) * stride[d]
    j = math.floor(j / shape[d])
  end
  return ffi.cast("double*", x:data_ptr()) + off
end

local function numerical(T, fn, inputs, x, eps)
  local cols = {}  -- cols[j][o] = list of d(out o)/d(x_j) per output element
  for j = 0, x:numel() - 1 do
    local p = element(x, j)
    local orig = p[0]
    p[0] = orig + eps
    local plus = call_values(fn, inputs)
    p = element(x, j)
    p[0] = orig - eps
    local minus = call_values(fn, inputs)
    p = element(x, j)
    p[0] = orig
    local col = {}
    for o = 1, #plus do
      local a, b = plus[o], minus[o]
      local d = {}
      for e = 1, #a do d[e] = (a[e] - b[e]) / (2 * eps) end
      col[o] = d
    end
    cols[j + 1] = col
  end
  return cols
end

local function analytical(T, outs, diff)
  local rows = {}  -- rows[o][e][i] = gradient of out o's element e wrt input i (flat values)
  for o, out in ipairs(outs) do
    rows[o] = {}
    for e = 1, out:numel() do
      local go = T.zeros_like(out)
      go:view(out:numel())[e] = 1
      local gs = out.requires_grad and T.autograd.grad({ out }, diff, { go }, { retain_graph = true, allow_unused = true }) or {}
      local r = {}
      for i = 1, #diff do r[i] = gs[i] and values(gs[i]) or nil end
      rows[o][e] = r
    end
  end
  return rows
end

function M.gradcheck(fn, inputs, opts)
  local T = require "crescent"
  if type(inputs) ~= "table" or is_tensor(inputs) then inputs = { inputs } end
  inputs.n = inputs.n or #inputs
  opts = opts or {}
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  local diff = {}
  for i = 1, inputs.n do
    local x = inputs[i]
    if is_tensor(x) and x.requires_grad then
      if x.dtype ~= "float64" or x.device ~= "cpu" then
        fail(string.format("gradcheck: input %d expected a float64 CPU tensor, got %s on %s", i, x.dtype, x.device))
      end
      diff[#diff + 1] = x
    end
  end
  if #diff == 0 then fail("gradcheck: no input requires grad") end
  local outs = call(fn, inputs)
  local rows = analytical(T, outs, diff)
  local worst
  for i, x in ipairs(diff) do
    local cols = numerical(T, fn, inputs, x, eps)
    for o = 1, #outs do
      for e = 1, outs[o]:numel() do
        local a_row = rows[o][e][i]
        for j = 1, x:numel() do
          local n = cols[j][o][e]
          local a = a_row and a_row[j] or 0
          local err = math.abs(a - n) - (atol + rtol * math.abs(n))
          local nan_mismatch = (a ~= a) ~= (n ~= n)
          if err > 0 or nan_mismatch then
            if not worst or err > worst.err then worst = { err = err, i = i, o = o, e = e, j = j, a = a, n = n } end
          end
        end
      end
    end
  end
  if worst then
    fail(string.format("gradcheck: Jacobian mismatch for output %d with respect to input %d: element (%d, %d): " ..
      "numerical %.10g, analytical %.10g", worst.o, worst.i, worst.e, worst.j, worst.n, worst.a))
  end
  return true
end

return M
