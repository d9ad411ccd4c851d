-- What T.compile tells about its work: the dumps of CRESCENT_DEBUG_DIR / T.config.debug_dir
-- (guards, the recorded and the optimised graph, the native code generator's files), the perf log
-- of compile times, and the logs chosen with T.compiler.set_logs or CRESCENT_LOGS.
local T = require "crescent"
local S = expect
local SH = require "shell"

describe("compiled graph dumps", function()
  S.native_it("writes guards, the recorded and the optimised graph and the compile time per graph", function()
    local dir = SH.tmpdir()
    local saved = T.config.debug_dir
    T.config.debug_dir = dir
    local f = T.compile(function(x)
      local a = x + 1
      local b = x + 1  -- merged with a
      return (a * b):sin()
    end)
    for _ = 1, 4 do f(T.ones(3)) end
    T.config.debug_dir = saved
    f(T.ones(3))
    local files, native = {}, {}
    for _, name in ipairs(SH.ls(dir)) do
      local suffix = name:match("%.(%a+%.%a+)$")
      suffix = suffix or name:match("%.(dot)$") or name:match("%.(svg)$")
      if suffix and ({ ["loops.txt"] = 1, ["fusion.txt"] = 1, ["kernels.c"] = 1, ["gccjit.c"] = 1, ["timings.txt"] = 1,
                       dot = 1, svg = 1 })[suffix] then
        native[suffix] = true  -- the native code generator's dumps of the same graph
      else
        files[#files + 1] = name
      end
    end
    S.eq(#files, 1)
    for _, suffix in ipairs({ "loops.txt", "fusion.txt", "kernels.c", "timings.txt", "dot" }) do S.truthy(native[suffix], suffix) end
    local text = SH.read(dir .. "/" .. files[1])
    SH.rm(dir)
    S.truthy(text:find("guards of segment ending at return of", 1, true), text)
    S.truthy(text:find("input 1 (%0): float32{3} strides {1}", 1, true), text)
    S.truthy(text:find("-- recorded\ngraph", 1, true), text)
    S.truthy(text:find("-- optimised\ngraph", 1, true), text)
    S.truthy(text:find("%d+ = sin%(") and text:find("test_compile_logs%.lua:%d+"), text)
    S.truthy(text:find("-- compile time: [%d.]+ us"), text)
    -- the recorded graph has both adds, the optimised one a single add
    local recorded = text:match("%-%- recorded\n(.-)%-%- optimised")
    local optimised = text:match("%-%- optimised\n(.-)%-%- compile time")
    local _, n_rec = recorded:gsub("= add%(", "")
    local _, n_opt = optimised:gsub("= add%(", "")
    S.eq({ n_rec, n_opt }, { 2, 1 })
  end)

  it("logs the compile time of each graph with CRESCENT_LOGS=perf", function()
    local _, log = S.crescent({}, { env = "CRESCENT_LOGS=perf", script = [[local T = require "crescent"
local f = T.compile(function(x) return x * 2 + 1 end)
for _ = 1, 4 do f(T.ones(2)) end
]] })
    S.truthy(log:find("%[crescent perf%] .- compiled in [%d.]+ us %(2 ops %-> 2%)"), log)
  end)

  it("logs each native compile phase, in order, with CRESCENT_LOGS=perf", function()
    local _, log = S.crescent({}, { env = "CRESCENT_LOGS=perf CRESCENT_CACHE_DIR=0", script = [[local T = require "crescent"
T.config.sync_compile = true
local f = T.compile(function(x) return (x * 2 + 1):relu():sum() end)
for _ = 1, 4 do f(T.ones(64)) end
]] })
    local at = 0
    for _, phase in ipairs({ "lower [%d.]+ ms: %d+ loop values", "schedule [%d.]+ ms: 1 kernels", "emit [%d.]+ ms: cpu code, 1 functions for 1 kernels, key %x+",
                             "build [%d.]+ ms: compiled", "load [%d.]+ ms: program ready" }) do
      local found = log:find("%[crescent perf%] [^\n]-: " .. phase, at + 1)
      S.truthy(found, phase .. " after position " .. at .. " in:\n" .. log)
      at = found
    end
    S.truthy(log:find("native code in [%d.]+ ms %(1 kernels compiled; lower [%d.]+ ms, schedule [%d.]+ ms, emit", at + 1), log)
  end)
end)

describe("repeated kernels", function()
  S.native_it("compiles a kernel whose code repeats an earlier one's once, with the same results", function()
    local out, log = S.crescent({}, { env = "CRESCENT_LOGS=perf CRESCENT_CACHE_DIR=0", script = [[local T = require "crescent"
T.config.sync_compile = true
local function block(x) return (x - x:mean(-1, true)):relu() * 2 end
local function f(x, w) return block(block(x):matmul(w)) end
local g = T.compile(f)
local x, w = T.randn(8, 16), T.randn(16, 16)
local got
for _ = 1, 4 do got = g(x, w) end
print("difference " .. (got - f(x, w)):abs():max():item())
]] })
    local functions, kernels = log:match("emit [%d.]+ ms: cpu code, (%d+) functions for (%d+) kernels")
    S.truthy(functions, log)
    S.truthy(tonumber(functions) < tonumber(kernels), log)
    local diff = tonumber(out:match("difference (%S+)"))
    S.truthy(diff and diff < 1e-5, out .. log)
  end)
end)

-- Runs a script with the crescent executable; returns its stdout and stderr together.
local function run_script(text, env) return (S.crescent({}, { script = text, env = env, merge = true })) end

describe("compiler logs", function()
  local script = [[
    local T = require "crescent"
    %s
    local f = T.compile(function(x) local s = x:sum():item(); return x * s end)
    for _, n in ipairs({ 2, 2, 2, 3 }) do f(T.ones(n)) end
    io.stderr:write("MIDDLE\n")
    T.compiler.set_logs("")
    f(T.ones(4)); f(T.ones(4)); f(T.ones(4))
    io.stderr:write("END\n")
  ]]
  it("logs graphs, guards, recompiles and breaks with set_logs, and stops with \"\"", function()
    local out = run_script(script:format('T.compiler.set_logs("graph,guards,recompiles,graph_breaks")'))
    local before, after = out:match("^(.*)MIDDLE(.*)$")
    S.truthy(before, out)
    for _, kind in ipairs({ "graph", "guards", "recompiles", "graph_breaks" }) do
      S.truthy(before:find("[crescent " .. kind .. "]", 1, true), "no " .. kind .. " log in:\n" .. out)
    end
    S.truthy(before:find("item()", 1, true), out)
    S.truthy(not after:find("[crescent", 1, true), "logs after set_logs(\"\"):\n" .. after)
  end)
  it("reads CRESCENT_LOGS", function()
    local out = run_script(script:format(""), "CRESCENT_LOGS=recompiles")
    S.truthy(out:find("[crescent recompiles]", 1, true), out)
    S.truthy(not out:find("[crescent guards]", 1, true), out)
  end)
end)

describe("compile progress and graph pictures", function()
  local script = [[local T = require "crescent"
T.config.sync_compile = true
local f = T.compile(function(x) return (x * 2):sin() + 1 end)
for _ = 1, 4 do f(T.ones(3)) end
]]
  S.native_it("notes a compile past CRESCENT_PROGRESS_AFTER: the graph, kernels done / total", function()
    local _, err = S.crescent({}, { env = "CRESCENT_PROGRESS_AFTER=0", script = script })
    S.truthy(err:find("%[crescent progress%] compile of graph [^\n]+ %(cpu%) ended, (%d+) / %1 kernels, [%d.]+ s\n"), err)
    for _, logs in ipairs({ "-progress", "graph_breaks, -progress" }) do
      _, err = S.crescent({}, { env = "CRESCENT_PROGRESS_AFTER=0 CRESCENT_LOGS='" .. logs .. "'", script = script })
      S.eq(err, "")
    end
    _, err = S.crescent({}, { env = "CRESCENT_PROGRESS_AFTER=0", script = 'crescent.compiler.set_logs("-progress")\n' .. script })
    S.eq(err, "")
    _, err = S.crescent({ "-e", "print(1)" }, { env = "CRESCENT_PROGRESS_AFTER=soon" })
    S.truthy(err:find('CRESCENT_PROGRESS_AFTER: expected a number from 0 to 86400, got "soon"', 1, true), err)
  end)

  -- A small reader of the DOT subset written: statements one a line, clusters not nested.
  local function parse_dot(text)
    local lines = {}
    for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
    S.truthy(lines[1]:match('^digraph ".*" {$'), lines[1])
    S.eq(lines[#lines], "}")
    local g = { nodes = {}, clusters = {}, edges = {} }
    local cluster
    for i = 2, #lines - 1 do
      local l = lines[i]
      local id, label = l:match('^  (n%d+) %[label="(.-)"[^"]*%];$')
      if id then
        g.nodes[id] = label
      elseif l:match("^  subgraph cluster_%d+ {$") then
        S.truthy(not cluster, "nested cluster at line " .. i)
        cluster = {}
        g.clusters[#g.clusters + 1] = cluster
      elseif l == "  }" then
        S.truthy(cluster, "unopened } at line " .. i)
        cluster = nil
      elseif cluster and l:match("^    n%d+;$") then
        cluster[#cluster + 1] = l:match("n%d+")
      elseif not (cluster and (l:match("^    label=.*;$") or l:match("^    style=.*;$"))) and not l:match("^  node %[.*%];$") then
        local a, b = l:match("^  (n%d+) %-> (n%d+);$")
        S.truthy(a, "not DOT of this form at line " .. i .. ": " .. l)
        g.edges[#g.edges + 1] = { a, b }
      end
    end
    S.truthy(not cluster, "unclosed cluster")
    for _, e in ipairs(g.edges) do S.truthy(g.nodes[e[1]] and g.nodes[e[2]], "an edge to an undeclared node") end
    for _, c in ipairs(g.clusters) do
      for _, n in ipairs(c) do S.truthy(g.nodes[n], "a cluster member undeclared: " .. n) end
    end
    return g
  end

  S.native_it("writes each compiled graph as Graphviz DOT, a cluster per fused kernel", function()
    local dir = SH.tmpdir()
    local saved = T.config.debug_dir
    T.config.debug_dir = dir
    T.compiler.reset()
    local f = T.compile(function(x, w) return ((x * 2):sin():matmul(w)):exp() + 1 end)
    for _ = 1, 4 do f(T.ones(3, 4), T.ones(4, 5)) end
    T.config.debug_dir = saved
    local stats = T.compiler.stats()
    local dots, svgs = {}, 0
    for _, name in ipairs(SH.ls(dir)) do
      if name:match("%.dot$") then dots[#dots + 1] = name end
      if name:match("%.svg$") then svgs = svgs + 1 end
    end
    S.eq(#dots, 1)
    local g = parse_dot(SH.read(dir .. "/" .. dots[1]))
    SH.rm(dir)
    local rc = os.execute("command -v dot > /dev/null 2>&1")
    S.eq(svgs, (rc == 0 or rc == true) and 1 or 0)
    S.eq(#g.clusters, stats.kernels_compiled + stats.kernels_loaded)
    S.eq(#g.clusters, 2)  -- mul and sin before the matmul, exp and add after it
    local in_cluster = {}
    for k, c in ipairs(g.clusters) do
      for _, n in ipairs(c) do in_cluster[g.nodes[n]:match("= (%a+)%(")] = k end
    end
    S.eq(in_cluster, { mul = 1, sin = 1, exp = 2, add = 2 })
    local ops = {}
    for _, label in pairs(g.nodes) do ops[#ops + 1] = label:match("= (%a+)%(") or label:match("= (input) %d") end
    table.sort(ops)
    S.eq(ops, { "add", "exp", "input", "input", "matmul", "mul", "sin" })
  end)
end)
