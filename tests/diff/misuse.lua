-- Misuse cases for the differential test (tests/diff/diff_torch.lua): every op's validity rules
-- against PyTorch's. A recipe's case is built as usual (recipes.lua), its call of the op is
-- captured (the op's functions are replaced for one run), and one argument is replaced by a value
-- of another kind than its schema slot takes (stdlib/binding.lua): a boolean or a fraction where
-- an integer goes (a size, a dim, a count), a boolean where a number goes (a value: torch takes
-- True as a number there), a number where a tensor or a string goes, a string where a tensor or
-- a number goes, a nil inside T.tensor's data (torch.tensor([None, 2]) raises). The call then
-- runs on crescent as the recipe's does, and on torch through the compile fuzzer's mapping of
-- crescent's calls (OPS of tests/torch_bridge/crescent_ops.py: dims and indices converted, sizes
-- as lists). Both must raise, or both give the same result; a difference is a finding like any
-- other (excuses.lua).
local T = require "crescent"
local G = require "gen"
local B = require "crescent.binding"

local M = {}

-- The arguments of the recipe's first call of its op, and how it was called ("T" or "method"):
-- the op's function and method raise a captured-call marker for one run of case.call.
local function capture(case, I)
  local name, methods = case.op, T._methods
  local saved_t, saved_m = T[name], methods[name]
  local function hook(how)
    return function(...) error({ captured = { how = how, n = select("#", ...), ... } }, 0) end
  end
  if type(saved_t) == "function" then T[name] = hook("T") end
  if saved_m then methods[name] = hook("method") end
  local ok, err = pcall(case.call, I)
  T[name], methods[name] = saved_t, saved_m
  if ok or type(err) ~= "table" or not err.captured then return nil end
  return err.captured
end

-- A captured argument as { tensor = input name } | { value = } | { table = encoded, opts = }
-- over the case's inputs; nil for a tensor that is no input (one the recipe made on the way).
local function encode(v, I, names)
  if T.is_tensor(v) then
    for _, n in ipairs(names) do if I[n] == v then return { tensor = n } end end
    return nil
  end
  if type(v) ~= "table" then return { value = v } end
  local out = { table = {}, opts = false }
  for k, x in pairs(v) do
    local e = encode(x, I, names)
    if not e then return nil end
    out.table[k] = e
  end
  return out
end

local function decode(e, I)
  if e.tensor then return I[e.tensor] end
  if e.table then
    local t = {}
    for k, x in pairs(e.table) do t[k] = decode(x, I) end
    return t
  end
  return e.value
end

-- Python source of an encoded argument (lists as lists: crescent_ops.py's sizes() wants them so).
local function pysrc(e)
  if e.tensor then return e.tensor end
  if not e.table then return G.py(e.value) end
  local parts = {}
  if e.opts then
    local keys = {}
    for k in pairs(e.table) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%q: %s"):format(k, pysrc(e.table[k])) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  for i = 1, e.n or #e.table do parts[i] = pysrc(e.table[i]) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

-- ---- mutations ------------------------------------------------------------------------------------

-- Wrong values for a slot of schema type ty holding encoded argument e (nil: absent): a list of
-- { e', what }.
local function wrong_values(ty, e)
  local out = {}
  local v = e and e.value
  local function add(x, what) out[#out + 1] = { { value = x }, what } end
  if ty == "I" or ty == "D" then
    add(true, "a boolean as an integer")
    if type(v) == "number" then add(v + 0.5, "a fraction as an integer") end
  elseif ty == "Is" or ty == "Ds" then
    if e and e.table and #e.table > 0 then
      local t = {}
      for i, x in ipairs(e.table) do t[i] = x end
      t[#t] = { value = true }
      out[#out + 1] = { { table = t }, "a boolean in a list of integers" }
    else
      add(true, "a boolean as integers")
    end
  elseif (ty == "N" or ty == "TN") and type(v) == "number" then
    add(true, "a boolean as a number")
  elseif ty == "T" and e and e.tensor then
    add(2, "a number as a tensor")
  elseif ty == "TN" and e and e.tensor then
    add("x", "a string as a tensor or a number")
  elseif ty == "S" and e and type(v) == "string" then
    add(2, "a number as a string")
  elseif ty == "Data" and e and e.table and #e.table >= 2 then  -- (a trailing nil is no hole in Lua)
    local t = {}
    for i, x in ipairs(e.table) do t[i] = x end
    t[1] = { value = nil }
    out[#out + 1] = { { table = t, n = #t }, "a nil inside a list" }
  end
  return out
end

-- Every mutation of a captured call of op: { args = encoded args (n), what = }. Self stays where
-- the call must be a method (x:to(...) is a wrapper of the op); absent optional arguments get a
-- value only where no options table follows.
local function mutations(op, args, keep_self)
  local info = B.ops[op]
  local params, nargs = info.params, args.n
  local opts_at = (info.opts and nargs > 0 and args[nargs].opts) and nargs or nil
  local out = {}
  local function with(i, e, what)
    local a = { n = math.max(nargs, i) }
    for k = 1, a.n do a[k] = args[k] end
    a[i] = e
    out[#out + 1] = { args = a, what = what }
  end
  for k, p in ipairs(params) do
    local last = p.rest and (opts_at and opts_at - 1 or nargs) or k
    for i = k, math.max(k, last) do
      if i ~= opts_at and (i <= nargs or (p.optional and not opts_at)) and not (i == 1 and keep_self) then
        for _, m in ipairs(wrong_values(p.type, args[i])) do with(i, m[1], m[2] .. " (" .. p.name .. ")") end
      end
    end
  end
  if opts_at then  -- an option: a wrong value in place of the one given
    for _, o in ipairs(info.opts.list) do
      local given = args[opts_at].table[o.name]
      for _, m in ipairs(wrong_values(o.type, given)) do
        local t = {}
        for key, x in pairs(args[opts_at].table) do t[key] = x end
        t[o.name] = m[1]
        with(opts_at, { table = t, opts = true }, m[2] .. " (option " .. o.name .. ")")
      end
    end
  end
  return out
end

-- A misuse variant of case (built by the recipe): call and expr replaced; false when the
-- recipe's call cannot be captured over the inputs or has no argument to misuse.
function M.variant(case, rng)
  local I = G.materialise(case, case.device)
  local names = {}
  for i, input in ipairs(case.inputs) do names[i] = input.name end
  local got = capture(case, I)
  if not got then return false end
  local args = { n = got.n }
  for i = 1, got.n do
    args[i] = encode(got[i], I, names)
    if not args[i] then return false end
  end
  -- the options table: a trailing one, as the binding tells it from a list ({} included)
  local last = args[got.n]
  if last and last.table and B.ops[case.op].opts and B.is_opts(got[got.n]) then last.opts = true end
  -- the op's function (a method of the registry is that function; another is a wrapper)
  local name = case.op
  local fn = got.how == "T" and T[name] or (T._methods[name] == T._ops[name].fn and T._ops[name].fn)
  local list = mutations(name, args, not fn)
  if #list == 0 then return false end
  local m = list[rng:int(1, #list)]
  case.call = function(J)
    local a = {}
    for i = 1, m.args.n do a[i] = m.args[i] and decode(m.args[i], J) end
    if fn then return fn(unpack(a, 1, m.args.n)) end
    return a[1][name](unpack(a, 1, m.args.n))
  end
  local py = {}
  for i = 1, m.args.n do py[i] = m.args[i] and pysrc(m.args[i]) or "None" end
  case.expr = ("OPS[%q](%s)"):format(name, table.concat(py, ", "))
  case.misuse = m.what
  return true
end

return M
