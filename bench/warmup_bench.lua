-- Warm-up of a compiled function (issue 39): the per-call time of calls 4-40 of small_chain (60
-- pointwise ops on 1024 floats, as bench/workloads.lua) against calls 201-260 of the same function.
-- Each round runs in a fresh process: a process reuses for later functions the memory the first
-- ones grew into, and the first calls of a program are what is measured. Per round: the mean of
-- the fastest 90% (a loaded machine preempts some calls for milliseconds) and the median of each
-- span; printed: their medians over the rounds, and early / steady.
--   build/crescent bench/warmup_bench.lua [rounds=7]
local EARLY_FROM, EARLY_TO, STEADY_FROM, STEADY_TO = 4, 40, 201, 260

local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

local function mean(t)  -- of the fastest 90%
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local n, sum = math.ceil(#s * 0.9), 0
  for i = 1, n do sum = sum + s[i] end
  return sum / n
end

if arg[1] == "--round" then  -- one round: prints early_mean early_median steady_mean steady_median
  local T = require "crescent"
  T.config.sync_compile = true  -- compiled in line at the third call: every timed call is native
  local now = require("crescent.core").api.now_us
  local f = T.compile(function(x)
    for _ = 1, 20 do x = T.sin(x) * 1.01 + 0.1 end
    return x
  end)
  local x = T.randn(1024)
  local early, steady = {}, {}
  for i = 1, STEADY_TO do
    local t0 = now()
    f(x)
    local us = tonumber(now() - t0)
    if i >= EARLY_FROM and i <= EARLY_TO then early[#early + 1] = us end
    if i >= STEADY_FROM then steady[#steady + 1] = us end
  end
  print(string.format("%.3f %.3f %.3f %.3f", mean(early), median(early), mean(steady), median(steady)))
  os.exit(0)
end

local rounds = tonumber(arg[1]) or 7
local cmd = string.format("%q %q --round", arg[-1], arg[0])
local cols = { {}, {}, {}, {} }
for _ = 1, rounds do
  local p = io.popen(cmd)
  local line = p:read("*l")
  p:close()
  local k = 0
  for v in (line or ""):gmatch("%S+") do
    k = k + 1
    table.insert(cols[k], tonumber(v))
  end
  if k ~= 4 then error("warmup_bench: a round printed " .. tostring(line)) end
end
local em, ed, sm, sd = median(cols[1]), median(cols[2]), median(cols[3]), median(cols[4])
print(string.format("%-22s %10s %10s", "small_chain (us/call)", "mean90", "median"))
print(string.format("%-22s %10.1f %10.1f", string.format("calls %d-%d", EARLY_FROM, EARLY_TO), em, ed))
print(string.format("%-22s %10.1f %10.1f", string.format("calls %d-%d", STEADY_FROM, STEADY_TO), sm, sd))
print(string.format("%-22s %10.2f %10.2f", "early / steady", em / sm, ed / sd))
print(string.format("(medians over %d rounds, each a fresh process; target: early within 2x of steady)", rounds))
