-- crescent.indexing: PyTorch's indexing in Lua form (API.md section 10). x:index(list) takes one
-- entry per dim: T.all (the whole dim), a number (select), a {start, stop[, step]} range
-- (slice: 1-based, inclusive stop), an int64 / int32 index tensor or a bool mask (covering as
-- many dims as it has). Numbers and ranges are views; index tensors select as PyTorch's
-- advanced indexing: they broadcast together, and their shape goes where they stand when they
-- are adjacent, else in front. Masks become index tensors through nonzero (a graph break in
-- compiled functions); x[idx] and x[mask] are x:index({idx}) and x:index({mask}).
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local M = {}
-- T.all marks a whole dim: it is the reduction T.all itself (a function is no other entry)
local full, all, index, index_put_  -- registry ops, bound by M.bind
function M.bind(ops) full, all, index, index_put_ = ops.full.fn, ops.all.fn, ops.index.fn, ops.index_put_.fn end

local function describe(v)
  if is_tensor(v) then return v.dtype .. " tensor of shape " .. v:_shape_str() end
  return type(v)
end

local function check_index_tensor(op, t)
  local d = t.dtype
  if d ~= "int64" and d ~= "int32" and d ~= "bool" then
    fail(string.format("%s: tensors used as indices must be int64, int32 or bool tensors, got %s", op, describe(t)))
  end
end

