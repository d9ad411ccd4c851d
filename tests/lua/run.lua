-- Runs the Lua spec files given as arguments (or every tests/lua/test_*.lua) and prints
-- "N passed, N failed, N skipped"; exits 1 on any failure. The helpers the spec files share
-- (spec.lua, the PyTorch bridge, the fuzzer's generator) are in lib/.
local dir = arg[0]:match("(.*/)") or "./"
package.path = dir .. "lib/?.lua;" .. dir .. "../diff/?.lua;" .. package.path
local S = require "spec"
local SH = require "shell"
_G.describe, _G.it, _G.expect = S.describe, S.it, S

-- The kernel cache: CRESCENT_CACHE_DIR (ctest sets it), else a directory of this run for it and
-- the executables it starts, removed at the end; never the user's ~/.cache/crescent.
local own_cache
if (os.getenv("CRESCENT_CACHE_DIR") or "") == "" then
  own_cache = SH.tmpdir()
  require("crescent").config.cache_dir = own_cache
  SH.child_env = "CRESCENT_CACHE_DIR=" .. SH.quote(own_cache)
end

-- "--coverage": load every spec file without running its specs (it() does nothing), then check
-- the registry coverage; ctest runs the files one per test and this check as one more.
local coverage_only = arg[1] == "--coverage"
if coverage_only then S.it = function() end; _G.it = S.it end
local files = {}
for i = coverage_only and 2 or 1, #arg do files[#files + 1] = arg[i] end
if #files == 0 then
  for _, name in ipairs(SH.ls(dir, "^test_.*%.lua$")) do files[#files + 1] = dir .. name end
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
if #arg == 0 or (coverage_only and #files > 0 and #arg == 1) then S.check_coverage() end

if own_cache then SH.rm(own_cache) end
for _, f in ipairs(S.failures) do io.stderr:write("FAIL ", f, "\n") end
local r = S.results
print(string.format("%d passed, %d failed, %d skipped", r.passed, r.failed, r.skipped))
-- close the Lua state on exit (true): every tensor is released, so LeakSanitizer sees no leaks
os.exit(r.failed == 0 and 0 or 1, true)
