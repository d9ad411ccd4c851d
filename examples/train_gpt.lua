-- Trains a character-level GPT (examples/models/gpt2.lua) on a text corpus, eagerly with autograd
-- and AdamW: a progress line (step, loss, tokens/s, ETA), the validation loss every --eval-every
-- steps beside the unigram baseline (the entropy of the character frequencies: what a model
-- without context reaches), a checkpoint (model + optimizer + step, safetensors) that --resume
-- continues from, then a sample of generated text.
--
-- The default corpus is built at start from the license texts Debian ships in every system
-- (/usr/share/common-licenses, package base-files: GPL, LGPL, GFDL, Apache-2.0, MPL, Artistic,
-- BSD, CC0; each license's own text permits verbatim copies), about 260 KB; --data FILE takes any
-- text file instead. Nothing is downloaded.
--
--   crescent examples/train_gpt.lua [options]
--     --steps N (default 500)      --batch B (16)      --ctx L (64: context, tokens per row)
--     --layers N (3) --d D (96) --heads H (4)          --lr LR (3e-3, warm-up then cosine)
--     --eval-every N (100)         --out FILE (train_gpt.safetensors)    --resume 1
--     --sample N (300: characters generated at the end, 0 = none)      --seed N (0)
--     --device cpu|cuda (cpu)      --data FILE         --check 1 (exit 1 unless the final
--                                                      validation loss is below the baseline)
--     --stop-after N (stop there, as an interrupted run would, with a checkpoint; the schedule
--                     still spans --steps)
--     --compile 1 (the model's forward and backward run as compiled graphs: T.compile of the
--                  module, compiled autograd; at step 1 and every --eval-every steps the loss is
--                  checked against an eager forward of the same batch; compare the tokens/s of a
--                  run without it)
--     --compile 2 (the whole step - zero_grad, forward, backward, clip_grad_norm_ and the AdamW
--                  update - is one compiled function; the same loss check)
--     --nproc N (data-parallel on N GPUs: runs itself under `crescent --nproc N ... --ddp`)
--     --ddp (under `crescent --nproc N`: one rank of a data-parallel run; each rank takes its
--            slice of the --batch rows, T.nn.parallel.DistributedDataParallel averages the
--            gradients, rank 0 prints and saves; the logged loss is the ranks' average)
-- The batches of step k are drawn from seed and k alone, so a resumed run repeats the steps of an
-- uninterrupted one exactly.
local T = require "crescent"

package.path = (debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local G = require "models.gpt2"
local F = T.F

local o = { steps = 500, batch = 16, ctx = 64, layers = 3, d = 96, heads = 4, lr = 3e-3, eval_every = 100,
            out = "train_gpt.safetensors", sample = 300, seed = 0, device = "cpu" }
do
  local argv, i = arg or {}, 1
  while argv[i] do
    local key, val = argv[i]:match("^%-%-([%w%-]+)$"), argv[i + 1]
    if key == "ddp" and (val == nil or val:match("^%-%-")) then val, i = "1", i - 1 end  -- (a bare flag)
    if not key or val == nil then error("train_gpt.lua: expected --option value pairs, got '" .. argv[i] .. "' (see the header of the script)", 0) end
    key = key:gsub("%-", "_")
    if o[key] == nil and key ~= "resume" and key ~= "data" and key ~= "check" and key ~= "stop_after" and key ~= "compile" and key ~= "nproc" and key ~= "ddp" then error("train_gpt.lua: unknown option --" .. key, 0) end
    o[key] = tonumber(val) or val
    i = i + 2
  end
end

-- --nproc N: this script again on N ranks (crescent's launcher), each with --ddp
if o.nproc and not o.ddp then
  local q = function(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
  local cmd = { q(arg[-1]), "--nproc", tonumber(o.nproc), q(arg[0]) }
  local argv, i = arg, 1
  while argv[i] do
    if argv[i] == "--nproc" then i = i + 2 else cmd[#cmd + 1] = q(argv[i]); i = i + 1 end
  end
  cmd[#cmd + 1] = "--ddp"
  local ok, _, status = os.execute(table.concat(cmd, " "))
  os.exit(type(ok) == "number" and (ok == 0 and 0 or 1) or (ok and 0 or status or 1))
end
local D, rank, world = T.distributed, 0, 1
if o.ddp then
  D.init_process_group("nccl")
  rank, world = D.get_rank(), D.get_world_size()
  o.device = D.device()
  if o.batch % world ~= 0 then error(string.format("train_gpt.lua: --batch %d does not split over %d ranks", o.batch, world), 0) end
end
local main = rank == 0  -- (prints, evaluates and saves)
local print = main and print or function() end
T.manual_seed(o.seed)

-- the corpus ----------------------------------------------------------------------------------------
local LICENSES = { "GPL-3", "GPL-2", "GPL-1", "LGPL-3", "LGPL-2.1", "LGPL-2", "GFDL-1.3", "GFDL-1.2", "Apache-2.0",
                   "MPL-2.0", "MPL-1.1", "Artistic", "BSD", "CC0-1.0" }
local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
local text
if o.data then
  text = read(o.data) or error("train_gpt.lua: cannot read --data " .. o.data, 0)
else
  local parts = {}
  for _, name in ipairs(LICENSES) do parts[#parts + 1] = read("/usr/share/common-licenses/" .. name) end
  if #parts == 0 then error("train_gpt.lua: no /usr/share/common-licenses here (not Debian?): pass --data FILE", 0) end
  text = table.concat(parts, "\n")
end

-- characters -> ids 0..V-1 (the model's ids are 0-based); a checkpoint keeps the alphabet
local function alphabet_of(s)
  local seen, chars = {}, {}
  for i = 1, #s do seen[s:byte(i)] = true end
  for b = 0, 255 do if seen[b] then chars[#chars + 1] = b end end
  return chars
end
local ckpt = o.resume and T.load(o.out)
local chars = ckpt and ckpt["meta.alphabet"]:totable() or alphabet_of(text)
local id_of = {}
for i, b in ipairs(chars) do id_of[b] = i - 1 end
local ids = {}
for i = 1, #text do ids[i] = id_of[text:byte(i)] or 0 end
local V = #chars
local split = math.floor(#ids * 0.9)
local data = T.tensor(ids, { dtype = "int64" }):to(o.device)
local train, val = data:narrow(1, 1, split), data:narrow(1, split + 1, #ids - split)

-- unigram baseline: the entropy (nats) of the training characters' frequencies
local counts = {}
for i = 1, split do counts[ids[i]] = (counts[ids[i]] or 0) + 1 end
local unigram = 0
for _, c in pairs(counts) do unigram = unigram - c / split * math.log(c / split) end

-- model, optimizer, schedule -------------------------------------------------------------------------
local cfg = { vocab = V, n_ctx = o.ctx, d = o.d, n_head = o.heads, n_layer = o.layers }
if ckpt then
  for _, k in ipairs({ "n_ctx", "d", "n_head", "n_layer" }) do cfg[k] = ckpt["meta.config." .. k]:item() end
end
local model = G.new(cfg):to(o.device)
local decay, no_decay = {}, {}  -- (as GPT-2 training: no weight decay on biases and LayerNorm gains)
for _, p in ipairs(model:parameters()) do
  if p:dim() >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
end
local opt = T.optim.AdamW({ { params = decay, weight_decay = 0.1 }, { params = no_decay, weight_decay = 0 } },
  { lr = o.lr, betas = { 0.9, 0.95 } })
local warmup = math.max(1, math.floor(o.steps / 10))
local function lr_factor(step)  -- linear warm-up, then cosine down to 10 %
  if step < warmup then return (step + 1) / warmup end
  local t = (step - warmup) / math.max(1, o.steps - warmup)
  return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * math.min(t, 1)))
end
local start = 0
if ckpt then
  for k, t in pairs(ckpt) do ckpt[k] = t:to(o.device) end  -- (the optimizer's state lives beside its parameters)
  local msd = {}
  for k, t in pairs(ckpt) do
    local name = k:match("^model%.(.+)$")
    if name then msd[name] = t end
  end
  model:load_state_dict(msd)
  opt:load_state_dict(T.optim.unflatten_state_dict(ckpt, "optim."))
  start = ckpt["meta.step"]:item()
end
local sched = T.optim.lr_scheduler.LambdaLR(opt, lr_factor, { last_epoch = start > 0 and start - 1 or -1 })

-- batches: B random windows of L + 1 characters
local arange = T.arange(o.ctx, { device = o.device })
local function batch(src)
  local starts = T.randint(0, src:size(1) - o.ctx - 1, { o.batch, 1 }):to(o.device)
  local idx = (starts + arange + 1):flatten()  -- (1-based positions)
  return src:index_select(1, idx):view(o.batch, o.ctx), src:index_select(1, idx + 1):view(o.batch, o.ctx)
end
local per = o.batch / world
local forward = o.ddp and T.nn.parallel.DistributedDataParallel(model) or model
if o.compile == 1 then forward = T.compile(forward) end  -- (DDP's bucket hooks fire from the compiled backward)
local function loss_of(x, y, m)
  local logits = (m or model)(x)
  return F.cross_entropy(logits:view(-1, V), y:flatten() + 1)
end
local function evaluate(step)
  T.manual_seed(o.seed * 1000003 + step + 500009)
  return T.no_grad(function()
    model:eval()
    local s = 0
    for _ = 1, 8 do s = s + loss_of(batch(val)):item() end
    model:train()
    return s / 8
  end)
end

print(string.format("crescent %s, %d threads, %s: corpus %d characters (%s), alphabet %d, unigram baseline %.3f nats",
  T.version, T.get_num_threads(), o.device, #text, o.data or "Debian's /usr/share/common-licenses", V, unigram))
print(string.format("GPT %d layers, d %d, %d heads, context %d: %.2fM parameters; batch %d x %d, AdamW lr %g, steps %d..%d",
  cfg.n_layer, cfg.d, cfg.n_head, cfg.n_ctx, model:num_parameters() / 1e6, o.batch, o.ctx, o.lr, start + 1, o.steps)
  .. (o.compile == 1 and "; compiled" or o.compile == 2 and "; compiled step" or ""))

-- training ---------------------------------------------------------------------------------------------
local function save(step)
  local sd = T.optim.flatten_state_dict(opt:state_dict(), "optim.")
  for name, t in pairs(model:state_dict()) do sd["model." .. name] = t end
  sd["meta.step"] = T.tensor(step, { dtype = "int64" })
  sd["meta.alphabet"] = T.tensor(chars, { dtype = "int64" })
  for _, k in ipairs({ "n_ctx", "d", "n_head", "n_layer" }) do sd["meta.config." .. k] = T.tensor(cfg[k], { dtype = "int64" }) end
  T.no_grad(function() for k, t in pairs(sd) do sd[k] = t:cpu() end end)  -- (files hold host tensors)
  T.save(o.out, sd)
end

-- one training step: the loss (--compile 2 compiles all of it)
local function train_step(x, y)
  opt:zero_grad()
  local loss = loss_of(x, y, forward)
  loss:backward()
  T.nn.utils.clip_grad_norm_(model:parameters(), 1.0)
  opt:step()
  return loss
end
if o.compile == 2 then train_step = T.compile(train_step) end
local function check_loss(step, l, e)
  if math.abs(l - e) > 1e-4 * math.max(1, math.abs(e)) then
    error(string.format("train_gpt.lua: step %d: compiled loss %.6f, eager loss %.6f", step, l, e), 0)
  end
end

local t0, last_val = T.time(), nil
local last = math.min(o.steps, o.stop_after or o.steps)
for step = start + 1, last do
  T.manual_seed(o.seed * 1000003 + step)
  local x, y = batch(train)
  if o.ddp then x, y = x:narrow(1, rank * per + 1, per), y:narrow(1, rank * per + 1, per) end  -- (this rank's rows)
  local checked = (o.compile or 0) ~= 0 and (step == start + 1 or step % o.eval_every == 0)
  local eager = checked and T.no_grad(function() return loss_of(x, y):item() end)  -- (before the update)
  local loss = train_step(x, y)
  if checked then check_loss(step, loss:item(), eager) end
  sched:step()
  local l = loss:detach():clone()
  if o.ddp then D.all_reduce(l, { op = "avg" }) end
  l = l:item()
  local el = T.time() - t0
  local done = step - start
  if main then
    io.write(string.format("\rstep %d/%d | loss %.3f | %.0f tokens/s | ETA %.0fs   ", step, o.steps, l,
      done * o.batch * o.ctx / el, el / done * (o.steps - step)))
    io.flush()
  end
  if main and (step % o.eval_every == 0 or step == last) then
    last_val = evaluate(step)
    io.write(string.format("\rstep %d/%d | loss %.3f | val loss %.3f (unigram %.3f) | %.0fs\n", step, o.steps, l, last_val, unigram, el))
    save(step)
  end
end
if last_val then
  print(string.format("validation loss %.3f, %.3f below the unigram baseline; checkpoint %s", last_val, unigram - last_val, o.out))
end
if o.ddp then D.destroy_process_group() end
if not main then os.exit(0) end
if o.check and not (last_val and last_val < unigram) then
  print("train_gpt.lua: the validation loss did not fall below the unigram baseline")
  os.exit(1)
end

-- sampling ------------------------------------------------------------------------------------------------
if o.sample > 0 then
  local prompt = val:narrow(1, 1, 16):view(1, 16)
  local ctx = prompt
  local out = {}
  T.manual_seed(o.seed + 1)
  model:eval()
  T.no_grad(function()
    for _ = 1, o.sample do
      local logits = model(ctx)
      local nxt = G.pick(logits:select(2, ctx:size(2)), 8, 0.8)
      out[#out + 1] = string.char(chars[nxt:item() + 1])
      ctx = T.cat({ ctx, nxt }, 2)
      if ctx:size(2) > cfg.n_ctx then ctx = ctx:narrow(2, ctx:size(2) - cfg.n_ctx + 1, cfg.n_ctx) end
    end
  end)
  local p = {}
  for _, v in ipairs(prompt:view(-1):cpu():totable()) do p[#p + 1] = string.char(chars[v + 1]) end
  print("sample (prompt in brackets):\n[" .. table.concat(p) .. "]" .. table.concat(out))
end
