-- The `crescent` executable (API.md section 7): scripts and their `arg`, -e, -i, the REPL on
-- piped input, --version, --help, and exit status 1 with the traceback on errors. Runs the
-- executable named by CRESCENT_BIN (set by tests/CMakeLists.txt), else the one running this file.

local SH = require "shell"
local BIN = SH.crescent_bin()
local quote, slurp, spit = SH.quote, function(path) return SH.read(path, true) end, SH.write

-- Runs BIN with the argument list (and `stdin` text piped in); returns stdout, stderr, status.
local function run(args, stdin) return expect.crescent(args, { stdin = stdin }) end

-- A script file that lives for one test.
local function script(text)
  local path = os.tmpname() .. "_script.lua"
  spit(path, text)
  return path
end

local function has(s, part, what)
  if not s:find(part, 1, true) then
    error(string.format("%s does not contain %q:\n%s", what or "output", part, s), 2)
  end
end

describe("crescent executable", function()
  it("prints its version and help", function()
    local out, _, st = run({ "--version" })
    expect.eq(st, 0)
    expect.truthy(out:match("^crescent %d+%.%d+%.%d+ %(LuaJIT"), out)
    expect.eq(run({ "-v" }), out)
    expect.eq(run({ "--version", "-e", "print('went on')" }), out .. "went on\n")  -- (as -v: goes on)
    out, _, st = run({ "--help" })
    expect.eq(st, 0)
    has(out, "usage: crescent")
    has(out, "-e chunk")
    has(out, "-i ")
    for _, part in ipairs({ "-l name", "-j cmd", "-O[opt]", "-b ...", "-E ", "LUA_INIT", "CRESCENT_NUM_THREADS", "CRESCENT_LOGS",
                            "CRESCENT_TRACEBACK", "CRESCENT_CACHE_MAX_MB", "CRESCENT_JIT_FORK" }) do
      has(out, part)
    end
    expect.eq(run({ "-h" }), out)
  end)

  it("runs -e chunks in order with the module preloaded", function()
    local out, err, st = run({ "-e", "x = 20", "-e", "print(x + 1, crescent.ones(2):sum():item())" })
    expect.eq(err, "")
    expect.eq(st, 0)
    expect.eq(out, "21\t2\n")
  end)

  it("runs a script with `arg` and `...`", function()
    local path = script("print(arg[0], arg[1], arg[2], select('#', ...), ...)\nprint(arg[-1])\n")
    local out, err, st = run({ path, "one", "two words" })
    os.remove(path)
    expect.eq(err, "")
    expect.eq(st, 0)
    expect.eq(out, path .. "\tone\ttwo words\t2\tone\ttwo words\n" .. BIN .. "\n")
  end)

  it("stops option handling at the script and at --", function()
    local path = script("print(table.concat(arg, ','))\n")
    local out, _, st = run({ "--", path, "-e", "--version" })
    os.remove(path)
    expect.eq(st, 0)
    expect.eq(out, "-e,--version\n")
  end)

  it("reads the script from stdin with -", function()
    local out, _, st = run({ "-", "a" }, "print('from stdin', ...)\n")
    expect.eq(st, 0)
    expect.eq(out, "from stdin\ta\n")
  end)

  it("exits 1 with the message and the traceback on a runtime error", function()
    local path = script("local T = crescent\nlocal function f(x)\n  local y = x + T.ones(3)\n  return y\nend\nf(T.ones(2))\nprint('not reached')\n")
    local out, err, st = run({ path })
    os.remove(path)
    expect.eq(st, 1)
    expect.eq(out, "")
    has(err, "crescent: " .. path .. ":3: add: shapes {2} and {3} cannot be broadcast", "stderr")
    has(err, "stack traceback:", "stderr")
    has(err, path .. ":6: in main chunk", "stderr")
  end)

  it("shows the frames inside a compiled function where its error was raised", function()
    local path = script("local T = crescent\nlocal function f(x)\n  local y = x + T.ones(3)\n  return y\nend\n" ..
      "local function g(x)\n  local z = f(x)\n  return z\nend\nlocal c = T.compile(g)\nc(T.ones(2))\n")
    local _, err, st = run({ path })
    os.remove(path)
    expect.eq(st, 1)
    expect.eq(err, "crescent: " .. path .. ":3: add: shapes {2} and {3} cannot be broadcast\nstack traceback:\n\t" ..
      path .. ":3: in function 'f'\n\t" .. path .. ":7: in function <" .. path .. ":6>\n\t" .. path .. ":11: in main chunk\n")
  end)

  it("leaves crescent's own frames out of tracebacks unless CRESCENT_TRACEBACK=full", function()
    local path = script("local T = crescent\nlocal function f(x)\n  local y = x + T.ones(3)\n  return y\nend\nf(T.ones(2))\n")
    local _, err, st = run({ path })
    expect.eq(st, 1)
    expect.eq(err, "crescent: " .. path .. ":3: add: shapes {2} and {3} cannot be broadcast\nstack traceback:\n\t" ..
      path .. ":3: in function 'f'\n\t" .. path .. ":6: in main chunk\n")
    _, err, st = expect.crescent({ path }, { env = "CRESCENT_TRACEBACK=full" })
    expect.eq(st, 1)
    has(err, "[crescent] crescent.core:", "stderr")
    has(err, path .. ":6: in main chunk", "stderr")
    _, err, st = expect.crescent({ path }, { env = "CRESCENT_TRACEBACK=all" })
    expect.eq({ st, err }, { 1, 'crescent: CRESCENT_TRACEBACK: expected short or full, got "all"\n' })
    os.remove(path)
  end)

  it("reports an error in a tail call at the line of the tail call", function()
    local path = script(table.concat({
      "local T, nn = crescent, crescent.nn",
      "local MLP = nn.Module:extend('MLP')",
      "function MLP:init() self.fc1 = nn.Linear(3, 4); self.fc2 = nn.Linear(5, 3) end",
      "function MLP:forward(x)",
      "  local h = self.fc1(x)",
      "  return self.fc2(h)",
      "end",
      "local m = MLP()",
      "local f = T.compile(function(x) return T.add(x, T.ones(3)) end)",
      "print(select(2, pcall(function() local y = m(T.randn(2, 3)); return y end)))",
      "print(select(2, pcall(f, T.ones(2))))",
      "print(select(2, pcall(T.compile(m), T.randn(2, 3))))",
      "local y = T.ones(4, 2)",
      "local function f(x)",
      "  return x:matmul(y)",  -- line 15
      "end",
      "function g(x) return T.matmul(x, y) end",
      "local M = { h = function(x) return T.matmul(x, y) end }",
      "function M:k(x) return x:matmul(y) end",  -- line 19
      "print(select(2, pcall(function() local r = f(T.ones(2, 3)); return r end)))",
      "print(select(2, pcall(function() local r = g(T.ones(2, 3)); return r end)))",
      "print(select(2, pcall(function() local r = M.h(T.ones(2, 3)); return r end)))",
      "print(select(2, pcall(function() local r = M:k(T.ones(2, 3)); return r end)))",
      "print(select(2, pcall(function() local r = f(T.ones(2, 4)) + T.matmul(T.ones(2, 3), y); return r end)))",  -- line 24
      "local r = f(T.ones(2, 3))",
    }, "\n"))
    local out, err, st = run({ path })
    os.remove(path)
    expect.eq(st, 1, err)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    expect.eq(#lines, 8, out)
    expect.truthy(lines[1]:find(path .. ":6: linear:", 1, true), out)
    expect.truthy(lines[2]:find(path .. ":9: add: shapes {2} and {3}", 1, true), out)
    expect.truthy(lines[3]:find(path .. ":6: linear:", 1, true), out)
    -- plain functions that tail-call an op: a local, a global, a field, a method
    for i, line in ipairs({ 15, 17, 18, 19 }) do
      expect.truthy(lines[3 + i]:find(path .. ":" .. line .. ": matmul: shapes {2,3} and {4,2}", 1, true), out)
    end
    -- the op called directly on a line that also calls a tail-calling function
    expect.truthy(lines[8]:find(path .. ":24: matmul: shapes {2,3} and {4,2}", 1, true), out)
    has(err, "crescent: " .. path .. ":15: matmul: shapes {2,3} and {4,2}", "stderr")
  end)

  it("rejects an unknown CRESCENT_LOGS name, listing the valid ones", function()
    local kValid = "(expected a comma list of: graph, guards, recompiles, graph_breaks, perf, fusion, output_code, host_ops, aot, " ..
                   "partition, cudagraphs, autotune, progress; -name turns one off)"
    local out, err, st = expect.crescent({ "-e", "print(1)" }, { env = "CRESCENT_LOGS=graph,grpah" })
    expect.eq(st, 1)
    expect.eq(out, "")
    has(err, 'crescent: CRESCENT_LOGS / T.compiler.set_logs: unknown log name "grpah" ' .. kValid, "stderr")
    out, err, st = expect.crescent({ "-e", "print(1)" }, { env = "CRESCENT_LOGS=' graph, +recompiles,'" })
    expect.eq(st, 0, err)
    expect.eq(out, "1\n")
    local ok, e = pcall(crescent.compiler.set_logs, "perf,xx")
    expect.truthy(not ok and e:find('unknown log name "xx" ' .. kValid, 1, true), e)
    crescent.compiler.set_logs("")
  end)

  it("rejects environment numbers out of their range and unknown words, naming the variable and what it takes", function()
    for _, case in ipairs({
      { "CRESCENT_JIT_TIMEOUT=abc", 'CRESCENT_JIT_TIMEOUT: expected a number from 0.001 to 86400, got "abc"' },
      { "CRESCENT_JIT_TIMEOUT=0", 'CRESCENT_JIT_TIMEOUT: expected a number from 0.001 to 86400, got "0"' },
      { "CRESCENT_JIT_FORK=no", 'CRESCENT_JIT_FORK: expected a whole number from 0 to 1, got "no"' },
      { "CRESCENT_CUDA_WAVES=8x", 'CRESCENT_CUDA_WAVES: expected a whole number from 1 to 1024, got "8x"' },
      { "CRESCENT_CPU_STREAM_BYTES=1.5", 'CRESCENT_CPU_STREAM_BYTES: expected a whole number from 1 to 1e+15, got "1.5"' },
      { "CRESCENT_CUDA_MAX_SPLIT_MB=8", 'CRESCENT_CUDA_MAX_SPLIT_MB: expected a whole number from 20 to 1000000000, got "8"' },
      { "CRESCENT_CUDA_PDL=2", 'CRESCENT_CUDA_PDL: expected a whole number from 0 to 1, got "2"' },
      { "CRESCENT_DIST_TIMEOUT=x", 'CRESCENT_DIST_TIMEOUT: expected a number from 0.001 to 1000000000, got "x"' },
      { "CRESCENT_TRACEBACK=bogus", 'CRESCENT_TRACEBACK: expected short or full, got "bogus"' },
      { "CRESCENT_CUDNN=7", 'CRESCENT_CUDNN: expected 0 or 1, got "7"' },
      { "CRESCENT_CUDNN_SDP=yes", 'CRESCENT_CUDNN_SDP: expected 0 or 1, got "yes"' },
      { "CRESCENT_CUDNN_API=foo", 'CRESCENT_CUDNN_API: expected graph or legacy, got "foo"' },
    }) do
      local out, err, st = expect.crescent({ "-e", "print(1)" }, { env = case[1] })
      expect.eq(st, 1, case[1])
      expect.eq(out, "")
      expect.eq(err, "crescent: " .. case[2] .. "\n")
    end
    local env = "CRESCENT_JIT_TIMEOUT=0.5 CRESCENT_JIT_FORK=0 CRESCENT_CUDA_WAVES=4 CRESCENT_CUDA_PDL=0 CRESCENT_TRACEBACK=full "
      .. "CRESCENT_CUDNN=0 CRESCENT_CUDNN_API=legacy CRESCENT_DIST_TIMEOUT=30"
    local out, err, st = expect.crescent({ "-e", "print(1)" }, { env = env })
    expect.eq(st, 0, err)
    expect.eq(out, "1\n")
  end)

  it("exits 1 on -e errors, syntax errors, missing scripts and bad options", function()
    local _, err, st = run({ "-e", "error('boom')" })
    expect.eq(st, 1)
    has(err, "crescent: (command line):1: boom", "stderr")
    has(err, "stack traceback:", "stderr")
    local path = script("x = = 1\n")
    _, err, st = run({ path })
    os.remove(path)
    expect.eq(st, 1)
    has(err, path .. ":1:", "stderr")
    _, err, st = run({ "/nonexistent/dir/x.lua" })
    expect.eq(st, 1)
    has(err, "cannot open", "stderr")
    _, err, st = run({ "--frobnicate" })
    expect.eq(st, 1)
    has(err, "unknown option --frobnicate", "stderr")
    _, err, st = run({ "-e" })
    expect.eq(st, 1)
    has(err, "-e needs an argument", "stderr")
    _, err, st = run({ "-e", "os.exit(3)" })
    expect.eq(st, 3)
  end)
end)

describe("crescent as a drop-in for luajit", function()
  local function has_bcsave()
    if not pcall(require, "jit.bcsave") then expect.skip("LuaJIT's jit/*.lua files are not installed") end
  end

  it("runs -l, -j, -O and -e in command-line order, -e attached or not", function()
    local out, err, st = run({ "-joff", "-eprint(jit.status())", "-jon", "-O-fold", "-e", "print(jit.status())" })
    expect.eq(err, "")
    expect.eq(st, 0)
    local first, second = out:match("^([^\n]*)\n([^\n]*)\n$")
    expect.truthy(first and first:match("^false"), out)
    expect.truthy(second:match("^true") and not second:find("fold", 1, true), out)
    out, err, st = run({ "-l", "jit.util", "-e", "print(type(_G['jit.util'].funcinfo))" })
    expect.eq(st, 0, err)
    expect.eq(out, "function\n")
  end)

  it("starts a jit.* module with -j", function()
    has_bcsave()
    local _, err, st = run({ "-jv", "-e", "local s = 0 for i = 1, 300 do s = s + i end" })
    expect.eq(st, 0, err)
    has(err, "[TRACE", "stderr")
  end)

  it("names the option in its errors and exits 1", function()
    local _, err, st = run({ "-jnosuchcmd", "-e", "print(1)" })
    expect.eq(st, 1)
    has(err, "crescent: -jnosuchcmd: unknown LuaJIT command", "stderr")
    _, err, st = run({ "-Ohotloop=abc" })
    expect.eq(st, 1)
    has(err, "crescent: -Ohotloop=abc: unknown or malformed optimization flag", "stderr")
    _, err, st = run({ "-l", "no_such_module_x" })
    expect.eq(st, 1)
    has(err, "crescent: -l no_such_module_x: module 'no_such_module_x' not found", "stderr")
    _, err, st = run({ "-e", "1", "-b", "x" })
    expect.eq(st, 1)
    has(err, "-b must be the first option", "stderr")
    _, err, st = run({ "-l" })
    expect.eq(st, 1)
    has(err, "-l needs an argument", "stderr")
  end)

  it("saves and lists bytecode with -b", function()
    has_bcsave()
    local src, bc = script("print('from bytecode', ...)\n"), os.tmpname()
    local out, err, st = run({ "-b", src, bc })
    expect.eq(st, 0, err)
    expect.eq(out, "")
    out, err, st = run({ bc, "x" })
    expect.eq(st, 0, err)
    expect.eq(out, "from bytecode\tx\n")
    out, _, st = run({ "-bl", src })
    os.remove(src)
    os.remove(bc)
    expect.eq(st, 0)
    has(out, "-- BYTECODE --")
    has(out, "KSTR")
  end)

  it("prints the version with -v and goes on; `arg` has the options at negative indices", function()
    local path = script("print(arg[-3], arg[-2], arg[-1], arg[0], arg[1])\n")
    local out, err, st = run({ "-v", "-e", "x = 1", path, "a" })
    os.remove(path)
    expect.eq(st, 0, err)
    expect.eq(out, run({ "--version" }) .. "-v\t-e\tx = 1\t" .. path .. "\ta\n")
  end)

  it("runs LUA_INIT (a chunk, or @file) before the options and the script; -E ignores it", function()
    local path = script("print('script', init, arg[1])\n")
    local init = script("init = 'from file'; print('init file', arg[0])\n")
    local chunk = "LUA_INIT='init = 7; print(\"init chunk\")'"
    local out, err, st = expect.crescent({ "-e", "print('e', init)", path, "a" }, { env = chunk })
    expect.eq(st, 0, err)
    expect.eq(out, "init chunk\ne\t7\nscript\t7\ta\n")
    out, err, st = expect.crescent({ path }, { env = "LUA_INIT=@" .. quote(init) })
    expect.eq(st, 0, err)
    expect.eq(out, "init file\t" .. path .. "\nscript\tfrom file\tnil\n")
    out, err, st = expect.crescent({ "-E", path }, { env = chunk .. " LUA_PATH='/nowhere/?.lua'" })
    expect.eq(st, 0, err)
    expect.eq(out, "script\tnil\tnil\n")
    out = expect.crescent({ "-E", "-e", "print(package.path:find('/nowhere/', 1, true))" }, { env = "LUA_PATH='/nowhere/?.lua'" })
    expect.eq(out, "nil\n")
    out = expect.crescent({ "-e", "print(package.path:find('/nowhere/', 1, true))" }, { env = "LUA_PATH='/nowhere/?.lua'" })
    expect.eq(out, "1\t9\n")
    out, err, st = expect.crescent({ "-e", "print('not reached')" }, { env = "LUA_INIT='error(\"boom\")'" })
    expect.eq({ out, st }, { "", 1 })
    has(err, "crescent: LUA_INIT:1: boom", "stderr")
    out, err, st = expect.crescent({ path }, { env = "LUA_INIT=@/no/such/init.lua" })
    expect.eq({ out, st }, { "", 1 })
    has(err, "crescent: cannot open /no/such/init.lua", "stderr")
    os.remove(path)
    os.remove(init)
  end)
end)

describe("crescent REPL on piped input", function()
  it("prints expression values and no prompts", function()
    local out, err, st = run({}, "1 + 1\nx = 5\nx * 2\n'a', nil, true\n=x\n")
    expect.eq(err, "")
    expect.eq(st, 0)
    expect.eq(out, "2\n10\na\tnil\ttrue\n5\n")
  end)

  it("pretty-prints tensors", function()
    local out, _, st = run({}, "crescent.ones(2, 2)\n")
    expect.eq(st, 0)
    expect.eq(out, tostring(crescent.ones(2, 2)) .. "\n")
    has(out, "tensor(")
  end)

  it("continues multi-line input until the chunk is complete", function()
    local input = table.concat({
      "function f(a, b)",
      "  local s = a + b",
      "  return s * 10",
      "end",
      "f(1,",
      "  2)",
      "t = {",
      "  'x',",
      "}",
      "#t",
      "s = [[line1",
      "line2]]",
      "s",
      "1 +",
      "  41",
      "",
    }, "\n")
    local out, err, st = run({}, input)
    expect.eq(err, "")
    expect.eq(st, 0)
    expect.eq(out, "30\n1\nline1\nline2\n42\n")
  end)

  it("reports errors with their location, keeps going, and exits 1 at the end", function()
    local out, err, st = run({}, "error('boom')\nprint('still here')\ncrescent.ones(2) + crescent.ones(3)\nx = = 1\n2 + 2\n")
    expect.eq(st, 1)
    expect.eq(out, "still here\n4\n")
    has(err, "stdin:1: boom", "stderr")
    has(err, "stack traceback:", "stderr")
    has(err, "stdin:1: add: shapes {2} and {3} cannot be broadcast", "stderr")
    has(err, "stdin:1: unexpected symbol near '='", "stderr")
  end)

  it("reports an unfinished chunk at the end of input", function()
    local out, err, st = run({}, "print(1)\nfor i = 1, 2 do\n")
    expect.eq(st, 1)
    expect.eq(out, "1\n")
    has(err, "'<eof>'", "stderr")
  end)

  -- The REPL's output for these input lines, which raise no error.
  local function repl(lines)
    local out, err, st = run({}, table.concat(lines, "\n") .. "\n")
    expect.eq(err, "")
    expect.eq(st, 0)
    return out
  end

  it("predefines T, shows sizes as {2, 3}, keeps `_`, and hides values after `;`", function()
    local out = repl({
      "x = T.ones(2, 3); x.shape",  -- statements, then an expression: no continuation
      "x:size() == T.zeros(2, 3).shape, x.shape:equals{2, 3}, x.shape:equals{3, 2}",
      "T.randn(4, 5);", "_.shape", "_", "a, b = 1; b",
    })
    expect.eq(out, "{2, 3}\ntrue\ttrue\tfalse\n{4, 5}\n{4, 5}\nnil\n")
  end)

  it("splits a tail expression at a `;` outside strings and comments only", function()
    local out, err, st = run({}, table.concat({
      "x = 1 -- keep; os.exit(3)", "print('still here')", "y = 2", "x = 5 -- note; y", "s = 'a;b' ; s",
      "t = [[;x]] ; #t", "--[==[ ; ]==] w = 3; w + 1", "z = 1; nope()", "",
    }, "\n"))
    expect.eq(st, 1)
    expect.eq(out, "still here\na;b\n2\n4\n")
    has(err, "stdin:1: attempt to call global 'nope'", "stderr")
  end)

  it("prints each command's time after its results with T.config.repl_timing", function()
    local out = repl({ "T.config.repl_timing = true", "1 + 1", "T.config.repl_timing = false", "3" })
    expect.truthy(out:match("^%(%d+%.%d ms%)\n2\n%(%d+%.%d ms%)\n3\n$"), out)
  end)

  it("pretty-prints tables: nested, sorted keys, tensors in short, cycles marked", function()
    local out = repl({
      "{3, 'a', k = {x = true}, ['odd key'] = 1, t = T.zeros(2, {dtype = 'int64'})}",
      "c = {1}; c.me = c; c",
      "s = {}; for i = 1, 30 do s['key' .. i] = i end; s",
      "T.config",
    })
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    expect.eq(lines[1], '{3, "a", k = {x = true}, ["odd key"] = 1, t = tensor<{2}, int64>}')
    expect.truthy(lines[2]:match("^{1, me = <cycle: table: 0x%x+>}$"), lines[2])
    expect.eq(lines[3], "{")  -- too long for one line: one entry a line
    expect.eq(lines[4], "  key1 = 1,")
    expect.eq(lines[34], "}")
    has(out, "\n  cache_size_limit = 8,\n")  -- a proxy (T.config) shows what it reads
  end)

  it("describes ops, functions and nn classes with help() and `?`", function()
    local out, err, st = run({}, "help(T.randn)\n? T.ones(2):sum\nx = T.ones(2)\n? x:sum\nhelp(T.nn.Linear)\n" ..
                                 "help(function(a, b) end)\nhelp(T.no_such_thing)\nhelp()\n")
    expect.eq(st, 0, err)
    has(out, "randn(size: int..., {dtype = string, device = string}) -> Tensor\n  creation op; T.randn(...) only\n")
    has(out, "sum(self: Tensor, [dim: dim|{dims}], [keepdim: boolean], {dtype = string}) -> Tensor\n" ..
             "  reduction; T.sum(...) or x:sum(...)\nsum(self: Tensor")
    has(out, "nn.Linear(din, dout, opts): an nn module class")
    has(out, "function(a, b), defined at stdin:1")
    has(out, "nil: no value")
    has(out, "crescent REPL: T (= crescent) is the module.")
  end)

  it("stops a pure-Lua loop at Ctrl-C (SIGINT) and goes on", function()
    local bin = expect.need_bin()
    local base = os.tmpname()
    spit(base .. ".in", "io.write('looping\\n'); io.flush(); local n = 0; while true do n = n + 1 end\nprint('alive')\n")
    -- SIGINT once the loop has started; a loop that ignores it is killed after 60 s (and fails)
    local out = SH.run(("%s CRESCENT_HISTORY= %s < %s > %s 2> %s & pid=$!; " ..
      "for i in $(seq 600); do grep -q looping %s && break; sleep 0.1; done; kill -INT $pid; " ..
      "for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; " ..
      "kill -KILL $pid 2>/dev/null && echo hung; wait $pid; echo status=$?"):format(SH.child_env or "", quote(bin),
      quote(base .. ".in"), quote(base .. ".out"), quote(base .. ".err"), quote(base .. ".out")))
    local stdout, stderr = slurp(base .. ".out"), slurp(base .. ".err")
    for _, suffix in ipairs({ "", ".in", ".out", ".err" }) do os.remove(base .. suffix) end
    expect.eq(out, "status=1\n")  -- (piped input that raised an error)
    expect.eq(stdout, "looping\nalive\n")
    has(stderr, "interrupted!", "stderr")
  end)

  it("enters the REPL after a script with -i", function()
    local path = script("answer = 41\nfunction inc(x) return x + 1 end\n")
    local out, err, st = run({ "-i", path }, "inc(answer)\n")
    os.remove(path)
    expect.eq(err, "")
    expect.eq(st, 0)
    expect.eq(out, "42\n")
    out, _, st = run({ "-i", "-e", "y = 3" }, "y * y\n")
    expect.eq(st, 0)
    expect.eq(out, "9\n")
  end)

  it("exits with the status given to os.exit", function()
    local out, _, st = run({}, "print('bye')\nos.exit(4)\nprint('not reached')\n")
    expect.eq(out, "bye\n")
    expect.eq(st, 4)
  end)
end)

describe("crescent REPL on a terminal", function()
  -- util-linux `script` runs the REPL on a pseudo-terminal, feeding it our input
  local function on_tty(input, history)
    expect.need_bin()
    local p = io.popen("command -v script 2>/dev/null")
    local found = p:read("*a")
    p:close()
    if found == "" then expect.skip("no util-linux script(1) to make a terminal") end
    local base = os.tmpname()
    spit(base .. ".in", input)
    local cmd = string.format("CRESCENT_HISTORY=%s TERM=dumb script -qec %s /dev/null < %s > %s 2>&1; echo $?",
      quote(history), quote(quote(BIN)), quote(base .. ".in"), quote(base .. ".out"))
    p = io.popen(cmd)
    local status = tonumber(p:read("*a"))
    p:close()
    local out = slurp(base .. ".out"):gsub("\r", "")
    for _, suffix in ipairs({ "", ".in", ".out" }) do os.remove(base .. suffix) end
    return out, status
  end

  -- The history file's entries: each follows a "#<time>" line; a multi-line one is one entry.
  local function entries(path)
    local text, list = slurp(path), {}
    expect.truthy(text == "" or text:match("^#%d+\n"), text)
    for entry in ("\n" .. text .. "#0\n"):gmatch("(.-)\n#%d+\n") do list[#list + 1] = entry end
    table.remove(list, 1)  -- (the text before the first time line)
    return list
  end

  it("shows the banner and prompts, continues lines and keeps a history file", function()
    local history = os.tmpname()
    os.remove(history)
    local out, st = on_tty("1 + 1\nfunction f(a)\nreturn a * 2\nend\nf(21)\n", history)
    expect.eq(st, 0)
    has(out, "crescent " .. crescent.version)
    has(out, "> 1 + 1\n2\n")
    has(out, ">> return a * 2\n")
    has(out, "> f(21)\n42\n")
    expect.eq(entries(history), { "1 + 1", "function f(a)\nreturn a * 2\nend", "f(21)" })
    -- a second session appends to the same file, and recalls a block whole (Ctrl-P, Enter)
    out, st = on_tty("=3\n\16\16\16\nf(2)\n", history)
    expect.eq(st, 0)
    has(out, "3\n")
    has(out, "> f(2)\n4\n")
    local block = "function f(a)\nreturn a * 2\nend"
    expect.eq(entries(history), { "1 + 1", block, "f(21)", "=3", block, "f(2)" })
    os.remove(history)
  end)

  it("reads a history file of one line an entry and rewrites it with time lines", function()
    local history = os.tmpname()
    spit(history, "x = 5\nprint(x)\n")
    local out, st = on_tty("\16\16\n\16\16\n", history)  -- recall `x = 5`, then `print(x)`
    expect.eq(st, 0)
    has(out, "5\n")
    expect.eq(entries(history), { "x = 5", "print(x)", "x = 5", "print(x)" })
    os.remove(history)
  end)

  it("hides a value after `;`, keeps it in `_`, and helps", function()
    local history = os.tmpname()
    local out, st = on_tty("x = T.ones(2):sum();\nT.ones(3):sum();\n_\n? T.randn\n", history)
    os.remove(history)
    expect.eq(st, 0)
    has(out, "help() helps")
    has(out, "> T.ones(3):sum();\n> _\n" .. tostring(crescent.ones(3):sum()) .. "\n")
    has(out, "> ? T.randn\nrandn(size: int...")
  end)

  it("completes globals, fields and a tensor's methods with Tab", function()
    local history = os.tmpname()
    local out, st = on_tty("T.linsp\t(1, 3, 3)\nx = T.ones(2, 2)\nx:cums\t(1)\nprint(string.upp\t('ok'))\n", history)
    os.remove(history)
    expect.eq(st, 0)
    has(out, "> T.linspace(1, 3, 3)\n" .. tostring(crescent.linspace(1, 3, 3)))
    has(out, "> x:cumsum(1)\n" .. tostring(crescent.ones(2, 2):cumsum(1)))
    has(out, "> print(string.upper('ok'))\nOK\n")
  end)

  it("runs without a history file when it cannot be written", function()
    local out, st = on_tty("2 * 21\n", "/nonexistent/dir/history")
    expect.eq(st, 0)
    has(out, "42\n")
  end)
end)
