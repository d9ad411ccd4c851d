-- crescent.surface_views: PyTorch's shape and view conveniences made of registry ops, bound with
-- crescent.surface's (T.op and x:op; dims 1-based): view_as, expand_as, reshape_as, movedim /
-- moveaxis, swapaxes / swapdims, unbind, diagonal, storage_offset, unfold (the method); and the
-- two-tensor max / min (maximum / minimum).
local fail = require("crescent.core").fail
local A = require "crescent.surface_args"
local check_tensor, dim0 = A.check_tensor, A.dim0
local is_tensor = require("crescent.core").is_tensor

local M = {}  -- name -> function, bound by crescent.surface
local T, registry

local function like(op, x, other)
  check_tensor(op, 1, "self", x)
  check_tensor(op, 2, "other", other)
  return other.shape
end
function M.view_as(x, other) return x:view(like("view_as", x, other)) end
function M.expand_as(x, other) return x:expand(like("expand_as", x, other)) end
function M.reshape_as(x, other) return x:reshape(like("reshape_as", x, other)) end

-- movedim(x, source, destination): dim source (a dim or a list) moves to destination, the other
-- dims keep their order
function M.movedim(x, source, destination)
  check_tensor("movedim", 1, "self", x)
  local src = type(source) == "table" and source or { source }
  local dst = type(destination) == "table" and destination or { destination }
  if #src ~= #dst then
    fail(string.format("movedim: Invalid source or destination dims: source (%d dims) should contain the same "
      .. "number of dims as destination (%d dims)", #src, #dst))
  end
  local n = math.max(x:dim(), 1)
  local perm, taken, placed = {}, {}, {}
  for j = 1, #src do
    local s, d = dim0("movedim", x, src[j]) + 1, dim0("movedim", x, dst[j]) + 1
    if taken[s] then fail("movedim: repeated dim in source, got " .. tostring(src[j])) end
    if placed[d] then fail("movedim: repeated dim in destination, got " .. tostring(dst[j])) end
    perm[d], taken[s], placed[d] = s, true, true
  end
  local rest = 1
  for d = 1, n do
    if not perm[d] then
      while taken[rest] do rest = rest + 1 end
      perm[d], rest = rest, rest + 1
    end
  end
  return x:dim() == 0 and x or x:permute(perm)
end
M.moveaxis = M.movedim
function M.swapaxes(x, a, b) return x:transpose(a, b) end
M.swapdims = M.swapaxes

-- storage_offset(x): the element offset of x's first element in its storage (as_strided's)
function M.storage_offset(x)
  check_tensor("storage_offset", 1, "self", x)
  return tonumber(require("crescent.core").ptr(x)._offset)
end

-- diagonal(x[, offset = 0[, dim1 = 1[, dim2 = 2]]]): the view of the entries x[.., i, .., i + offset, ..]
-- of dims dim1 and dim2, which move to a last dim
function M.diagonal(x, offset, dim1, dim2)
  check_tensor("diagonal", 1, "self", x)
  offset = offset or 0
  if type(offset) ~= "number" or offset ~= math.floor(offset) then
    fail("diagonal: offset expected an integer, got " .. tostring(offset))
  end
  local a, b = dim0("diagonal", x, dim1 or 1) + 1, dim0("diagonal", x, dim2 or 2) + 1
  if a == b then fail(string.format("diagonal: dim1 and dim2 cannot be the same dim, got %d and %d", a, b)) end
  local sizes, strides = {}, {}
  for d = 1, x:dim() do
    if d ~= a and d ~= b then sizes[#sizes + 1], strides[#strides + 1] = x:size(d), x:stride(d) end
  end
  local n = offset >= 0 and math.min(x:size(a), x:size(b) - offset) or math.min(x:size(a) + offset, x:size(b))
  n = math.max(n, 0)
  local start = M.storage_offset(x)
  if n > 0 then start = start + (offset >= 0 and offset * x:stride(b) or -offset * x:stride(a)) end
  sizes[#sizes + 1], strides[#strides + 1] = n, x:stride(a) + x:stride(b)
  return x:as_strided(sizes, strides, start)
end

-- x:unfold(dim, size, step): the view of every run of `size` elements along dim, `step` apart,
-- with the runs along dim and their elements in a new last dim (Tensor.unfold)
function M.unfold(x, dim, size, step)
  check_tensor("unfold", 1, "self", x)
  for i, v in ipairs({ size, step }) do
    if type(v) ~= "number" or v ~= math.floor(v) or v < (i == 1 and 0 or 1) then
      fail(string.format("unfold: %s expected %s integer, got %s", i == 1 and "size" or "step",
        i == 1 and "a non-negative" or "a positive", tostring(v)))
    end
  end
  local d = dim0("unfold", x, dim) + 1
  local n = x:dim() == 0 and 1 or x:size(d)
  if size > n then fail(string.format("unfold: maximum size for tensor at dimension %d is %d but size is %d", dim, n, size)) end
  local sizes, strides = {}, {}
  for j = 1, x:dim() do sizes[j], strides[j] = x:size(j), x:stride(j) end
  local inner = x:dim() == 0 and 1 or strides[d]
  if x:dim() > 0 then sizes[d], strides[d] = math.floor((n - size) / step) + 1, inner * step end
  sizes[#sizes + 1], strides[#strides + 1] = size, inner
  return x:as_strided(sizes, strides, M.storage_offset(x))
end

-- unbind(x[, dim = 1]): the slices along dim, as a list
function M.unbind(x, dim)
  check_tensor("unbind", 1, "self", x)
  if x:dim() == 0 then fail("unbind: dimension specified as 1 but tensor has no dimensions") end
  local d = dim0("unbind", x, dim or 1) + 1
  local r = {}
  for i = 1, x:size(d) do r[i] = x:select(d, i) end
  return r
end

-- max(a, b) / min(a, b) with a tensor b: the elementwise maximum / minimum, as torch's
local function extreme(name, elementwise)
  return function(x, a, ...)
    if not is_tensor(a) then return registry[name].fn(x, a, ...) end
    if select("#", ...) > 0 then fail(name .. ": the elementwise form takes two tensors, got more arguments") end
    return registry[elementwise].fn(x, a)
  end
end
M.max, M.min = extreme("max", "maximum"), extreme("min", "minimum")

function M.bind(t, ops) T, registry = t, ops end

return M
