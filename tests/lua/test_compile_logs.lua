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
      if suffix and ({ ["loops.txt"] = 1, ["fusion.txt"] = 1, ["kernels.c"] = 1, ["gccjit.c"] = 1, ["timings.txt"] = 1 })[suffix] then
        native[suffix] = true  -- the native code generator's dumps of the same graph
      else
        files[#files + 1] = name
      end
    end
    S.eq(#files, 1)
    for _, suffix in ipairs({ "loops.txt", "fusion.txt", "kernels.c", "timings.txt" }) do S.truthy(native[suffix], suffix) end
    local text = SH.read(dir .. "/" .. files[1])
    SH.rm(dir)
    S.truthy(text:find("guards of segment ending at return of", 1, true), text)
    S.truthy(text:find("input %0: float32{3} strides {1}", 1, true), text)
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
