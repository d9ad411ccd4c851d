-- The Lua side of a batch exchange with one python process, shared by tests/diff/diff_torch.lua
-- and the compile fuzzer's PyTorch comparison (tests/lua/fuzz_torch.lua): shell commands with
-- their exit status, the torch probe, a scratch directory, the time.
local X = {}

X.python = os.getenv("CRESCENT_TEST_PYTHON") or "/usr/bin/python3"
X.dir = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"  -- tests/diff/

-- Runs a shell command: its output (stdout and stderr) and exit status (LuaJIT's popen():close()
-- does not report the status, so the command echoes it).
function X.sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"exit-status=$?\"")
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("exit%-status=(%d+)%s*$"))
  return out:gsub("exit%-status=%d+%s*$", ""), code or 1
end

-- Whether `python` imports torch (and, for device "cuda", sees a GPU); memoised per device.
local probed = {}
function X.torch_available(python, device)
  local key = python .. "|" .. (device or "cpu")
  if probed[key] == nil then
    local probe = device == "cuda" and "import torch; assert torch.cuda.is_available(); print('torch-ok')"
      or "import torch; print('torch-ok')"
    probed[key] = X.sh(("%s -c %q"):format(python, probe)):find("torch-ok", 1, true) ~= nil
  end
  return probed[key]
end

-- A new empty directory for the exchange files.
function X.tmpdir()
  local tmp = os.tmpname()
  os.remove(tmp)
  X.sh("mkdir -p " .. tmp)
  return tmp
end

function X.now()
  local p = io.popen("date +%s.%N")
  local t = tonumber(p:read("*a"))
  p:close()
  return t
end

return X
