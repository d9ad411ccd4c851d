-- crescent.repl: the Lua side of the REPL (vm/lua/repl.cpp): results shown with tables
-- pretty-printed (nested, cycles marked), the last result kept in `_`, and help(obj).
local T = require "crescent"
local binding = require "crescent.binding"

local M = {}
local kWidth, kMaxItems = 80, 100

-- ---- showing values ---------------------------------------------------------------------------
local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return k end
  return "[" .. (type(k) == "string" and string.format("%q", k) or tostring(k)) .. "]"
end

local function key_order(a, b)
  if type(a) ~= type(b) then return type(a) < type(b) end
  if type(a) == "number" or type(a) == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local function tensor_text(t)
  local device = t.device == "cpu" and "" or ", " .. t.device
  return "tensor<" .. tostring(t.shape) .. ", " .. t.dtype .. device .. ">"
end

-- The text of v inside a table: strings quoted, tensors in short, tables nested (one line when
-- it fits, else one entry a line); `open` holds the tables being shown (a cycle).
local function nested(v, indent, open)
  if type(v) == "string" then return string.format("%q", v) end
  if T.is_tensor(v) then return tensor_text(v) end
  if type(v) ~= "table" then return tostring(v) end
  local mt = getmetatable(v)
  if mt and mt.__tostring then return tostring(v) end
  if mt and next(v) == nil and type(mt.__index) == "table" and mt.__newindex then  -- a proxy (T.config)
    return nested(mt.__index, indent, open)
  end
  if open[v] then return "<cycle: " .. tostring(v) .. ">" end
  open[v] = true
  local parts, n, keys = {}, #v, {}
  for i = 1, math.min(n, kMaxItems) do parts[#parts + 1] = nested(v[i], indent .. "  ", open) end
  for k in pairs(v) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_order)
  for i = 1, math.min(#keys, kMaxItems) do
    parts[#parts + 1] = key_text(keys[i]) .. " = " .. nested(v[keys[i]], indent .. "  ", open)
  end
  local more = math.max(n - kMaxItems, 0) + math.max(#keys - kMaxItems, 0)
  if more > 0 then parts[#parts + 1] = "... (" .. more .. " more)" end
  open[v] = nil
  local line = "{" .. table.concat(parts, ", ") .. "}"
  if #indent + #line <= kWidth and not line:find("\n", 1, true) then return line end
  return "{\n" .. indent .. "  " .. table.concat(parts, ",\n" .. indent .. "  ") .. "\n" .. indent .. "}"
end

-- A result as the REPL prints it: strings and tensors as print shows them, tables pretty-printed.
function M.text(v)
  if type(v) == "string" or T.is_tensor(v) then return tostring(v) end
  return nested(v, "", {})
end

-- The REPL's display of a chunk's results: `_` becomes the first; printed unless `quiet`.
function M.show(quiet, ...)
  local n = select("#", ...)
  if n == 0 then return end
  _G._ = (...)
  if quiet then return end
  local out = {}
  for i = 1, n do out[i] = M.text((select(i, ...))) end
  io.stdout:write(table.concat(out, "\t"), "\n")
end

-- ---- help -------------------------------------------------------------------------------------
local kTypes = { T = "Tensor", TN = "Tensor|number", N = "number", I = "int", Is = "int", D = "dim",
                 Ds = "dim|{dims}", B = "boolean", S = "string", TL = "{Tensor...}", Data = "number|table" }
local C = require("ffi").C  -- (vm/abi.h: enum cr_op_kind, enum cr_op_flag)
local kKinds = { [C.CR_KIND_UNARY] = "pointwise op of one tensor",
                 [C.CR_KIND_BINARY] = "pointwise op of two operands (broadcasting)",
                 [C.CR_KIND_TERNARY] = "pointwise op of three operands (broadcasting)", [C.CR_KIND_REDUCTION] = "reduction",
                 [C.CR_KIND_VIEW] = "view (shares the storage, no copy)", [C.CR_KIND_JOIN] = "join",
                 [C.CR_KIND_INDEX] = "indexing op", [C.CR_KIND_LINALG] = "linear algebra op",
                 [C.CR_KIND_CREATION] = "creation op", [C.CR_KIND_CONVERT] = "conversion", [C.CR_KIND_OTHER] = "op" }

local function param_text(p)
  local s = p.name .. ": " .. (kTypes[p.type] or p.type) .. (p.rest and "..." or "")
  return p.optional and "[" .. s .. "]" or s
end

-- "T.name(params) -> result" and a line of what it is, from the registry schema.
local function op_help(name, o)
  local params = {}
  for i, p in ipairs(o.params) do params[i] = param_text(p) end
  if o.opts then
    local keys = {}
    for i, k in ipairs(o.opts.list) do keys[i] = k.name .. " = " .. (kTypes[k.type] or k.type) end
    params[#params + 1] = "{" .. table.concat(keys, ", ") .. "}"
  end
  local flags = o.flags
  local result = bit.band(flags, C.CR_OP_LIST_OUT) ~= 0 and "{Tensor...}" or bit.band(flags, C.CR_OP_MULTI_OUT) ~= 0 and "Tensor, Tensor..."
                 or bit.band(flags, C.CR_OP_RETURNS_SELF) ~= 0 and "self" or "Tensor"
  local forms = o.func and o.method and "T." .. name .. "(...) or x:" .. name .. "(...)"
                or o.func and "T." .. name .. "(...) only" or "x:" .. name .. "(...) only"
  return string.format("%s(%s) -> %s\n  %s%s; %s", name, table.concat(params, ", "), result, kKinds[o.kind] or "op",
                       bit.band(flags, C.CR_OP_RETURNS_SELF) ~= 0 and ", in place" or "", forms)
end

-- The registry op whose Lua function is f (T.op or a tensor method), or nil.
local function op_of(f)
  for name, o in pairs(binding.ops) do
    if o.fn == f or T[name] == f then return name, o end
  end
end

local function params_of(f)
  local info, names = debug.getinfo(f, "Su"), {}
  for i = 1, info.nparams or 0 do names[i] = debug.getlocal(f, i) end
  if info.isvararg then names[#names + 1] = "..." end
  return table.concat(names, ", "), info
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do if type(k) == "string" and k:sub(1, 1) ~= "_" then keys[#keys + 1] = k end end
  table.sort(keys)
  return table.concat(keys, " ")
end

local function class_help(c)
  local init = c.init and string.format("(%s)", (params_of(c.init):gsub("^self,? ?", ""))) or "(...)"
  return string.format("nn.%s%s: an nn module class; m = nn.%s%s, then m(input) runs m:forward(input)",
                       c.__name, init, c.__name, init)
end

local kGeneral = [[
crescent REPL: T (= crescent) is the module. Type an expression to see its value; a trailing `;`
hides it; `_` is the last value. help(obj) or `? obj` describes a function, op, tensor or nn
class: help(T.randn), help(x.sum), ? x:sum. help(T) lists T's fields. Tab completes globals,
fields and tensor methods; Ctrl-C interrupts, Ctrl-D exits. docs/API.md is the full contract.]]

-- help(obj): one description of obj, printed.
function M.help(...)
  local obj, text = ...
  if select("#", ...) == 0 then
    text = kGeneral
  elseif obj == nil then
    text = "nil: no value (a misspelt name?)"
  elseif obj == T then
    text = "T: the crescent module. Fields: " .. sorted_keys(T)
  elseif T.is_tensor(obj) then
    text = tensor_text(obj) .. ": a tensor. Fields: shape dtype device grad requires_grad; methods: x:<Tab>"
  elseif type(obj) == "function" then
    local name, o = op_of(obj)
    if name then
      text = op_help(name, o)
    else
      local params, info = params_of(obj)
      text = string.format("function(%s), defined at %s:%d", params, info.short_src, info.linedefined)
    end
  elseif type(obj) == "table" and getmetatable(obj) and getmetatable(obj).__module then
    text = tostring(obj) .. "\n(an nn module: m(input) runs its forward)"
  elseif type(obj) == "table" and rawget(obj, "__instance_mt") then
    text = class_help(obj)
  elseif type(obj) == "table" then
    text = "a table. Fields: " .. sorted_keys(obj)
  else
    text = type(obj) .. ": " .. tostring(obj)
  end
  print(text)
end

-- The REPL's globals: T (unless taken) and help.
function M.setup()
  if rawget(_G, "T") == nil then _G.T = T end
  if rawget(_G, "help") == nil then _G.help = M.help end
end

return M
