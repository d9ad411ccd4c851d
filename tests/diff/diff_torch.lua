-- Differential test of crescent against PyTorch: every registry op that recipes.lua knows how to
-- call runs on random inputs (shapes with 0-d, zero-size, size-1 and larger dims; float32,
-- float64, int64 and bool; transposed, step-sliced, offset and expanded layouts) in crescent
-- eager, compiled (T.compile, hot = 0, default backend: native code where it exists), compiled with
-- backend = "eager", and in PyTorch; results must agree in dtype, shape, values (per-dtype
-- tolerances) and in raising or not. ONE python process evaluates the whole batch, through the
-- tests' PyTorch bridge (tests/lua/lib/torch_bridge.lua: inputs and outputs as safetensors).
--
-- Misuse cases (tests/diff/misuse.lua) follow: a recipe's call with one argument of the wrong kind
-- for its slot (a boolean as a dim, a fraction as a size, ...), so that every op's validity rules
-- are compared with PyTorch's.
--
-- Gradient cases (tests/diff/grad.lua) close the run: for each op with a derivative rule, the
-- gradients of a fixed scalar function of its results w.r.t. its floating inputs, against torch's.
--
--   crescent tests/diff/diff_torch.lua [--cases N] [--misuse M] [--grad G] [--seed S] [--ops a,b] [--only I] [--device cuda] [--show]
--   env: CRESCENT_DIFF_CASES, CRESCENT_DIFF_MISUSE, CRESCENT_DIFF_GRAD (gradient cases per op with a
--        rule; 0: none; none with --only), CRESCENT_DIFF_SEED, CRESCENT_DIFF_OPS, CRESCENT_DIFF_DEVICE,
--        CRESCENT_DIFF_ONLY=i (case i alone, as numbered in a report, with the same --cases, --seed
--        and --ops), CRESCENT_DIFF_SHOW=1 (print each case before it runs: to find one that crashes),
--        CRESCENT_DIFF_KEEP=1 (keep the exchange files), CRESCENT_TEST_PYTHON (default /usr/bin/python3),
--        CRESCENT_DIFF_HALF=1 (float16 / bfloat16 inputs too: recipes.lua)
--
-- Without --cases it is the CI run: a fixed seed, CI_PER_OP cases and CI_MISUSE_PER_OP misuse
-- cases per op (--misuse M: M misuse cases in all). It passes with a
-- message when python3 or torch is missing (or, with --device cuda, when there is no GPU). It
-- fails when a registry op is neither in recipes.lua nor skipped there with a reason, when an
-- excuse lacks its class or reason, and (the CI run) when an op gets no misuse case.
local dir = arg[0]:match("(.*/)") or "./"
package.path = dir .. "?.lua;" .. dir .. "../lua/lib/?.lua;" .. package.path
local T = require "crescent"
local G = require "gen"
local RC = require "recipes"
local C = require "compare"
local TB = require "torch_bridge"
local SH = require "shell"
local MU = require "misuse"
local GR = require "grad"

local CI_PER_OP, CI_MISUSE_PER_OP, GRAD_PER_OP = 6, 4, 3
-- The compiled modes' second call must run native code: with background compiles (the default)
-- it would still run on the eager kernels while the graph compiles.
T.config.sync_compile = true

-- ---- options -------------------------------------------------------------------------------------

