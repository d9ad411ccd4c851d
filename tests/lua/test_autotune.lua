-- mode = "max-autotune" and T.config.autotune (jit/autotune.hpp): every candidate configuration
-- of a kernel gives the default's results, choices are cached on disk (a second process times
-- nothing; a changed kernel or thread count tunes again), CRESCENT_LOGS=autotune reports them.
-- On CUDA (specs that skip without a GPU): the candidates are timed on the device, the winners
-- give the default's results, and a second process takes the choices from the cache.
-- That tuning never runs in the foreground is tests/cpp/test_autotune.cpp's.
local T = require "crescent"
local S = expect
local SH = require "shell"

local saved = { sync = T.config.sync_compile, dir = T.config.cache_dir, budget = T.config.autotune_budget_ms }

-- runs fn(dir) with a fresh cache directory, no budget to speak of, and in-line compiles
local function with_tuning(fn)
  SH.with_dir(function(dir)
    T.config.cache_dir, T.config.sync_compile, T.config.autotune_budget_ms = dir, true, 1e9
    local ok, err = pcall(fn, dir)
    T.config.cache_dir, T.config.sync_compile, T.config.autotune_budget_ms = saved.dir, saved.sync, saved.budget
    T.compiler.reset()
    if not ok then error(err, 0) end
  end)
end

local function delta(before, after)
  local d = {}
  for k, v in pairs(after) do d[k] = v - (before[k] or 0) end
  return d
end

-- candidates per kernel: 4 block sizes, times the other thread split when there are threads;
-- a kernel whose stores may stream also tries the other streaming choice with each split
local function per_kernel(streams)
  local splits = T.get_num_threads() > 1 and 2 or 1
  return 4 * splits + (streams and splits or 0)
end

describe("mode = \"max-autotune\": options", function()
  it("is a mode of T.compile; others are refused naming the three", function()
    S.truthy(T.compile(function(x) return x + 1 end, { mode = "max-autotune" }))
    S.errors(function() T.compile(function(x) return x end, { mode = "autotune" }) end,
      S.plain('compile: option mode expected "default", "reduce-overhead" or "max-autotune", got autotune'))
  end)
  it("T.config.autotune takes a boolean, autotune_budget_ms a non-negative number", function()
    S.eq(T.config.autotune, false)
    S.eq(saved.budget, 2000)
    S.errors(function() T.config.autotune = 1 end, "config: autotune expected a boolean, got 1")
    S.errors(function() T.config.autotune_budget_ms = -1 end,
      S.plain("config: autotune_budget_ms expected a non-negative number of ms, got -1"))
    S.eq(T.config.autotune_budget_ms, 2000)
  end)
end)

-- each fn with its inputs (T.randn, or case[5]); `reduced`: its kernels reduce (candidates
-- within float rounding); `streams` (case[6]): its kernel's stores may stream. Sums of a graph
-- input with few results are split in two kernels by the lowering; on CUDA their partials also
-- try rows split across blocks (positive inputs: no cancellation).
local KERNELS = {
  { "pointwise chain", function(x) return ((x * 1.5 + 0.25):tanh() * x):sigmoid() - x / 3 end, { 48, 3000 } },
  { "row reduction", function(x) return (x * 0.5 + 1):sum(2) end, { 48, 5000 }, true },
  { "whole-tensor sum", function(x) return ((x + 0.125) * 2):sum() end, { 512, 2048 }, true },  -- (partials that cancel)
  { "softmax", function(x) return (x * 1.25):softmax(2) end, { 32, 3000 }, true },
  { "few long rows", function(x) return x:sum(2) end, { 8, 2 ^ 18 }, true, T.rand },
  { "whole-tensor sum of an input", function(x) return x:sum() end, { 2 ^ 20 }, true, T.rand },
  -- one result with a prologue: split, the partials' kernel computes it
  { "one long row with a prologue", function(x) return (x * 0.5 + 0.25):sum(2) end, { 1, 2 ^ 19 }, true, T.rand },
  { "1-d sum with a prologue", function(x) return (x * x):sum() end, { 2 ^ 20 }, true, T.rand },
  -- no block call: its stores stream, or not, as chosen
  { "pointwise without calls", function(x) return (x * 2 + 1):relu() - x end, { 64, 4096 }, false, nil, true },
}

describe("max-autotune on the CPU: the candidates", function()
  for _, case in ipairs(KERNELS) do
    local name, fn, shape, reduced, gen, streams = case[1], case[2], case[3], case[4], case[5] or T.randn, case[6]
    S.native_it(name .. ": every candidate gives the default's results, the winner too", function()
      with_tuning(function()
        local x = gen(unpack(shape))
        local d = T.compile(fn, { hot = 0 })
        d(x)  -- (hot = 0: the first call records, the second runs native code)
        local default = d(x)
        local before = T.compiler.stats()
        local f = T.compile(fn, { hot = 0, mode = "max-autotune" })
        f(x)
        local first = f(x)  -- native: the default kernels, while the tuning job is queued
        T.compiler.wait()
        local d = delta(before, T.compiler.stats())
        S.eq(d.autotune_graphs, 1, "one tuning job")
        S.truthy(d.autotune_kernels >= 1, "kernels tuned")
        -- the whole candidate space was run and checked against the default's outputs
        S.eq(d.autotune_candidates, d.autotune_kernels * per_kernel(streams), "candidates timed")
        S.eq(d.autotune_rejected, 0, "candidates whose outputs were not the default's")
        local tuned = f(x)
        for _, got in ipairs({ first, tuned }) do
          if reduced then S.close(got, default, 1e-5, 1e-6)
          else S.eq((got - default):abs():max():item(), 0, "pointwise kernels are bit for bit") end
        end
      end)
    end)
  end
  S.native_it("T.config.autotune tunes compiles of the default mode", function()
    with_tuning(function()
      T.config.autotune = true
      local ok, err = pcall(function()
        local before = T.compiler.stats()
        local f = T.compile(function(x) return (x - 0.75):exp() end, { hot = 0 })
        local x = T.randn(8, 700)
        f(x)
        f(x)
        T.compiler.wait()
        S.eq(delta(before, T.compiler.stats()).autotune_graphs, 1)
      end)
      T.config.autotune = false
      if not ok then error(err, 0) end
    end)
  end)
end)

