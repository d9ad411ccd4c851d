-- crescent.nn_containers: T.nn's containers as torch.nn's - Sequential, ModuleList, ModuleDict,
-- ParameterList - with Lua's 1-based positions (self[1], #self, ipairs; self[-1] the last item).
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local M = {}

function M.install(nn)
  local is_module, Module = nn.is_module, nn.Module

  local function add_items(op, self, list, n)
    n = n or #list  -- (a nil in the list is an error, not its end)
    for i = 1, n do
      local m = list[i]
      if not is_module(m) then fail(string.format("%s: item %d expected a module, got %s", op, i, type(m))) end
      self[#self + 1] = m
    end
  end
  -- a list container's items by position (1-based, negative from the end; past either end
  -- raises): Sequential's children in order, named ones too
  local function positional(cls, what, items)
    local mt = cls.__instance_mt
    mt.__index = function(self, k)
      if type(k) ~= "number" then return cls[k] end
      local list = items and items(self)
      local n = list and #list or #self
      if k ~= math.floor(k) or k == 0 or k > n or k < -n then
        fail(string.format("%s: index %s is out of range for %d %s (1-based: 1..%d, or -%d..-1)", cls.__name, tostring(k), n, what, n, n))
      end
      if k < 0 then k = n + k + 1 end
      return list and list[k] or rawget(self, k)
    end
  end
  -- extend(list) on an instance appends; on a class (a name) it makes a subclass
  local function extender(op, add)
    return function(self, arg)
      if type(arg) == "string" then return Module.extend(self, arg) end
      if type(arg) ~= "table" or is_module(arg) or is_tensor(arg) then fail(op .. ": expected a list, got " .. type(arg)) end
      add(self, arg)
      return self
    end
  end
  -- insert(index, item): item at index (1-based, negative from the end), the rest moved up
  local function inserter(op, check)
    return function(self, index, item)
      local n = #self
      if type(index) ~= "number" or index ~= math.floor(index) then fail(op .. ": index expected an integer, got " .. tostring(index)) end
      if index < 0 then index = index + n + 1 end
      index = math.max(1, math.min(index, n + 1))
      check(item)
      for i = n, index, -1 do self[i + 1] = rawget(self, i) end
      self[index] = item
      return self
    end
  end
  local function a_module(op)
    return function(m) if not is_module(m) then fail(op .. ": expected a module, got " .. type(m)) end end
  end

  -- Sequential(m1, m2, ...) or Sequential(named: {name, module} pairs, or name -> module sorted):
  -- forward feeds each child's result to the next, in the order added (named ones too, as torch)
  local Sequential = Module:extend("Sequential")
  function Sequential:init(...)
    local first = ...
    if select("#", ...) == 1 and type(first) == "table" and not is_module(first) then
      local list = {}
      if #first > 0 then list = first else
        for k, m in pairs(first) do list[#list + 1] = { k, m } end
        table.sort(list, function(a, b) return tostring(a[1]) < tostring(b[1]) end)
      end
      for i, kv in ipairs(list) do
        if type(kv) ~= "table" or type(kv[1]) ~= "string" or not is_module(kv[2]) then
          fail(string.format("Sequential: item %d expected a {name, module} pair, got %s", i, type(kv)))
        end
        self:add_module(kv[1], kv[2])
      end
      return
    end
    add_items("Sequential", self, { ... }, select("#", ...))
  end
  function Sequential:forward(x)  -- (a module held twice runs twice, as torch's _modules)
    for _, k in ipairs(rawget(self, "_order")) do
      local m = rawget(self, k)
      if is_module(m) then x = m(x) end
    end
    return x
  end
  -- (after named children the new one is named by its position, as torch's str(len(self)))
  function Sequential:append(m)
    a_module("Sequential:append")(m)
    self[#self:children() + 1] = m
    return self
  end
  Sequential.extend = extender("Sequential:extend", function(self, list)
    for i = 1, #list do self:append(list[i]) end
  end)
  local insert = inserter("Sequential:insert", a_module("Sequential:insert"))
  function Sequential:insert(index, m)
    if #self ~= #self:children() then fail("Sequential:insert: not implemented for a Sequential with named children") end
    return insert(self, index, m)
  end
  function Sequential:len() return #self:children() end  -- (# counts the numbered items only)
  positional(Sequential, "modules", Module.children)
  nn.Sequential = Sequential

  -- ModuleList(list): holds modules (self[1], #self, ipairs); it has no forward of its own.
  local ModuleList = Module:extend("ModuleList")
  function ModuleList:init(list)
    if list ~= nil and (type(list) ~= "table" or is_module(list)) then
      fail("ModuleList: argument 1 expected a list of modules, got " .. (is_module(list) and "a module" or type(list)))
    end
    add_items("ModuleList", self, list or {})
  end
  function ModuleList:append(m)
    add_items("ModuleList:append", self, { m }, 1)
    return self
  end
  ModuleList.extend = extender("ModuleList:extend", function(self, list) add_items("ModuleList:extend", self, list) end)
  ModuleList.insert = inserter("ModuleList:insert", a_module("ModuleList:insert"))
  function ModuleList:forward() fail("ModuleList: it has no forward; call its modules (self.list[i](x))") end
  positional(ModuleList, "modules")
  nn.ModuleList = ModuleList

  -- ModuleDict(items): modules by name (self.name or self[name]), in the order given: items is a
  -- list of {name, module} pairs, or a table name -> module (taken in sorted name order).
  local ModuleDict = Module:extend("ModuleDict")
  local function dict_pairs(op, items)
    if items == nil then return {} end
    if type(items) ~= "table" or is_module(items) then fail(op .. ": argument 1 expected a table of modules, got " .. (is_module(items) and "a module" or type(items))) end
    if #items > 0 then return items end
    local list = {}
    for k, v in pairs(items) do list[#list + 1] = { k, v } end
    table.sort(list, function(a, b) return tostring(a[1]) < tostring(b[1]) end)
    return list
  end
  function ModuleDict:init(items) self:update(items) end
  function ModuleDict:update(items)
    for _, kv in ipairs(dict_pairs("ModuleDict", items)) do
      local k, m = kv[1], kv[2]
      if type(k) ~= "string" or k:sub(1, 1) == "_" then fail("ModuleDict: keys expected names (strings not starting with _), got " .. tostring(k)) end
      if ModuleDict[k] ~= nil or Module[k] ~= nil then fail("ModuleDict: key '" .. k .. "' is the name of a method") end
      local old = rawget(self, k)
      if old ~= nil and not is_module(old) then fail("ModuleDict: key '" .. k .. "': attribute '" .. k .. "' already exists") end
      if not is_module(m) then fail(string.format("ModuleDict: item '%s' expected a module, got %s", k, type(m))) end
      self[k] = m
    end
    return self
  end
  function ModuleDict:keys()
    local ks = {}
    for k in self:named_children() do ks[#ks + 1] = k end
    return ks
  end
  function ModuleDict:items() return self:named_children() end
  function ModuleDict:values()
    local vs = {}
    for _, m in self:named_children() do vs[#vs + 1] = m end
    return vs
  end
  function ModuleDict:len() return #self:keys() end
  function ModuleDict:contains(k) return is_module(rawget(self, k)) end
  -- pop(key): the module, removed
  function ModuleDict:pop(k)
    local m = rawget(self, k)
    if not is_module(m) then fail("ModuleDict:pop: no module under key " .. tostring(k)) end
    self:_remove(k)
    return m
  end
  function ModuleDict:forward() fail("ModuleDict: it has no forward; call its modules (self.dict.name(x))") end
  nn.ModuleDict = ModuleDict

  -- ParameterList(list): tensors held as parameters (self[1], #self, ipairs), named "0", "1", ...
  local ParameterList = Module:extend("ParameterList")
  function ParameterList:init(list)
    if list ~= nil and (type(list) ~= "table" or is_tensor(list) or is_module(list)) then
      fail("ParameterList: argument 1 expected a list of tensors, got " .. type(list))
    end
    for _, p in ipairs(list or {}) do self:append(p) end
  end
  function ParameterList:append(p)
    if not is_tensor(p) then fail("ParameterList:append: expected a tensor, got " .. type(p)) end
    self[#self + 1] = p
    return self
  end
  ParameterList.extend = extender("ParameterList:extend", function(self, list)
    for _, p in ipairs(list) do self:append(p) end
  end)
  function ParameterList:forward() fail("ParameterList: it has no forward") end
  function ParameterList:extra_repr()
    local lines = {}
    for i, p in ipairs(self) do
      lines[i] = string.format("(%d): Parameter containing: [%s of size %s]", i - 1, p.dtype, p:_shape_str())
    end
    return #lines > 0 and "\n  " .. table.concat(lines, "\n  ") .. "\n" or ""
  end
  positional(ParameterList, "parameters")
  nn.ParameterList = ParameterList
end

return M