local function options()
  local o = {
    cases = tonumber(os.getenv("CRESCENT_DIFF_CASES") or ""),
    misuse = tonumber(os.getenv("CRESCENT_DIFF_MISUSE") or ""),
    grad = tonumber(os.getenv("CRESCENT_DIFF_GRAD") or ""),
    seed = tonumber(os.getenv("CRESCENT_DIFF_SEED") or "") or 20240601,
    ops = os.getenv("CRESCENT_DIFF_OPS"),
    only = tonumber(os.getenv("CRESCENT_DIFF_ONLY") or ""),
    device = os.getenv("CRESCENT_DIFF_DEVICE") or "cpu",
    show = os.getenv("CRESCENT_DIFF_SHOW") == "1",
    keep = os.getenv("CRESCENT_DIFF_KEEP") == "1",
  }
  local i = 1
  while i <= #arg do
    local a, v = arg[i], arg[i + 1]
    if a == "--cases" then o.cases = tonumber(v); i = i + 1
    elseif a == "--misuse" then o.misuse = tonumber(v); i = i + 1
    elseif a == "--grad" then o.grad = tonumber(v); i = i + 1
    elseif a == "--seed" then o.seed = tonumber(v); i = i + 1
    elseif a == "--ops" then o.ops = v; i = i + 1
    elseif a == "--only" then o.only = tonumber(v); i = i + 1
    elseif a == "--device" then o.device = v; i = i + 1
    elseif a == "--show" then o.show = true
    elseif a == "--keep" then o.keep = true
    else error("diff_torch: unknown argument " .. tostring(a)) end
    i = i + 1
  end
  return o
end

-- ---- coverage: every registry op is covered or skipped with a reason -------------------------------