-- A child process tuning one graph in `dir`: prints the candidates it timed and the choices it
-- took from the cache.
local function child(dir, c, threads)
  return ([[
    local T = crescent
    T.set_num_threads(%d)
    T.config.cache_dir, T.config.sync_compile, T.config.autotune_budget_ms = %q, true, 1e9
    local f = T.compile(function(x) return (x * %s):sin() + x end, { hot = 0, mode = "max-autotune" })
    local x = T.randn(16, 2500)
    f(x)
    f(x)
    T.compiler.wait()
    local s = T.compiler.stats()
    print(s.autotune_candidates, s.autotune_cached)
  ]]):format(threads, dir, c)
end
local function run_child(dir, c, threads, device)
  local script = child(dir, c, threads)
  if device then script = script:gsub("local x = T.randn%(16, 2500%)", ("local x = T.randn(16, 2500):to(%q)"):format(device), 1) end
  local out, err, status = S.crescent({}, { script = script, env = "CRESCENT_LOGS=autotune" })
  S.eq(status, 0, err)
  local timed, cached = out:match("^(%d+)%s+(%d+)")
  return tonumber(timed), tonumber(cached), err
end

describe("max-autotune on the CPU: the choice cache", function()
  S.native_it("survives a restart, and a changed kernel or thread count tunes again", function()
    S.need_bin()
    SH.with_dir(function(dir)
      local timed, cached, log = run_child(dir, "1.5", 2)
      S.truthy(timed > 0 and cached == 0, ("first process: %s timed, %s cached"):format(timed, cached))
      S.truthy(log:find("[crescent autotune]", 1, true) and log:find("winner", 1, true), log)
      S.eq(#SH.ls(dir, "%.tune$") > 0, true, "choices on disk")
      timed, cached, log = run_child(dir, "1.5", 2)
      S.eq(timed, 0, "the second process times nothing")
      S.truthy(cached > 0, "it takes the choices from the cache")
      S.truthy(log:find("from the cache", 1, true), log)
      timed = run_child(dir, "2.5", 2)
      S.truthy(timed > 0, "a changed kernel is tuned again")
      timed = run_child(dir, "1.5", 1)
      S.truthy(timed > 0, "another thread count (the device's configuration) is tuned again")
    end)
  end)
end)

describe("max-autotune on CUDA", function()
  for _, case in ipairs(KERNELS) do
    local name, fn, shape, reduced, gen = case[1], case[2], case[3], case[4], case[5] or T.randn
    S.it(name .. ": the candidates are timed on the device, the winner gives the default's results", function()
      S.need_gpu()
      with_tuning(function()
        local x = gen(unpack(shape)):cuda()
        local d = T.compile(fn, { hot = 0 })
        d(x)
        local default = d(x)
        local before = T.compiler.stats()
        local f = T.compile(fn, { hot = 0, mode = "max-autotune" })
        f(x)
        local first = f(x)  -- the default kernels, while the tuning job is queued
        T.compiler.wait()
        local dl = delta(before, T.compiler.stats())
        S.eq(dl.autotune_graphs, 1, "one tuning job")
        S.truthy(dl.autotune_kernels >= 1, "kernels tuned")
        S.truthy(dl.autotune_candidates >= 10 * dl.autotune_kernels, ("candidates timed: %d"):format(dl.autotune_candidates))
        S.eq(dl.autotune_rejected, 0, "candidates whose outputs were not the default's")
        for _ = 1, 2 do
          for _, got in ipairs({ first, f(x) }) do
            if reduced then S.close(got:cpu(), default:cpu(), 1e-4, 1e-5)
            else S.eq((got - default):abs():max():item(), 0, "pointwise kernels are bit for bit") end
          end
        end
      end)
    end)
  end
  S.it("the choice cache survives a restart; a changed kernel tunes again", function()
    S.need_gpu()
    S.need_bin()
    SH.with_dir(function(dir)
      local timed, cached, log = run_child(dir, "1.5", 2, "cuda")
      S.truthy(timed > 0 and cached == 0, ("first process: %s timed, %s cached"):format(timed, cached))
      S.truthy(log:find("winner", 1, true), log)
      timed, cached, log = run_child(dir, "1.5", 2, "cuda")
      S.eq(timed, 0, "the second process times nothing")
      S.truthy(cached > 0, "it takes the choices from the cache")
      S.truthy(log:find("from the cache", 1, true), log)
      timed = run_child(dir, "2.5", 2, "cuda")
      S.truthy(timed > 0, "a changed kernel is tuned again")
    end)
  end)
end)