local function broadcast(a, b)
  local r, na, nb = {}, #a, #b
  local n = math.max(na, nb)
  for i = 1, n do
    local x, y = a[na - n + i] or 1, b[nb - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      fail(string.format("index: shape mismatch: indexing tensors could not be broadcast together with shapes {%s} and {%s}",
        table.concat(a, ","), table.concat(b, ",")))
    end
    r[i] = x == 1 and y or x
  end
  return r
end

-- Applies the basic entries (views) and collects the advanced ones: returns the view v, the
-- 0-based dims of v the index tensors stand for, and the tensors (int64 / int32).
local function resolve(op, x, list)
  if type(list) ~= "table" or is_tensor(list) then
    fail(string.format("%s: expected a list of per-dim entries (T.all, numbers, ranges, tensors), got %s", op, describe(list)))
  end
  local v, d, dims, idx = x, 0, {}, {}
  local n = #list
  for i = 1, n do
    local e = list[i]
    local nd = v:dim()
    if is_tensor(e) then
      check_index_tensor(op, e)
      if e.dtype == "bool" and e:dim() == 0 then  -- (PyTorch: a 0-d mask selects along a new dim of size 1)
        v = v:unsqueeze(d + 1)
        nd = nd + 1
      end
      local k = e.dtype == "bool" and math.max(e:dim(), 1) or 1
      if d + k > nd then
        fail(string.format("%s: too many indices for a tensor of dimension %d (entry %d needs dim %d)", op, x:dim(), i, d + k))
      end
      if e.dtype == "bool" then
        local es = e:dim() == 0 and { 1 } or e.shape
        for j = 1, #es do
          if es[j] ~= v:size(d + j) then
            fail(string.format("%s: the shape of the mask {%s} at index %d does not match the shape of the indexed tensor {%s} at index %d",
              op, table.concat(e.shape, ","), j, table.concat(v.shape, ","), d + j))
          end
        end
        local nz = (e:dim() == 0 and e:reshape(1) or e):nonzero()
        for j = 1, k do dims[#dims + 1] = d + j - 1; idx[#idx + 1] = nz:select(2, j) end
      else
        dims[#dims + 1] = d; idx[#idx + 1] = e
      end
      d = d + k
    elseif d >= nd then
      fail(string.format("%s: too many indices for a tensor of dimension %d (got %d entries)", op, x:dim(), n))
    elseif e == all then
      d = d + 1
    elseif type(e) == "number" then
      v = v:select(d + 1, e)
    elseif type(e) == "table" then
      local a, b, s = e[1], e[2], e[3]
      if type(a) ~= "number" or type(b) ~= "number" or (s ~= nil and type(s) ~= "number") then
        fail(string.format("%s: entry %d expected a range {start, stop[, step]} of numbers", op, i))
      end
      v = v:slice(d + 1, a, b, s)
      d = d + 1
    else
      fail(string.format("%s: entry %d expected T.all, a number, a {start, stop[, step]} range or a tensor, got %s", op, i, describe(e)))
    end
  end
  return v, dims, idx
end

-- v with the indexed dims first (a view), and where their result dims go back (nil: in front)
local function front(v, dims)
  local leading = true
  for j, d in ipairs(dims) do leading = leading and d == j - 1 end
  if leading then return v, 0 end  -- already in front: v itself (an in-place write may need grad)
  local perm, seen = {}, {}
  for _, d in ipairs(dims) do perm[#perm + 1] = d + 1; seen[d] = true end
  for d = 0, v:dim() - 1 do
    if not seen[d] then perm[#perm + 1] = d + 1 end
  end
  local adjacent = true
  for j = 2, #dims do adjacent = adjacent and dims[j] == dims[j - 1] + 1 end
  return v:permute(perm), adjacent and dims[1] or 0
end

-- the permutation moving nb leading dims (of n) to position at (0-based), or nil when at == 0
local function back_perm(n, nb, at)
  if at == 0 then return nil end
  local p = {}
  for j = 1, at do p[#p + 1] = nb + j end
  for j = 1, nb do p[#p + 1] = j end
  for j = nb + at + 1, n do p[#p + 1] = j end
  return p
end

local function index_shape(idx)
  local b = idx[1].shape
  for j = 2, #idx do b = broadcast(b, idx[j].shape) end
  return b
end

function M.index(x, list)
  local v, dims, idx = resolve("index", x, list)
  if #idx == 0 then return v end
  if #idx == 1 then  -- one index tensor: index_select (generated kernels, CUDA included)
    local d, t = dims[1], idx[1]
    local shape = {}
    for j = 1, d do shape[j] = v:size(j) end
    for _, s in ipairs(t.shape) do shape[#shape + 1] = s end
    for j = d + 2, v:dim() do shape[#shape + 1] = v:size(j) end
    return v:index_select(d + 1, t:reshape(-1)):reshape(shape)
  end
  local w, at = front(v, dims)
  local r = index(w, idx)
  local p = back_perm(r:dim(), #index_shape(idx), at)
  return p and r:permute(p):contiguous() or r
end

-- x:index_put_(list, values[, accumulate]): list as x:index's; values a tensor or a number
function M.index_put_(x, list, values, accumulate)
  local v, dims, idx = resolve("index_put_", x, list)
  if type(values) == "number" or type(values) == "boolean" then
    values = full({}, values, { dtype = x.dtype, device = x.device })
  elseif not is_tensor(values) then
    fail("index_put_: argument 3 (values) expected a tensor or a number, got " .. describe(values))
  end
  if #idx == 0 then
    if accumulate then v:add_(values) else v:copy_(values) end
    return x
  end
  local w, at = front(v, dims)
  local nb = #index_shape(idx)
  if at > 0 then  -- values are given in the result's layout: bring the index dims in front
    local shape = {}
    for j = 1, at do shape[j] = v:size(j) end
    for _, s in ipairs(index_shape(idx)) do shape[#shape + 1] = s end
    for j = at + #dims + 1, v:dim() do shape[#shape + 1] = v:size(j) end
    local p = {}
    for j = 1, nb do p[j] = at + j end
    for j = 1, at do p[#p + 1] = j end
    for j = at + nb + 1, #shape do p[#p + 1] = j end
    values = values:expand(shape):permute(p)
  end
  index_put_(w, idx, values, accumulate)
  return x
end

local function same_shape(k, x)
  if k:dim() ~= x:dim() then return false end
  for j = 1, k:dim() do
    if k:size(j) ~= x:size(j) then return false end
  end
  return true
end

-- x[mask] = v as masked_fill_ (no data-dependent size: no graph break when compiled): v a number
-- or a 0-d tensor (cast to x's dtype, as torch's), the mask covering x's leading dims; returns the
-- mask with a size-1 dim for each of x's other dims, and the value
local function fill_mask(x, k, v)
  if k.dtype ~= "bool" or k:dim() == 0 or k:dim() > x:dim() then return nil end
  if is_tensor(v) and v:dim() ~= 0 then return nil end
  if not is_tensor(v) and type(v) ~= "number" then return nil end
  if is_tensor(v) and (v.dtype ~= x.dtype or v.device ~= x.device) then v = v:to({ dtype = x.dtype, device = x.device }) end
  local shape = {}
  for j = 1, x:dim() do
    if j <= k:dim() and k:size(j) ~= x:size(j) then return nil end
    shape[j] = j <= k:dim() and x:size(j) or 1
  end
  -- (a mask on the CPU indexes a CUDA tensor too, as PyTorch's positions may)
  if k.device ~= x.device then k = k:to(x.device) end
  return k:dim() == x:dim() and k or k:reshape(shape), v
end

-- x[k] for a key that is no method or property: a tensor (index or mask) or a list of entries
function M.get(x, k)
  if is_tensor(k) then
    -- (masked_select broadcasts: a mask of another shape goes to index, which raises)
    if k.dtype == "bool" and k:dim() > 0 and same_shape(k, x) then return x:masked_select(k) end
    return M.index(x, { k })
  end
  if type(k) == "table" then return M.index(x, k) end
  if type(k) == "string" then fail(string.format("tensor: no field or method '%s'", k)) end
  fail(string.format("tensor: cannot index with a %s key (expected a number, a tensor or a list of entries)", type(k)))
end

-- v without its leading dims of size 1: PyTorch's setitem takes such values (slicePrefix1sDims)
function M.setitem_value(v)
  if not is_tensor(v) or v:dim() == 0 or v:size(1) ~= 1 then return v end
  local shape, j = {}, 1
  while j <= v:dim() and v:size(j) == 1 do j = j + 1 end
  for m = j, v:dim() do shape[#shape + 1] = v:size(m) end
  return v:reshape(shape)
end

-- x[k] = v: a mask with a number or a 0-d tensor is masked_fill_ (fill_mask); the rest index_put_
-- (tensor values of another dtype raise, as PyTorch's setitem)
function M.set(x, k, v)
  v = M.setitem_value(v)
  if is_tensor(k) then
    local mask, value = fill_mask(x, k, v)
    if mask then return x:masked_fill_(mask, value) end
    return M.index_put_(x, { k }, v)
  end
  if type(k) == "table" then return M.index_put_(x, k, v) end
  fail(string.format("tensor: cannot set field '%s' (tensors have no writable fields)", tostring(k)))
end

-- nonzero(x[, {as_tuple = true}]) and where(cond) (one argument): one index tensor per dim
function M.columns(nz)
  local r = {}
  for j = 1, nz:size(2) do r[j] = nz:select(2, j) end
  return unpack(r)
end

return M