local function coverage()
  local errors, covered = {}, {}
  for name in pairs(T._ops) do
    local skip = RC.SKIPPED[name]
    if RC.RECIPES[name] and skip then errors[#errors + 1] = name .. ": both a recipe and skipped"
    elseif RC.RECIPES[name] then covered[#covered + 1] = name
    elseif type(skip) ~= "string" or skip == "" then
      errors[#errors + 1] = name .. ": a registry op with no recipe in tests/diff/recipes.lua and not in its SKIPPED list"
    end
  end
  for name in pairs(RC.RECIPES) do
    if not T._ops[name] then errors[#errors + 1] = name .. ": a recipe for an op that is not in the registry" end
  end
  for name in pairs(RC.SKIPPED) do
    if not T._ops[name] then errors[#errors + 1] = name .. ": skipped, but not in the registry" end
  end
  local CLASSES = { limit = true, torch = true, extension = true, known = true }
  for i, e in ipairs(RC.EXCUSES) do  -- no difference is excused without its class and reason
    if not CLASSES[e.class] or type(e.why) ~= "string" or e.why == "" then
      errors[#errors + 1] = ("excuses.lua entry %d: a class (limit, torch, extension, known) and a reason (why) are needed"):format(i)
    end
  end
  table.sort(errors)
  table.sort(covered)
  return covered, errors
end

-- ---- cases ------------------------------------------------------------------------------------------

-- Case i of op `name` from the recipe, with a seed of its own (attempt: another seed).
local function recipe_case(o, name, i, attempt)
  local rng = G.rng(o.seed * 7919 + i * 104729 + attempt * 15485863)
  local c = G.case(rng, "c" .. i, o.device)
  local ok, call, expr, extra = pcall(RC.RECIPES[name].gen, c)
  if not ok then error(("diff_torch: the recipe for %s failed to generate case %d: %s"):format(name, i, call), 0) end
  c.op, c.recipe, c.call, c.expr, c.extra = name, RC.RECIPES[name], call, expr, extra or {}
  return c
end

-- The ops to test, in order, and one case for each slot i, so that a case can be rerun alone
-- (--only i with the same --cases, --misuse, --seed and --ops). The slots after the n regular
-- ones are misuse cases; a recipe whose call has nothing to misuse (x:float() has only self)
-- gets three tries at other inputs, then its slot stays empty.
local function make_cases(o, ops)
  local n = o.cases or CI_PER_OP * #ops
  local m = o.misuse or (o.cases and 0 or CI_MISUSE_PER_OP * #ops)
  local cases = {}
  for i = o.only or 1, o.only or n + m do
    local name = ops[(i - 1) % #ops + 1]
    if i <= n then
      cases[#cases + 1] = recipe_case(o, name, i, 0)
    else
      for attempt = 1, 3 do
        local c = recipe_case(o, name, i, attempt)
        if MU.variant(c, c.r) then cases[#cases + 1] = c; break end
      end
    end
  end
  return cases
end

-- ---- running crescent -----------------------------------------------------------------------------

local MODES = {
  { name = "eager" },
  { name = "compiled", opts = { hot = 0 } },
  { name = "compiled-eager", opts = { hot = 0, backend = "eager" } },
}
-- the outcomes of one case, in report order (each compiled mode runs twice)
local MODE_ORDER = { "eager", "compiled#1", "compiled#2", "compiled-eager#1", "compiled-eager#2" }

-- One outcome: { results = snapshots } or { error = message }. The in-place target's base is
-- appended to the results (writes through views must reach it).
local function outcome(case, I, f)
  local ok, res = pcall(function() return C.results(f()) end)
  if not ok then
    if type(res) ~= "string" then return { error = "a non-string error: " .. tostring(res), bad_error = true } end
    return { error = res }
  end
  if case.extra.inplace then res[#res + 1] = C.snapshot(I[case.extra.inplace.py .. "_base"]) end
  return { results = res }
end

local function run_eager(case)
  local I = G.materialise(case, case.device)
  return outcome(case, I, function() return case.call(I) end)
end

-- A compiled function over the case's tensor inputs; it is called twice (the first call records
-- the graph, the second runs it compiled), on fresh inputs each time: both outcomes are kept.
local function run_compiled(case, opts)
  local names = {}
  for i, input in ipairs(case.inputs) do names[i] = input.name end
  local call = case.call
  local f = T.compile(function(...)
    local I = {}
    for i, n in ipairs(names) do I[n] = select(i, ...) end
    return call(I)
  end, opts)
  local outs = {}
  for k = 1, 2 do
    local I = G.materialise(case, case.device)
    local args = {}
    for i, n in ipairs(names) do args[i] = I[n] end
    outs[k] = outcome(case, I, function() return f(unpack(args, 1, #names)) end)
  end
  return outs
end

-- totals over the compiled runs (does the compiled mode really run native code?)
local compile_totals = { graphs_compiled = 0, kernels_compiled = 0, eager_fallbacks = 0, disk_cache_hits = 0 }

local function run_crescent(case, o, notes)
  if o.show then io.stderr:write(("diff_torch: %s %s: %s\n  torch: %s\n"):format(case.key, case.op, G.describe(case), case.expr)) end
  local runs = { eager = run_eager(case) }
  for _, m in ipairs(MODES) do
    if m.opts then
      T.compiler.reset()
      local outs = run_compiled(case, m.opts)
      runs[m.name .. "#1"], runs[m.name .. "#2"] = outs[1], outs[2]
      local st = T.compiler.stats()
      for k in pairs(compile_totals) do compile_totals[k] = compile_totals[k] + st[k] end
      if st.eager_fallbacks > 0 then notes[#notes + 1] = ("%s %s (%s): compile fell back to eager"):format(case.op, case.key, m.name) end
    end
  end
  return runs
end

-- ---- running torch ----------------------------------------------------------------------------------

-- The torch outcome of every case: { results = snapshots } | { error = } | { crashed = } (a case
-- that kills the python process: the bridge retries the others without it).
local function run_torch(o, cases)
  -- (full float32 convolutions on both sides: TF32's 10-bit products are outside the tolerances)
  local b = TB.batch({ device = o.device, tensors_only = true, bisect = true, keep = o.keep,
                       prelude = "torch.backends.cudnn.allow_tf32 = False" })
  for _, c in ipairs(cases) do
    for _, input in ipairs(c.inputs) do b:input(c.key .. "." .. input.name, G.base_tensor(input)) end
    local expr = c.expr
    if c.extra.inplace then expr = ("(%s, %s_base)"):format(expr, c.extra.inplace.py) end
    b:add(c.key, expr, nil, c.py_setup or G.python_setup(c))
  end
  local res, why = b:run()
  if not res then error("diff_torch: " .. why, 0) end
  local want = {}
  for _, c in ipairs(cases) do
    local r = res[c.key]
    if not r then error("diff_torch: no torch outcome for " .. c.key, 0) end
    if r.crashed or r.error then want[c.key] = { crashed = r.crashed, error = r.error }
    else
      local results = {}
      for i, x in ipairs(r.list or { r }) do results[i] = C.snapshot(x.t) end
      want[c.key] = { results = results }
    end
  end
  return want
end

-- ---- judging ------------------------------------------------------------------------------------------

-- The findings of one case: { {modes = "eager, compiled#1", kind =, msg =, class =, why =}, ... },
-- modes with the same finding merged. class is "mismatch" (a failure) or the excuse's class.
local function judge(case, runs, want)
  if want.crashed then return { { modes = "torch", kind = "crashed", msg = want.crashed, class = "torch-crash" } } end
  local scale = 1
  if case.recipe.reduce then
    local ins = {}
    for i, input in ipairs(case.inputs) do ins[i] = C.snapshot(G.base_tensor(input)) end
    scale = C.reduce_scale(ins)
  end
  local findings, by_msg = {}, {}
  for _, mode in ipairs(MODE_ORDER) do
    local got = runs[mode]
    local kind, msg = C.compare(got, want, scale, case.recipe.shape_only)
    local named = got.error and (got.error:find(case.op:gsub("_$", ""), 1, true)
      or (case.recipe.shown and got.error:find(case.recipe.shown, 1, true)))
    if not kind and got.error and not named then
      kind, msg = "message", "crescent's error does not name the op: " .. got.error
    end
    if got.bad_error then kind, msg = "message", got.error end
    if kind then
      local key = kind .. msg
      if by_msg[key] then
        by_msg[key].modes = by_msg[key].modes .. ", " .. mode
      else
        local e = RC.excuse(case, kind, msg)
        by_msg[key] = { modes = mode, kind = kind, msg = msg, class = e and e.class or "mismatch", why = e and e.why }
        findings[#findings + 1] = by_msg[key]
      end
    end
  end
  return findings
end

-- Prints the findings (each mismatch in full for the first SHOW_PER_OP cases of an op; all of
-- them with --show) and a count per op and class; returns the counts per class.
local SHOW_PER_OP = 3
local function report(o, cases, runs, want)
  local counts, by_op, shown = {}, {}, {}
  for i, c in ipairs(cases) do
    local findings = c.grad and GR.judge(c, runs[i], want[c.key], RC.excuse) or judge(c, runs[i], want[c.key])
    for _, f in ipairs(findings) do
      counts[f.class] = (counts[f.class] or 0) + 1
      local key = ("%-10s %-14s %s"):format(f.class, c.op, f.kind)
      by_op[key] = (by_op[key] or 0) + 1
      shown[key] = (shown[key] or 0) + 1
      if o.show or (f.class == "mismatch" and shown[key] <= SHOW_PER_OP) then
        print(("%s %s %s [%s] (%s): %s\n    inputs: %s\n    torch:  %s%s"):format(f.class:upper(), c.op, c.key,
          f.modes, f.kind, f.msg, G.describe(c) .. (c.misuse and ("; misuse: " .. c.misuse) or ""), c.expr,
          f.why and ("\n    why: " .. f.why) or ""))
      end
    end
  end
  local keys = {}
  for k in pairs(by_op) do keys[#keys + 1] = k end
  table.sort(keys)
  if #keys > 0 then
    print("findings (class, op, kind: cases):")
    for _, k in ipairs(keys) do print(("  %s %d"):format(k, by_op[k])) end
  end
  return counts
end

-- ---- main ---------------------------------------------------------------------------------------------

local function main()
  local o = options()
  local t0 = SH.now()
  local covered, errors = coverage()
  local nskip = 0
  for _ in pairs(RC.SKIPPED) do nskip = nskip + 1 end
  if #errors > 0 then
    io.stderr:write("diff_torch: op coverage:\n  " .. table.concat(errors, "\n  ") .. "\n")
    print("diff_torch: FAILED (op coverage)")
    os.exit(1, true)
  end
  if o.device == "cuda" and not T.cuda.is_available() then
    print("diff_torch: SKIPPED: --device cuda and crescent sees no GPU")
    os.exit(0, true)
  end
  T.backends.cudnn.allow_tf32 = false  -- (as torch's side: run_torch's prelude)
  local have, why = TB.have(TB.need(o.device))
  if not have then
    print("diff_torch: SKIPPED: " .. why)
    os.exit(0, true)
  end
  local ops = covered
  if o.ops then
    ops = {}
    for name in o.ops:gmatch("[%w_]+") do
      if not RC.RECIPES[name] then error("diff_torch: --ops: no recipe for " .. name, 0) end
      ops[#ops + 1] = name
    end
  end

  local cases = make_cases(o, ops)
  local notes, runs = {}, {}
  for i, c in ipairs(cases) do runs[i] = run_crescent(c, o, notes) end
  local ngrad, tg = #cases, SH.now()
  if not o.only then
    for _, c in ipairs(GR.make_cases(ops, o.grad or GRAD_PER_OP, function(name, i, attempt) return recipe_case(o, name, i, attempt) end)) do
      cases[#cases + 1] = c
      runs[#cases] = GR.run(c)
    end
  end
  ngrad = #cases - ngrad
  local t1 = SH.now()
  local want = run_torch(o, cases)
  local t2 = SH.now()

  local torch_errors = 0
  for _, c in ipairs(cases) do if want[c.key].error then torch_errors = torch_errors + 1 end end
  local counts = report(o, cases, runs, want)
  local classes = {}
  for k, n in pairs(counts) do if k ~= "mismatch" then classes[#classes + 1] = ("%d %s"):format(n, k) end end
  table.sort(classes)
  for _, n in ipairs(notes) do print("note: " .. n) end
  local ct = compile_totals
  print(("compiled runs: %d graphs compiled, %d kernels (%d from the disk cache), %d eager fallbacks")
    :format(ct.graphs_compiled, ct.kernels_compiled, ct.disk_cache_hits, ct.eager_fallbacks))
  local misused, nmisuse, without = {}, 0, {}
  for _, c in ipairs(cases) do
    if c.misuse then misused[c.op], nmisuse = true, nmisuse + 1 end
  end
  for _, name in ipairs(ops) do if not misused[name] then without[#without + 1] = name end end
  if nmisuse > 0 then
    print(("misuse cases: %d, of %d ops%s"):format(nmisuse, #ops - #without,
      #without > 0 and ("; none for " .. table.concat(without, ", ")) or ""))
  end
  local mismatches = counts.mismatch or 0
  -- the CI run compares every op's refusing: an op none of whose calls has an argument to misuse fails
  if not (o.cases or o.misuse or o.ops or o.only) and #without > 0 then
    print("diff_torch: FAILED: no misuse case for " .. table.concat(without, ", ") .. " (tests/diff/misuse.lua)")
    mismatches = mismatches + 1
  end
  -- (the compiled mode is only a test of the code generators if they made code)
  local native = T.compiler.native_available(o.device == "cuda" and "cuda" or "cpu")
  if native and #cases > 0 and ct.kernels_compiled + ct.disk_cache_hits == 0 then
    print("diff_torch: FAILED: native code is available here, yet the compiled runs compiled no kernel")
    mismatches = mismatches + 1
  end
  print(("diff_torch: %d ops covered, %d skipped; %d cases (seed %d, %s; torch raised in %d), %d crescent runs each, "
    .. "and %d gradient cases (%.1f s); %d mismatches (excused: %s); crescent %.1f s, torch %.1f s")
    :format(#covered, nskip, #cases - ngrad, o.seed, o.device, torch_errors, #MODE_ORDER, ngrad, t1 - tg, mismatches,
      #classes > 0 and table.concat(classes, ", ") or "none", t1 - t0, t2 - t1))
  os.exit(mismatches == 0 and 0 or 1, true)
end

main()
