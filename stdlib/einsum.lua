-- crescent.einsum: T.einsum(equation, a, b, ...) (or (equation, {a, b, ...})) with PyTorch's
-- equation syntax: letters, spaces, one '...' per term (broadcast, right-aligned), '->' output or
-- the implicit one ('...' then the letters seen once, in ASCII order). It lowers to index_select
-- (repeated letters: diagonals), expand, sum, permute, reshape and bmm, so autograd, capture and
-- CUDA come from those ops. Operands are contracted left to right, as PyTorch without opt_einsum.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor
local A = require "crescent.surface_args"

local E = {}
local T

local ELL = 1000  -- labels: letters are their byte; the ellipsis dims ELL + 1 (last) .. ELL + e
local function label_name(l) return l > ELL and "..." or string.char(l) end

-- a term's items: letter bytes and ELL for '...'
local function parse_term(eq, term, what)
  local items, i, ell = {}, 1, false
  while i <= #term do
    local c = term:sub(i, i)
    if c == "." then
      if term:sub(i, i + 2) ~= "..." then fail(("einsum: found '.' for %s that is not part of any ellipsis in '%s'"):format(what, eq)) end
      if ell then fail(("einsum: found more than one ellipsis for %s in '%s'"):format(what, eq)) end
      ell, items[#items + 1], i = true, ELL, i + 3
    elseif c:match("%a") then
      items[#items + 1], i = c:byte(), i + 1
    elseif c:match("%s") then
      i = i + 1
    else
      fail(("einsum: invalid subscript '%s' in '%s': subscripts must be in [a-zA-Z]"):format(c, eq))
    end
  end
  return items, ell
end

-- one label per dim of x (ellipsis dims numbered from the right); the ellipsis length
local function operand_labels(eq, items, has_ell, x, j)
  local letters = #items - (has_ell and 1 or 0)
  local e = x:dim() - letters
  if e < 0 or (e > 0 and not has_ell) then
    fail(("einsum: operand %d has %d dims but '%s' gives it %d subscripts%s"):format(j, x:dim(), eq, letters,
      has_ell and "" or " and no ellipsis"))
  end
  local labels = {}
  for _, it in ipairs(items) do
    if it == ELL then
      for m = e, 1, -1 do labels[#labels + 1] = ELL + m end
    else
      labels[#labels + 1] = it
    end
  end
  return labels, e
end

-- x with its dims p < q (same label, same size) replaced by their diagonal, as the last dim
local function diagonal(x, labels, p, q)
  local n = x:size(p)
  local perm, rest = {}, {}
  for d = 1, x:dim() do
    if d ~= p and d ~= q then perm[#perm + 1] = d; rest[#rest + 1] = labels[d] end
  end
  local shape = {}
  for d, at in ipairs(perm) do shape[d] = x:size(at) end
  perm[#perm + 1], perm[#perm + 2] = p, q
  shape[#shape + 1] = n * n
  rest[#rest + 1] = labels[p]
  local idx = T.arange(1, n * n + 1, n + 1, { dtype = "int64", device = x.device })
  return x:permute(perm):reshape(shape):index_select(#shape, idx), rest
end

local function find(list, v)
  for i, w in ipairs(list) do if w == v then return i end end
end

-- an operand: { x =, labels = } with no label repeated
local function operand(eq, items, has_ell, x, j)
  local labels, e = operand_labels(eq, items, has_ell, x, j)
  local q = 2
  while q <= #labels do
    local p = find(labels, labels[q])
    if p < q then
      if x:size(p) ~= x:size(q) then
        fail(("einsum: subscript %s is repeated for operand %d but the sizes don't match, %d != %d"):format(label_name(labels[q]), j, x:size(p), x:size(q)))
      end
      x, labels = diagonal(x, labels, p, q)
      q = 2
    else
      q = q + 1
    end
  end
  return { x = x, labels = labels }, e
end

-- sums op's dims whose label keep(label) refuses
local function sum_unneeded(op, keep)
  for d = #op.labels, 1, -1 do
    if not keep(op.labels[d]) then
      op.x = op.x:sum(d)
      table.remove(op.labels, d)
    end
  end
end

-- the permutation of op's dims into the label order `order`, and the product of their sizes
local function take(op, order, size)
  local perm, prod = {}, 1
  for _, l in ipairs(order) do perm[#perm + 1] = find(op.labels, l); prod = prod * size[l] end
  return perm, prod
end
local function concat(...)
  local r = {}
  for _, list in ipairs({ ... }) do for _, v in ipairs(list) do r[#r + 1] = v end end
  return r
end

-- a and b contracted into one operand; needed(label): whether a later operand or the output has it
local function contract(a, b, needed, size)
  local batch, sum, a_only, b_only = {}, {}, {}, {}
  for _, l in ipairs(a.labels) do
    if find(b.labels, l) then
      if needed(l) then batch[#batch + 1] = l else sum[#sum + 1] = l end
    else
      a_only[#a_only + 1] = l
    end
  end
  for _, l in ipairs(b.labels) do if not find(a.labels, l) then b_only[#b_only + 1] = l end end
  local pa = take(a, concat(batch, a_only, sum), size)
  local pb = take(b, concat(batch, sum, b_only), size)
  local _, nb = take(a, batch, size)
  local _, m = take(a, a_only, size)
  local _, k = take(a, sum, size)
  local _, n = take(b, b_only, size)
  local r = T.bmm(a.x:permute(pa):reshape(nb, m, k), b.x:permute(pb):reshape(nb, k, n))
  local labels = concat(batch, a_only, b_only)
  local shape = {}
  for d, l in ipairs(labels) do shape[d] = size[l] end
  return { x = r:reshape(shape), labels = labels }
end

-- the labels' sizes, broadcast (1 against n) over the operands, and each operand expanded to them
local function broadcast(ops)
  local size = {}
  for j, op in ipairs(ops) do
    for d, l in ipairs(op.labels) do
      local s, seen = op.x:size(d), size[l]
      if seen and seen ~= s and seen ~= 1 and s ~= 1 then
        fail(("einsum: subscript %s has size %d for operand %d which does not broadcast with previously seen size %d"):format(label_name(l), s, j, seen))
      end
      size[l] = (seen == nil or seen == 1) and s or seen
    end
  end
  for _, op in ipairs(ops) do
    local shape = {}
    for d, l in ipairs(op.labels) do shape[d] = size[l] end
    if #shape > 0 then op.x = op.x:expand(shape) end
  end
  return size
end

-- the output labels: explicit, or implicit (ellipsis dims, then the letters seen once, sorted)
local function output_labels(eq, out, count, e_max)
  local labels = {}
  if out then
    local items = parse_term(eq, out, "the output")
    for _, it in ipairs(items) do
      if it == ELL then
        for m = e_max, 1, -1 do labels[#labels + 1] = ELL + m end
      else
        if not count[it] then fail(("einsum: output subscript %s does not appear in the equation for any input operand"):format(string.char(it))) end
        if find(labels, it) then fail(("einsum: output subscript %s appears more than once in the output"):format(string.char(it))) end
        labels[#labels + 1] = it
      end
    end
    return labels
  end
  for m = e_max, 1, -1 do labels[#labels + 1] = ELL + m end
  local once = {}
  for l, c in pairs(count) do if c == 1 and l < ELL then once[#once + 1] = l end end
  table.sort(once)
  return concat(labels, once)
end

function E.einsum(eq, ...)
  if type(eq) ~= "string" then fail("einsum: argument 1 (equation) expected a string, got " .. A.describe(eq)) end
  local tensors = { ... }
  if #tensors == 1 and type(tensors[1]) == "table" and not is_tensor(tensors[1]) then tensors = tensors[1] end
  local lhs, out = eq:match("^(.-)%->(.*)$")
  lhs = lhs or eq
  local terms = {}
  for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  if #tensors ~= #terms then
    fail(("einsum: '%s' names %d operands, got %d"):format(eq, #terms, #tensors))
  end
  local ops, count, e_max = {}, {}, 0
  for j, x in ipairs(tensors) do
    A.check_tensor("einsum", j + 1, "operands", x)
    local items, has_ell = parse_term(eq, terms[j], "operand " .. j)
    local e
    ops[j], e = operand(eq, items, has_ell, x, j)
    e_max = math.max(e_max, e)
    for _, it in ipairs(items) do if it ~= ELL then count[it] = (count[it] or 0) + 1 end end
  end
  local outl = output_labels(eq, out, count, e_max)
  local size = broadcast(ops)
  -- sum each label when the last operand having it is reached and the output lacks it
  local function needed_after(j)
    return function(l)
      if find(outl, l) then return true end
      for m = j + 1, #ops do if find(ops[m].labels, l) then return true end end
      return false
    end
  end
  local function held_elsewhere(j)
    return function(l)
      for m = 1, #ops do if m ~= j and find(ops[m].labels, l) then return true end end
      return find(outl, l) ~= nil
    end
  end
  for j, op in ipairs(ops) do sum_unneeded(op, held_elsewhere(j)) end
  local acc = ops[1]
  for j = 2, #ops do acc = contract(acc, ops[j], needed_after(j), size) end
  sum_unneeded(acc, function(l) return find(outl, l) ~= nil end)
  local perm = {}
  for d, l in ipairs(outl) do perm[d] = find(acc.labels, l) end
  return #perm > 1 and acc.x:permute(perm) or acc.x
end

function E.bind(t) T = t end

return E
