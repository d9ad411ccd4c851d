-- Shell commands, files and child processes for the tests (spec files, tests/diff/, the PyTorch
-- bridge): one quoting rule, one way to read a command's exit status, one temporary directory.
local SH = {}

function SH.quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local quote = SH.quote

-- Runs a shell command: its output (stdout and stderr) and exit status (LuaJIT's popen():close()
-- does not report the status, so the command echoes it).
function SH.run(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"exit-status=$?\"")
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("exit%-status=(%d+)%s*$"))
  return (out:gsub("exit%-status=%d+%s*$", "")), code or 1
end

-- A whole file's bytes ("" when it cannot be read, with allow_missing), and a file written with `bytes`.
function SH.read(path, allow_missing)
  local f = io.open(path, "rb")
  if not f and allow_missing then return "" end
  assert(f, "cannot read " .. path)
  local s = f:read("*a")
  f:close()
  return s
end
function SH.write(path, bytes)
  local f = assert(io.open(path, "wb"))
  assert(f:write(bytes))
  f:close()
end

-- A new empty directory (mode 0700 unless given), and removing a file or directory tree.
function SH.tmpdir(mode)
  local dir = (SH.run("mktemp -d"):gsub("%s+$", ""))
  if mode then os.execute(("chmod %s %s"):format(mode, quote(dir))) end
  return dir
end
function SH.rm(path) os.execute("rm -rf " .. quote(path)) end

-- Runs fn(dir) with a new directory, removed afterwards (its errors are raised again).
function SH.with_dir(fn, mode)
  local dir = SH.tmpdir(mode)
  local ok, err = pcall(fn, dir)
  os.execute("chmod -R u+w " .. quote(dir) .. " 2>/dev/null")
  SH.rm(dir)
  if not ok then error(err, 0) end
end

-- The names in dir, sorted; only those matching the Lua pattern `pattern` when given.
function SH.ls(dir, pattern)
  local out, names = SH.run("ls -A " .. quote(dir)), {}
  for name in out:gmatch("[^\n]+") do
    if not pattern or name:find(pattern) then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

function SH.now()
  return tonumber((SH.run("date +%s.%N")))
end

-- The crescent executable for tests that start one: CRESCENT_BIN (set by tests/CMakeLists.txt),
-- else the one running the tests; nil when unknown.
function SH.crescent_bin()
  local b = os.getenv("CRESCENT_BIN")
  if b and b ~= "" then return b end
  if not arg then return nil end
  local i = -1
  while arg[i - 1] do i = i - 1 end
  return arg[i]
end

-- Runs the crescent executable with the argument list `args`; opts: script (a Lua text run as the
-- first argument), stdin (text), env ("NAME=value ..."), merge (stderr into stdout, in order).
-- SH.child_env (run.lua's kernel cache) comes before opts.env, and so does a progress threshold
-- of a day.
-- Returns stdout, stderr, exit status; nil and why when the executable is unknown.
function SH.crescent(args, opts)
  opts = opts or {}
  local bin = SH.crescent_bin()
  if not bin then return nil, "the crescent executable is unknown (set CRESCENT_BIN)" end
  local base = os.tmpname()
  -- (no progress note unless a test asks: a slow compile on a loaded machine would change stderr)
  local cmd = { SH.child_env or "", "CRESCENT_PROGRESS_AFTER=86400", opts.env or "", "CRESCENT_HISTORY=", quote(bin) }
  if opts.script then
    SH.write(base .. ".lua", opts.script)
    cmd[#cmd + 1] = quote(base .. ".lua")
  end
  for _, a in ipairs(args or {}) do cmd[#cmd + 1] = quote(a) end
  SH.write(base .. ".in", opts.stdin or "")
  cmd[#cmd + 1] = ("< %s > %s %s; echo $?"):format(quote(base .. ".in"), quote(base .. ".out"),
    opts.merge and "2>&1" or "2> " .. quote(base .. ".err"))
  local p = io.popen(table.concat(cmd, " "))
  local status = tonumber(p:read("*a"))
  p:close()
  local out, err = SH.read(base .. ".out", true), SH.read(base .. ".err", true)
  for _, suffix in ipairs({ "", ".lua", ".in", ".out", ".err" }) do os.remove(base .. suffix) end
  return out, err, status
end

return SH
