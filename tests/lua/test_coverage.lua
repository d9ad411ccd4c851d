-- docs/coverage.md against crescent: every registry op has a row, a done / partial row names
-- something crescent has and a missing row something it lacks, and the README states the
-- coverage counted from the list.
local T = require "crescent"

local root = debug.getinfo(1, "S").source:sub(2):match("^(.*)/tests/lua/") or "."

local function read(path)
  local f = assert(io.open(root .. "/" .. path))
  local s = f:read("*a")
  f:close()
  return s
end

-- rows: { torch =, crescent =, status =, line = }
local function rows()
  local r, n = {}, 0
  for line in read("docs/coverage.md"):gmatch("[^\n]+") do
    n = n + 1
    local torch, cres, status = line:match("^| ([^|]-) | ([^|]-) | ([^|]-) |")
    if torch and torch ~= "PyTorch" and not torch:match("^%-") then
      r[#r + 1] = { torch = torch, crescent = cres, status = status, line = n }
    end
  end
  return r
end

-- The value a crescent spelling names: T.a.b, x:name (a tensor method), x["name"], x.name (a property)
local function resolve(name)
  local m = name:match("^x:([%w_]+)$") or name:match('^x%["([%w_]+)"%]$')
  if m then return T._methods[m] end
  local prop = name:match("^x%.([%w_]+)$")  -- a property, read from a matrix
  if prop then
    local ok, v = pcall(function() return T.ones(2, 2)[prop] end)
    return ok and v or nil
  end
  if not name:match("^T%.") then return nil end
  local v = T
  for part in name:sub(3):gmatch("[^.]+") do
    if type(v) ~= "table" then return nil end
    v = v[part]
  end
  return v
end

describe("docs/coverage.md", function()
  local list = rows()
  it("every row is well formed and its status matches crescent", function()
    local wrong = {}
    for _, r in ipairs(list) do
      local v = resolve(r.crescent)
      local have = v ~= nil and type(v) ~= "string"  -- (T.bool is a dtype name, not the op)
      if r.status == "done" or r.status == "partial" then
        if not have then wrong[#wrong + 1] = ("line %d: %s is %s but crescent has no %s"):format(r.line, r.torch, r.status, r.crescent) end
      elseif r.status == "missing" then
        if have then wrong[#wrong + 1] = ("line %d: %s is missing but %s exists: update the row"):format(r.line, r.torch, r.crescent) end
      else
        wrong[#wrong + 1] = ("line %d: status '%s' (expected done, partial or missing)"):format(r.line, r.status)
      end
    end
    expect.eq(wrong, {})
  end)
  it("every registry op has a row", function()
    local named = {}
    for _, r in ipairs(list) do
      named[r.crescent:match("([%w_]+)[\"%]]*$")] = true
    end
    local missing = {}
    for name in pairs(T._ops) do
      if name:sub(1, 1) ~= "_" and not named[name] then missing[#missing + 1] = name end
    end
    table.sort(missing)
    expect.eq(missing, {}, "registry ops without a row in docs/coverage.md")
  end)
  it("the README states the coverage counted from the list", function()
    local done = 0
    for _, r in ipairs(list) do if r.status == "done" then done = done + 1 end end
    local want = ("%d of the %d PyTorch ops"):format(done, #list)
    expect.truthy(read("README.md"):find(want, 1, true), "README.md should say \"" .. want .. "\"")
  end)
end)
