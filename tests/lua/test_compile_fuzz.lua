-- A differential fuzzer for T.compile: random Lua programs over tensors must give, compiled, the
-- results of eager execution (floats within 1e-4 relative: native code may sum in another order;
-- integers, shapes, strides exact): returned values (dtype, shape, strides, values), the
-- inputs after the call, values stored in an outer table, the random generator's state, errors.
-- CRESCENT_FUZZ_PROGRAMS=n (default 500, the CI budget; a long run sets more) and
-- CRESCENT_FUZZ_SEED=s run other programs; CRESCENT_FUZZ_ONLY=i runs program i alone (as
-- numbered in a failure message), CRESCENT_FUZZ_DUMP=1 prints programs, CRESCENT_FUZZ_VERBOSE=1
-- progress and compiler stats. A program that crashes the process: CRESCENT_FUZZ_ONLY=i
-- CRESCENT_FUZZ_ISOLATE=1 shrinks it in child processes.
--
-- Every k-th program is also compared with PyTorch (tests/lua/lib/fuzz_torch.lua records it through
-- a proxy T, the PyTorch bridge's tests/torch_bridge/replay.py replays batches of programs): k is
-- CRESCENT_FUZZ_TORCH (0: never), by default 10, or 1 when more than 2000 programs run. Without
-- python3-torch that part is skipped with a message. CRESCENT_FUZZ_DEVICE=cuda makes the inputs
-- and every created tensor CUDA tensors, torch runs on CUDA too (skipped without a GPU).
-- CRESCENT_FUZZ_SAVE=dir writes each minimal failing program to dir as a file that
-- tests/lua/fuzz_found/ can keep: the programs there run first, in CI, as regression tests;
-- CRESCENT_FUZZ_FILE=path runs one such file alone.
--
-- The programs come from tests/lua/lib/fuzz_gen.lua, each from its own seed, over op pools drawn
-- from the registry (tests/lua/lib/fuzz_ops.lua; a spec below checks that every op is placed). On a mismatch the
-- program is shrunk (statements deleted while it still fails the same way and eager raises no new
-- error) and both programs are printed.
local T = require "crescent"
local FT = require "fuzz_torch"
local FG = require "fuzz_gen"
local FO = require "fuzz_ops"
local SH = require "shell"
local S = expect
local DEVICE, gen_program, source = FG.DEVICE, FG.program, FG.source

local SEED = tonumber(os.getenv("CRESCENT_FUZZ_SEED") or "") or 12345
local PROGRAMS = tonumber(os.getenv("CRESCENT_FUZZ_PROGRAMS") or "") or 500
local ONLY = tonumber(os.getenv("CRESCENT_FUZZ_ONLY") or "")
local DROP = {}  -- CRESCENT_FUZZ_DROP=s3,r1: leave out statement 3 and return value 1 (crash shrinking)
for k in (os.getenv("CRESCENT_FUZZ_DROP") or ""):gmatch("%w+") do DROP[k] = true end
local GROUP, SHOW, SHRINKS = 50, 3, 6  -- programs per it(); failures shown in full per group; shrinks

-- ---- running and comparing ---------------------------------------------------------------------

local pack, snap, diff = S.pack, S.snapshot, S.first_difference

local function show(v) return type(v) == "string" and ("%q"):format(v) or S.fmt(v) end

local function compare(got, want, call)  -- nil or {kind = where it differs, text}
  got = snap(got)
  -- native code sums in another order than the eager kernels: float rounding may differ
  local p, x, y = diff(got, want, "", { 1e-4, 1e-5 })
  if not p then return end
  local text = ("call %d, at %s: compiled %s, eager %s"):format(call, p, show(x), show(y))
  for k in p:gmatch("[^.]+") do  -- show the tensor holding the difference whole
    if type(got) ~= "table" or type(want) ~= "table" or (got.tensor and want.tensor) then break end
    got, want = got[tonumber(k) or k], want[tonumber(k) or k]
  end
  if type(got) == "table" and got.tensor and type(want) == "table" and want.tensor then
    text = text .. ("\n   compiled: %s %s %s\n   eager:    %s %s %s"):format(got.tensor, show(got.shape), show(got.data),
      want.tensor, show(want.shape), show(want.data))
  end
  return { kind = p:match("^%.(%a+)") .. (p:find("strides") and ":strides" or ""), text = text }
end

-- After a call that raised in both modes: the compiled call's Lua code ran past the failing op
-- (its graph fails at the end, docs/compile.md "Errors and values"), so what it stored differs
-- from eager's by design (its tensors from that call have no value). The store takes eager's
-- values themselves (a copy would change their strides; the programs never read the store).
local function resync_store(c, e)
  for k in pairs(c) do c[k] = nil end
  for k, v in pairs(e) do c[k] = v end
end

-- Runs eager and compiled on every call of the plan: nil or a failure, and whether eager raised.
local function run_program(prog)
  local src = source(prog)
  local chunk, err = loadstring(src, "=fuzz")
  if not chunk then error("the generator wrote invalid Lua: " .. err .. "\n" .. src) end
  local args = loadstring(prog.args_src, "=args")()
  local store_e, store_c = {}, {}
  local fe, fc = chunk()(T, store_e), T.compile(chunk()(T, store_c), prog.opts[2])
  local eager_err, pending = false, nil
  for call = 1, prog.plan.calls do
    local a = pack(args(T, call))
    local re = pack(pcall(fe, unpack(a, 1, a.n)))
    eager_err = eager_err or not re[1]
    local want = snap({ rets = re, args = a, store = store_e, rng = T.rand(3) })
    local b = pack(args(T, call))
    local rc = pack(pcall(fc, unpack(b, 1, b.n)))
    if not re[1] and not rc[1] then resync_store(store_c, store_e) end
    local st = {}
    for k, v in pairs(store_c) do st[k] = v end
    local got = { rets = rc, args = b, store = st, rng = T.rand(3) }
    local f = pending and compare(unpack(pending))
    if f then return f, eager_err end
    pending = { got, want, call }
    if not prog.plan.delayed then pending = nil; f = compare(got, want, call) end  -- else read after the next call
    if not f and prog.plan.mutate and not prog.plan.delayed then  -- the caller writes into the results
      for i = 2, math.min(re.n, rc.n) do
        if T.is_tensor(re[i]) and T.is_tensor(rc[i]) then pcall(re[i].add_, re[i], 1); pcall(rc[i].add_, rc[i], 1) end
      end
      f = compare({ rets = rc, args = b }, snap({ rets = re, args = a }), call)
    end
    if f then return f, eager_err end
  end
  return pending and compare(unpack(pending)), eager_err
end

-- ---- programs by index or from a saved file ---------------------------------------------------------

local HERE = debug.getinfo(1, "S").source:sub(2)
local FOUND_DIR = (HERE:match("(.*/)") or "./") .. "fuzz_found"
local SAVE_DIR, FILE = os.getenv("CRESCENT_FUZZ_SAVE"), os.getenv("CRESCENT_FUZZ_FILE")

-- A program is named by its index (generated from SEED) or by the path of a saved file.
local saved = {}
local function base_program(index)
  if type(index) == "number" then return gen_program(bit.bxor(bit.tobit(SEED * 7919), bit.tobit(index * 0x9E3779B1))) end
  saved[index] = saved[index] or dofile(index)
  return saved[index]
end

local function program(index, drop)  -- program index, less the statements/returns named in drop
  local prog = base_program(index)
  if not drop or not next(drop) then return prog end
  local cut = setmetatable({ stmts = {}, rets = {} }, { __index = prog })
  for _, key in ipairs({ "stmts", "rets" }) do
    for i, x in ipairs(prog[key]) do if not drop[key:sub(1, 1) .. i] then table.insert(cut[key], x) end end
  end
  return cut
end

local function label(index)  -- how to run the program again
  if type(index) == "string" then return ("saved program %s (CRESCENT_FUZZ_FILE=%s)"):format(index, index) end
  return ("program %d (CRESCENT_FUZZ_SEED=%d CRESCENT_FUZZ_ONLY=%d)"):format(index, SEED, index)
end

local function with(set, k) local c = { [k] = true }; for x in pairs(set) do c[x] = true end; return c end

-- The largest set of statements ("s3") and return values ("r1") to leave out while the program
-- still fails the same way. still(list of drop sets) says which of them still fail: a whole
-- round goes at once (the torch check runs one python process per round). A round tries every
-- single deletion, then the growing unions of those that passed, and keeps the largest union
-- that still fails; the program is minimal when no single deletion passes.
local function shrink(index, still)
  local n, drop = program(index), {}
  while true do
    local keys, cands = {}, {}
    for _, key in ipairs({ "s", "r" }) do
      for j = #n[key == "s" and "stmts" or "rets"], 1, -1 do
        if not drop[key .. j] then keys[#keys + 1] = key .. j; cands[#cands + 1] = with(drop, key .. j) end
      end
    end
    local ok, unions = still(cands), {}
    for i, k in ipairs(keys) do if ok[i] then unions[#unions + 1] = with(unions[#unions] or drop, k) end end
    if #unions == 0 then break end
    local uok = #unions > 1 and still(unions) or {}
    local best = 1  -- unions[1] is a single deletion that passed
    for m = #unions, 2, -1 do if uok[m] then best = m; break end end
    drop = unions[best]
  end
  return program(index, drop)
end

local function each(pred) return function(drops) local r = {}; for i, d in ipairs(drops) do r[i] = pred(d) end; return r end end

local function describe_prog(prog, index, text)
  local plan = prog.plan
  return table.concat({ label(index) .. ": " .. text,
    ("options %s, %d calls, variant %s%s%s%s"):format(prog.opts[1], plan.calls, plan.variant,
      plan.delayed and ", compiled results read after the next call" or "", plan.alias and ", z aliases x" or "",
      (plan.mutate and not plan.delayed) and ", results written in place (add_(1)) after each call" or ""),
    "-- inputs:", prog.args_src, "-- program:", source(prog) }, "\n")
end

-- ---- saving minimal programs (CRESCENT_FUZZ_SAVE) ------------------------------------------------------

local function serialize(v, indent)
  if type(v) == "string" then return (("%q"):format(v):gsub("\\\n", "\\n")) end
  if type(v) == "number" and v ~= math.floor(v) then return ("%.17g"):format(v) end
  if type(v) ~= "table" then return tostring(v) end
  if next(v) == nil then return "{}" end
  local parts, inner = {}, indent .. "  "
  for i = 1, #v do parts[#parts + 1] = inner .. serialize(v[i], inner) end
  local keys = {}
  for k in pairs(v) do if type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = inner .. k .. " = " .. serialize(v[k], inner) end
  return "{\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "}"
end

-- Writes the minimal program small (found as program index, failing with text) to SAVE_DIR.
local function save_program(small, index, text)
  if not SAVE_DIR then return "" end
  local name = type(index) == "number" and ("seed%d_p%d.lua"):format(SEED, index) or index:match("[^/]+$")
  local stmts = {}
  for i, st in ipairs(small.stmts) do stmts[i] = { code = st.code, def = st.def } end
  local data = { found = text:match("[^\n]*"), plan = small.plan, args_src = small.args_src,
    opts = { small.opts[1], small.opts[2] }, stmts = stmts, rets = { unpack(small.rets) } }
  local path = SAVE_DIR .. "/" .. name
  os.execute("mkdir -p " .. SH.quote(SAVE_DIR))
  local f = assert(io.open(path, "w"))
  f:write(("-- A minimal program found by tests/lua/test_compile_fuzz.lua (%s).\n"):format(label(index)),
    "-- Kept in tests/lua/fuzz_found/, it runs with the fuzzer as a regression test; alone:\n",
    ("--   CRESCENT_FUZZ_FILE=%s crescent tests/lua/run.lua tests/lua/test_compile_fuzz.lua\n"):format(path),
    "return ", serialize(data, ""), "\n")
  f:close()
  return "\n-- saved as " .. path
end

-- ---- the PyTorch comparison ------------------------------------------------------------------------------

local TORCH_EVERY = tonumber(os.getenv("CRESCENT_FUZZ_TORCH") or "") or (PROGRAMS > 2000 and 1 or 10)
local TORCH_BATCH = 100  -- programs per python process
local TORCH = { pending = {}, programs = 0, diverged = {}, resyncs = 0, relayouts = 0, classes = {} }

local function torch_batch()
  if TORCH.batch == nil and TORCH.why == nil then TORCH.batch, TORCH.why = FT.batch(DEVICE) end
  return TORCH.batch
end

local function torch_key(index) return type(index) == "number" and "p" .. index or "f" .. index:gsub("%W", "_") end

-- Runs prog once more through fuzz_torch's proxy T: every call of its plan, and what the caller
-- sees after each (results, inputs, stored values).
local function recorder(prog)
  return function(P, observe)
    local chunk = assert(loadstring(source(prog), "=fuzz"))
    local args = loadstring(prog.args_src, "=args")()
    local store = {}
    local f = chunk()(P, store)
    for call = 1, prog.plan.calls do
      local a = pack(args(P, call))
      observe(pack(pcall(f, unpack(a, 1, a.n))), a, store)
    end
  end
end

-- The mismatch of each program in drops-of-index sets (for shrinking): same op and kind as want.
local function torch_still(index, want)
  return function(drops)
    local b, out = torch_batch(), {}
    for i, d in ipairs(drops) do b:add("s" .. i, recorder(program(index, d))) end
    local res = b:run()
    for i in ipairs(drops) do
      local m = FT.mismatch(res["s" .. i])
      out[i] = m ~= nil and m.op == want.op and m.kind == want.kind
    end
    return out
  end
end

-- Counts what the replay of program index found (r: its result from the batch).
local function torch_tally(index, r)
  TORCH.programs = TORCH.programs + 1
  TORCH.relayouts = TORCH.relayouts + (r.relayouts or 0)
  if (r.resyncs or 0) > 0 then
    TORCH.diverged[r.why] = (TORCH.diverged[r.why] or 0) + 1
    TORCH.resyncs = TORCH.resyncs + r.resyncs
    if os.getenv("CRESCENT_FUZZ_VERBOSE") == "2" then
      io.stderr:write(("fuzz: %s diverged from torch at call %d (%s): %s\n"):format(label(index), r.at, r.why, r.detail))
    end
  end
  for _, f in ipairs(r.findings or {}) do
    local k = f.class .. " " .. f.op .. " " .. f.kind
    TORCH.classes[k] = (TORCH.classes[k] or 0) + 1
  end
end

-- The failure report of program index for mismatch m, with the program shrunk while SHRINKS lasts.
local function torch_report(index, m)
  local prog, text = program(index, DROP), FT.describe(m)
  if SHRINKS == 0 or m.kind == "failed" then return label(index) .. ": " .. text end
  SHRINKS = SHRINKS - 1
  local small = shrink(index, torch_still(index, m))
  local b = torch_batch()
  b:add("min", recorder(small))
  local sm = FT.mismatch(b:run().min)
  return describe_prog(prog, index, text) .. ("\n-- minimal program (%d of %d statements): %s\n"):format(
    #small.stmts, #prog.stmts, sm and FT.describe(sm) or "?") .. source(small) .. save_program(small, index, text)
end

-- Replays the pending programs: their failure reports.
local function torch_flush()
  local b, fails = torch_batch(), {}
  if not b or #TORCH.pending == 0 then return fails end
  local res = b:run()
  for _, index in ipairs(TORCH.pending) do
    local r = res[torch_key(index)]
    torch_tally(index, r)
    local m = FT.mismatch(r)
    if m then fails[#fails + 1] = torch_report(index, m) end
  end
  TORCH.pending = {}
  return fails
end

-- Records program index for the next torch batch: nil, or a failure report when recording failed.
local function torch_add(index)
  local b = torch_batch()
  if not b then return end
  local ok, err = pcall(b.add, b, torch_key(index), recorder(program(index, DROP)))
  if not ok then return describe_prog(program(index, DROP), index, "recording for torch failed: " .. tostring(err)) end
  TORCH.pending[#TORCH.pending + 1] = index
end

local function torch_summary()
  local parts = {}
  for k, n in pairs(TORCH.classes) do parts[#parts + 1] = ("%s: %d"):format(k, n) end
  table.sort(parts)
  local div = {}
  for k, n in pairs(TORCH.diverged) do div[#div + 1] = ("%d (%s)"):format(n, k) end
  return ("fuzz: torch compared %d programs (every %d); diverged (rounding amplified, resynchronised): %s programs, "
    .. "%d calls; results given crescent's strides: %d; findings: %s\n"):format(TORCH.programs, TORCH_EVERY,
    #div > 0 and table.concat(div, ", ") or "0", TORCH.resyncs, TORCH.relayouts, #parts > 0 and table.concat(parts, ", ") or "none")
end

-- ---- compiled vs eager -----------------------------------------------------------------------------------

local TOTALS = {}  -- compiler stats over all programs (CRESCENT_FUZZ_VERBOSE prints them)
local function check_one(index, full)  -- nil or a failure report; whether eager raised
  local prog = program(index, DROP)
  if os.getenv("CRESCENT_FUZZ_DUMP") then
    io.stderr:write("-- ", label(index), ", options ", prog.opts[1], "\n", prog.args_src, "\n", source(prog), "\n")
  end
  T.compiler.reset()
  local ok, fail, eager_err = pcall(run_program, prog)
  for k, v in pairs(T.compiler.stats()) do TOTALS[k] = (TOTALS[k] or 0) + v end
  if ok and not fail then return nil, eager_err end
  if not ok then return describe_prog(prog, index, "the harness failed: " .. tostring(fail)), eager_err end
  if not full or SHRINKS == 0 then return label(index) .. ": " .. fail.text, eager_err end
  SHRINKS = SHRINKS - 1
  local small = shrink(index, each(function(drop)  -- fails the same way, with no new eager error
    local good, f, e = pcall(run_program, program(index, drop))
    return good and f and f.kind == fail.kind and (eager_err or not e)
  end))
  local _, sfail = pcall(run_program, small)
  return describe_prog(prog, index, fail.text) .. ("\n-- minimal program (%d of %d statements): %s\n"):format(
    #small.stmts, #prog.stmts, sfail and sfail.text or "?") .. source(small) .. save_program(small, index, fail.text), eager_err
end

-- Shrinks a program that crashes the process, running each candidate in a child process.
local function shrink_crash(index)
  local q = SH.quote
  local function crashes(drop)
    local list = {}
    for k in pairs(drop) do list[#list + 1] = k end
    local _, rc = SH.run(("CRESCENT_FUZZ_ISOLATE=0 CRESCENT_FUZZ_SEED=%d CRESCENT_FUZZ_ONLY=%d CRESCENT_FUZZ_DROP=%s %s %s %s >/dev/null")
      :format(SEED, index, table.concat(list, ","), q(S.need_bin()), q(arg[0]), q(HERE)))
    return rc >= 128
  end
  if not crashes({}) then return "program " .. index .. " does not crash" end
  return describe_prog(program(index), index, "crashes") .. "\n-- minimal crashing program:\n" .. source(shrink(index, each(crashes)))
end

-- Checks the programs named in list (indices or saved files): compiled against eager, and against
-- torch for those where torch_pick(index) is true (replayed when a batch is full, or now when
-- flush). Raises the failures.
local function check_list(list, torch_pick, flush, what)
  local fails, errored = {}, 0
  for n, index in ipairs(list) do
    local f, e = check_one(index, #fails < SHOW)
    if e then errored = errored + 1 end
    fails[#fails + 1] = f
    if torch_pick(index) then fails[#fails + 1] = torch_add(index) end
    if n % 10 == 0 then collectgarbage() end
  end
  if #TORCH.pending >= TORCH_BATCH or flush then
    for _, f in ipairs(torch_flush()) do fails[#fails + 1] = f end
  end
  if #fails > 0 then error(("%d of %d %s differ:\n\n"):format(#fails, #list, what) .. table.concat(fails, "\n\n"), 0) end
  return errored
end

local function saved_files()
  local files = SH.ls(FOUND_DIR, "%.lua$")
  for i, name in ipairs(files) do files[i] = FOUND_DIR .. "/" .. name end
  return files
end

describe("the fuzzer's op pools", function()
  it("place every registry op: in a pool, a statement of its own, or excluded with a reason", function()
    local missing, stale = FO.unplaced()
    S.eq(missing, {}, "registry ops the fuzzer neither generates nor excludes")
    S.eq(stale, {}, "exclusions that name no registry op")
    for op, why in pairs(FO.EXCLUDED) do S.truthy(type(why) == "string" and #why > 10, "no reason to exclude " .. op) end
  end)
end)

describe("T.compile fuzzing: compiled == eager (and PyTorch) on random programs", function()
  if ONLY and os.getenv("CRESCENT_FUZZ_ISOLATE") == "1" and not next(DROP) then
    it("program " .. ONLY .. " in child processes", function() error(shrink_crash(ONLY), 0) end)
    return
  end
  if DEVICE ~= "cpu" and not T.cuda.is_available() then
    it("on " .. DEVICE, function() S.skip("CRESCENT_FUZZ_DEVICE=" .. DEVICE .. ": crescent sees no GPU") end)
    return
  end
  local always = function() return true end
  if FILE then
    it(FILE, function() check_list({ FILE }, always, true, "programs") end)
    return
  end
  local files = saved_files()
  if #files > 0 and not ONLY then
    it(("the %d saved programs of %s"):format(#files, FOUND_DIR), function() check_list(files, always, true, "saved programs") end)
  end
  local first, last, errored = ONLY or 1, ONLY or PROGRAMS, 0
  local function pick(i) return ONLY ~= nil or (TORCH_EVERY > 0 and i % TORCH_EVERY == 0) end
  for g0 = first, last, GROUP do
    local g1 = math.min(last, g0 + GROUP - 1)
    it(("programs %d..%d (seed %d)"):format(g0, g1, SEED), function()
      local list = {}
      for i = g0, g1 do list[#list + 1] = i end
      errored = errored + check_list(list, pick, g1 == last, "programs")
      if os.getenv("CRESCENT_FUZZ_VERBOSE") then
        local st = {}
        for k, v in pairs(TOTALS) do st[#st + 1] = k .. " " .. v end
        io.stderr:write(("fuzz: programs up to %d, %d with an eager error; %s\n"):format(g1, errored, table.concat(st, ", ")))
        io.stderr:write(torch_summary())
      end
    end)
  end
  it("the PyTorch comparison", function()
    if TORCH_EVERY == 0 then S.skip("CRESCENT_FUZZ_TORCH=0") end
    if not torch_batch() then S.skip("fuzz: no comparison with PyTorch: " .. TORCH.why) end
    io.stderr:write(torch_summary())
  end)
end)
