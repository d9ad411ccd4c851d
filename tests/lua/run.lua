-- Runs the Lua spec files given as arguments (or every tests/lua/test_*.lua) and prints
-- "N passed, N failed, N skipped"; exits 1 on any failure.
local dir = arg[0]:match("(.*/)") or "./"
package.path = dir .. "?.lua;" .. package.path
local S = require "spec"
_G.describe, _G.it, _G.expect = S.describe, S.it, S

-- "--coverage": load every spec file without running its specs (it() does nothing), then check
-- the registry coverage; ctest runs the files one per test and this check as one more.
local coverage_only = arg[1] == "--coverage"
if coverage_only then S.it = function() end; _G.it = S.it end
local files = {}
for i = coverage_only and 2 or 1, #arg do files[#files + 1] = arg[i] end
if #files == 0 then

  local p = io.popen('ls "' .. dir .. '"test_*.lua 2>/dev/null')
  for f in p:lines() do files[#files + 1] = f end
  p:close()
end

for _, f in ipairs(files) do
  local chunk, err = loadfile(f)
  if not chunk then
    S.results.failed = S.results.failed + 1
    S.failures[#S.failures + 1] = f .. ": " .. err
  else
    local ok, e = xpcall(chunk, debug.traceback)
    if not ok then
      S.results.failed = S.results.failed + 1
      S.failures[#S.failures + 1] = f .. ": error outside a spec: " .. tostring(e)
    end
  end
end

-- the registry coverage check: only when the whole suite ran
if #arg == 0 or (coverage_only and #files > 0 and #arg == 1) then
  local T = require "crescent"
  local missing = {}
  for name in pairs(T._ops) do if not S.covered[name] then missing[#missing + 1] = name end end
  table.sort(missing)
  if #missing > 0 then
    S.results.failed = S.results.failed + 1
    S.failures[#S.failures + 1] = "registry coverage: ops without a spec: " .. table.concat(missing, ", ")
  else
    S.results.passed = S.results.passed + 1
  end
end

for _, f in ipairs(S.failures) do io.stderr:write("FAIL ", f, "\n") end
local r = S.results
print(string.format("%d passed, %d failed, %d skipped", r.passed, r.failed, r.skipped))
-- close the Lua state on exit (true): every tensor is released, so LeakSanitizer sees no leaks
os.exit(r.failed == 0 and 0 or 1, true)
