-- T.nn and T.F (API.md section 4): modules against hand-checked values, the Module machinery
-- (definition order, PyTorch names, state_dict round trips and their errors, to / eval / train),
-- the functions against PyTorch 1.13, and compiled forwards equal to eager ones.
local T = require "crescent"
local R = require "torch_ref"
local nn, F = T.nn, T.F

T.manual_seed(3)
local errs = expect.error_checker("test_nn.lua")

local Net = nn.Module:extend("Net")
function Net:init(d)
  self.fc1 = nn.Linear(d, 2 * d)
  self.act = nn.GELU()
  self.blocks = nn.ModuleList({ nn.LayerNorm(2 * d), nn.Linear(2 * d, d, { bias = false }) })
  self:register_buffer("steps", T.zeros(1, { dtype = "int64" }))
  self:register_buffer("scratch", T.zeros(2), false)
end
function Net:forward(x)
  x = self.act(self.fc1(x))
  for _, m in ipairs(self.blocks) do x = m(x) end
  return x
end

describe("Module", function()
  it("lists parameters in definition order under PyTorch's names", function()
    local names = {}
    for name, p in Net(3):named_parameters() do names[#names + 1] = name .. table.concat(p.shape, "x") end
    expect.eq(names, { "fc1.weight6x3", "fc1.bias6", "blocks.0.weight6", "blocks.0.bias6", "blocks.1.weight3x6" })
    expect.eq(#Net(3):parameters(), 5)
    expect.eq(Net(3):num_parameters(), 18 + 6 + 6 + 6 + 18)
  end)
  it("keeps persistent buffers in state_dict, not in parameters", function()
    local sd = Net(2):state_dict()
    expect.truthy(T.is_tensor(sd.steps))
    expect.eq(sd.scratch, nil)
    for name in Net(2):named_parameters() do expect.truthy(name ~= "steps") end
    local bufs = {}
    for name in Net(2):named_buffers() do bufs[#bufs + 1] = name end
    expect.eq(bufs, { "steps", "scratch" })
  end)
  it("counts a shared tensor once in parameters()", function()
    local M = nn.Module:extend("Tied")
    function M:init() self.a = nn.Linear(2, 2); self.b = nn.Linear(2, 2); self.b.weight = self.a.weight end
    expect.eq(#M():parameters(), 3)
    expect.truthy(M():state_dict()["b.weight"] ~= nil)
  end)
  it("to / float / double keep tied weights one tensor, and a no-op conversion keeps it itself", function()
    local M = nn.Module:extend("TiedTo")
    function M:init()
      self.a = nn.Linear(2, 2, { bias = false }); self.b = nn.Linear(2, 2, { bias = false })
      self.b.weight = self.a.weight
      T.no_grad(function() self.a.weight:fill_(1) end)
    end
    -- PyTorch: one parameter whose gradient is 2 (both uses), so one SGD step of lr 1 gives -1
    for _, conv in ipairs({ "none", "float", "double", "to" }) do
      local m = M()
      local w = m.a.weight
      if conv == "to" then m:to("float64") elseif conv ~= "none" then m[conv](m) end
      expect.truthy(rawequal(m.a.weight, m.b.weight), conv .. ": still tied")
      expect.truthy(rawequal(m.a.weight, w), conv .. ": the same tensor (converted in place)")
      expect.eq(#m:parameters(), 1, conv)
      local opt = T.optim.SGD(m:parameters(), { lr = 1 })
      local x = T.ones(1, 2, { dtype = m.a.weight.dtype })
      local l = m.a(x):sum() + m.b(x):sum()
      l:backward()
      opt:step()
      expect.eq(m.a.weight:totable(), { { -1, -1 }, { -1, -1 } }, conv)
    end
  end)
  it("state_dict gives detached tensors that share the module's memory", function()
    local m = nn.Linear(2, 2)
    local w = m.weight:detach():clone()
    local sd = m:state_dict()
    expect.eq({ sd.weight.requires_grad, sd.bias.requires_grad }, { false, false })
    sd.weight:mul_(2)
    expect.close(m.weight, w * 2, 0, 0)
    expect.eq({ m.weight.requires_grad, m.weight.is_leaf }, { true, true })
  end)
  it("state_dict and load_state_dict name a module held in two fields under both, as PyTorch", function()
    local M = nn.Module:extend("TwoNames")
    function M:init() self.l1 = nn.Linear(2, 2); self.l2 = self.l1 end
    local m = M()
    local keys = {}
    for k in pairs(m:state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    expect.eq(keys, { "l1.bias", "l1.weight", "l2.bias", "l2.weight" })
    local names = {}
    for name in m:named_parameters() do names[#names + 1] = name end
    expect.eq(names, { "l1.weight", "l1.bias" })
    -- PyTorch's checkpoint of this model has all four keys; the later name's value stays
    m:load_state_dict({ ["l1.weight"] = T.ones(2, 2), ["l1.bias"] = T.ones(2), ["l2.weight"] = T.full({ 2, 2 }, 3),
      ["l2.bias"] = T.ones(2) })
    expect.eq(m.l1.weight:totable(), { { 3, 3 }, { 3, 3 } })
    errs(function() m:load_state_dict({ ["l1.weight"] = T.ones(2, 2), ["l1.bias"] = T.ones(2) }) end, "load_state_dict",
      "TwoNames: missing keys: l2.bias, l2.weight")
  end)
  it("round-trips state_dict through load_state_dict and T.save / T.load", function()
    local a, b = Net(4), Net(4)
    local x = T.randn(5, 4)
    expect.truthy((a(x) - b(x)):abs():max():item() > 0)
    local path = os.tmpname()
    T.save(path, a:state_dict())
    b:load_state_dict(T.load(path))
    os.remove(path)
    expect.close(b(x), a(x), 0, 0)
  end)
  it("load_state_dict copies into the existing tensors (converting the dtype)", function()
    local m = nn.Linear(2, 2)
    local w = m.weight
    m:load_state_dict({ weight = T.ones(2, 2, { dtype = "float64" }), bias = T.zeros(2) })
    expect.truthy(rawequal(m.weight, w))
    expect.eq(m.weight.dtype, "float32")
    expect.close(m(T.tensor({ { 1, 2 } }, { dtype = "float32" })), { { 3, 3 } })
  end)
  it("load_state_dict names every missing, unexpected and mis-shaped key", function()
    local m = Net(2)
    local sd = m:state_dict()
    sd["fc1.bias"] = nil
    sd["blocks.1.weight"] = nil
    sd["head.weight"] = T.zeros(1)
    errs(function() m:load_state_dict(sd) end, "load_state_dict", "Net: missing keys: blocks.1.weight, fc1.bias",
      "unexpected keys: head.weight")
    sd = m:state_dict()
    sd["fc1.weight"] = T.zeros(3, 2)
    errs(function() m:load_state_dict(sd) end, "load_state_dict", "size mismatch for fc1.weight: the module has shape {4,2}, the state_dict {3,2}")
    errs(function() m:load_state_dict(sd, { strict = false }) end, "load_state_dict", "size mismatch for fc1.weight")
    errs(function() m:load_state_dict(5) end, "load_state_dict", "expected a table of tensors, got number")
  end)
  it("load_state_dict with strict = false reports what it skipped", function()
    local m = nn.Linear(2, 3)
    local r = m:load_state_dict({ weight = T.ones(3, 2), extra = T.ones(1) }, { strict = false })
    expect.eq(r.missing_keys, { "bias" })
    expect.eq(r.unexpected_keys, { "extra" })
    expect.close(m.weight, T.ones(3, 2))
  end)
  it("to(dtype) converts floating tensors only; eval / train reach every module", function()
    local m = Net(2):to("float64")
    expect.eq(m.fc1.weight.dtype, "float64")
    expect.eq(m.blocks[1].weight.dtype, "float64")
    expect.eq(m.steps.dtype, "int64")
    expect.eq(m(T.randn(1, 2):double()).dtype, "float64")
    m:eval()
    expect.eq(m.training, false)
    expect.eq(m.blocks[2].training, false)
    m:train()
    expect.eq(m.blocks[2].training, true)
  end)
  it("to(dtype) converts parameters in place: an optimizer made before keeps training them", function()
    local m = nn.Linear(3, 2)
    local w, b = m.weight, m.bias
    local opt = T.optim.SGD(m:parameters(), { lr = 1 })
    m(T.ones(1, 3)):sum():backward()
    m:double()
    expect.truthy(rawequal(m.weight, w) and rawequal(m.bias, b), "the same tensors")
    expect.eq({ w.dtype, w.requires_grad, w.is_leaf, w.grad.dtype }, { "float64", true, true, "float64" })
    expect.eq(w.grad:totable(), { { 1, 1, 1 }, { 1, 1, 1 } })
    local before = w:detach():clone()
    opt:zero_grad()
    m(T.ones(1, 3, { dtype = "float64" })):sum():backward()
    opt:step()
    expect.close(m.weight, before - 1, 0, 0)
    expect.eq(opt.param_groups[1].params[1].dtype, "float64")
  end)
  it("to(dtype) keeps the parameters' hooks (PyTorch's p.data = q keeps them)", function()
    local m = nn.Linear(2, 2)
    local calls, post = 0, 0
    m.weight:register_hook(function(g) calls = calls + 1; return g * 2 end)
    m.bias:register_post_accumulate_grad_hook(function() post = post + 1 end)
    m:double()
    m(T.ones(1, 2, { dtype = "float64" })):sum():backward()
    expect.eq({ calls, post }, { 1, 1 })
    expect.eq(m.weight.grad:totable(), { { 2, 2 }, { 2, 2 } })
  end)
  it("prints like PyTorch", function()
    local s = tostring(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Dropout(0.25)))
    expect.eq(s, "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): ReLU()\n  (2): Dropout(p=0.25, inplace=False)\n)")
    expect.eq(tostring(nn.LayerNorm(16)), "LayerNorm((16,), eps=1e-05, elementwise_affine=True)")
  end)
  it("reports a missing forward and bad constructor arguments", function()
    local M = nn.Module:extend("NoForward")
    errs(function() M()(T.ones(1)) end, "NoForward", "forward is not defined")
    errs(function() nn.Linear(0, 2) end, "Linear", "argument 1 (in_features) expected a positive integer, got 0")
    errs(function() nn.Linear(2, 2, { bias = false, biass = true }) end, "Linear", "unknown option 'biass'")
    errs(function() nn.Sequential(nn.ReLU(), 3) end, "Sequential", "item 2 expected a module, got number")
    errs(function() nn.Dropout(2) end, "Dropout", "expected a probability in [0, 1], got 2")
    errs(function() nn.ModuleList({ 1 }) end, "ModuleList", "item 1 expected a module")
  end)
end)

describe("Module API as torch's", function()
  it("registers tensors and modules under any name, in torch's order, each once", function()
    local N = nn.Module:extend("Underscored")
    function N:init() self._bn0 = nn.BatchNorm1d(4); self._fc = nn.Linear(4, 2) end
    local m = N()
    m:eval()
    expect.truthy(#m:parameters() == 4 and not m._bn0.training)
    local M = nn.Module:extend("OwnFirst")
    function M:init() self.emb = nn.Linear(2, 2); self.pos = T.zeros(3); self:register_buffer("buf", T.ones(1)); self.w2 = T.ones(2) end
    local names = {}
    for n in M():named_parameters() do names[#names + 1] = n end
    expect.eq(names, { "pos", "w2", "emb.weight", "emb.bias" })  -- (own parameters, then children's)
    local Tie = nn.Module:extend("Tie")
    function Tie:init() self.emb = nn.Embedding(5, 4); self.head = nn.Linear(4, 5, { bias = false }); self.head.weight = self.emb.weight end
    local tied = {}
    for n in Tie():named_parameters() do tied[#tied + 1] = n end
    expect.eq(tied, { "emb.weight" })
    local D = nn.Module:extend("Twice")
    function D:init() self.a = nn.Linear(2, 2); self.b = self.a end
    local d, calls = D(), 0
    d:apply(function() calls = calls + 1 end)
    expect.truthy(#d:modules() == 2 and #d:children() == 1 and calls == 2)
    local order = {}
    nn.Sequential(nn.Linear(1, 1), nn.Sequential(nn.ReLU())):apply(function(x) order[#order + 1] = x.__name end)
    expect.eq(order, { "Linear", "ReLU", "Sequential", "Sequential" })
    local mods = {}
    for n, x in nn.Sequential(nn.Linear(1, 1), nn.ReLU()):named_modules() do mods[#mods + 1] = n .. ":" .. x.__name end
    expect.eq(mods, { ":Sequential", "0:Linear", "1:ReLU" })
  end)
  it("keeps a computed tensor on self as a plain attribute; nn.Parameter marks parameters", function()
    local C = nn.Module:extend("Caches")
    function C:init() self.lin = nn.Linear(2, 2) end
    function C:forward(x) local y = self.lin(x); self.last = y; return y end
    local c = C()
    c(T.ones(1, 2))
    expect.truthy(#c:parameters() == 2 and c:state_dict().last == nil and c.last ~= nil)
    c.extra = nn.Parameter(T.ones(3) * 2)
    expect.truthy(#c:parameters() == 3 and c.extra.requires_grad and c.extra.is_leaf)
    local frozen = nn.Parameter(T.ones(2), false)
    expect.eq(frozen.requires_grad, false)
    local w = T.ones(2, 3, { requires_grad = true })
    w.data:mul_(2)
    expect.eq(w:detach():sum():item(), 12)
    w.data = T.zeros(3)
    expect.truthy(w.requires_grad and w.is_leaf and w.shape:equals({ 3 }))
  end)
  it("checks before it changes: to(int), buffer names, options", function()
    local l = nn.Linear(2, 3)
    errs(function() l:to("int32") end, "to", "only accepts floating point dtypes, got int32")
    expect.truthy(l.weight.dtype == "float32" and l.weight.requires_grad)
    errs(function() l:register_buffer("weight", T.ones(1)) end, "register_buffer", "attribute 'weight' already exists (a parameter)")
    errs(function() l:register_buffer("a.b", T.ones(1)) end, "register_buffer", 'name can\'t be empty or contain ".", got "a.b"')
    errs(function() l:load_state_dict({}, { strickt = false }) end, "load_state_dict", "unknown option 'strickt'")
    errs(function() nn.ModuleDict({ training = nn.ReLU() }) end, "ModuleDict", "attribute 'training' already exists")
    local b = nn.Module()
    b:register_buffer("mask", T.ones(2), { persistent = false })
    expect.eq(next(b:state_dict()), nil)
    local sd = l:state_dict({ prefix = "model.", keep_vars = true })
    expect.truthy(sd["model.weight"] == l.weight and sd["model.weight"].requires_grad)
    expect.eq(#l:parameters(false), 2)
    expect.eq(l:bfloat16().weight.dtype, "bfloat16")
  end)
  it("containers: named fields run in Sequential, negative positions, extend / insert / pop", function()
    T.manual_seed(0)
    local s = nn.Sequential(nn.Linear(2, 2))
    s.act = nn.ReLU()
    expect.truthy(s(T.ones(4, 2)):min():item() >= 0)
    expect.truthy(rawequal(s[-1], s.act) and rawequal(s[1], s[-2]))
    errs(function() return s[0] end, "Sequential", "index 0 is out of range for 2 modules (1-based: 1..2, or -2..-1)")
    local ml = nn.ModuleList({ nn.ReLU() })
    ml:extend({ nn.Tanh(), nn.ReLU() })
    ml:insert(1, nn.Sigmoid())
    expect.truthy(#ml == 4 and ml[1].__name == "Sigmoid" and ml[2].__name == "ReLU" and ml[-1].__name == "ReLU")
    local Sub = nn.Sequential:extend("MySequential")  -- (a name: the class's extend)
    expect.eq(Sub(nn.ReLU()).__name, "MySequential")
    local md = nn.ModuleDict({ a = nn.ReLU(), b = nn.Tanh() })
    expect.truthy(md:contains("a") and md:pop("a").__name == "ReLU" and md:len() == 1 and not md:contains("a"))
    errs(function() nn.Sequential(nn.Linear(2, 2), nil, nn.ReLU()) end, "Sequential", "item 2 expected a module, got nil")
    local twice = nn.Linear(2, 2)
    expect.eq(nn.Sequential(twice, twice)(T.ones(1, 2)):totable(), twice(twice(T.ones(1, 2))):totable())  -- (as torch's)
    local named = nn.Sequential({ { "fc", nn.Linear(2, 3) }, { "act", nn.ReLU() } })  -- (torch's OrderedDict form)
    expect.truthy(named.fc.__name == "Linear" and named(T.ones(1, 2)):min():item() >= 0 and named:state_dict()["fc.weight"] ~= nil)
    expect.eq(nn.Sequential({ b = nn.ReLU(), a = nn.Tanh() }):children()[1].__name, "Tanh")
    errs(function() nn.Sequential({ { 1, nn.ReLU() } }) end, "Sequential", "item 1 expected a {name, module} pair")
    expect.truthy(named:len() == 2 and named[1] == named.fc and named[-1] == named.act)
    named:append(nn.Linear(3, 1))  -- (named as torch names it: by its position, "2")
    expect.truthy(named:state_dict()["2.weight"] ~= nil and named[3].__name == "Linear")
    errs(function() named:insert(1, nn.Tanh()) end, "Sequential:insert", "not implemented for a Sequential with named children")
    expect.eq(T.explain(nn.Linear(2, 2), T.ones(1, 2)).graph_count, 1)
  end)
  it("forward hooks, submodules by path, printing as torch's", function()
    local m = nn.Linear(2, 2)
    local h = m:register_forward_hook(function(_, _, out) return out * 0 end)
    expect.eq(m(T.ones(1, 2)):abs():sum():item(), 0)
    h:remove()
    local hooked = nn.Linear(2, 2)
    hooked:register_forward_hook(function(_, _, out) return out * 0 + 3 end)
    local compiled = T.compile(hooked)
    for _ = 1, 3 do expect.eq(compiled(T.ones(1, 2)):totable(), { { 3, 3 } }) end  -- (compiled runs hooks too)
    local pre = m:register_forward_pre_hook(function(_, x) return x * 0 end)
    expect.close(m(T.ones(1, 2)), m.bias:detach():view(1, 2))
    pre:remove()
    local net = nn.Sequential(nn.Linear(2, 2))
    expect.eq(net:get_parameter("0.weight"), net[1].weight)
    expect.eq(net:get_submodule("0"), net[1])
    errs(function() net:get_submodule("0.x") end, "get_submodule", "Linear has no attribute `x`")
    net:add_module("out", nn.ReLU())
    expect.eq(#net:children(), 2)
    expect.eq(tostring(nn.BatchNorm1d(3, { momentum = false })):match("momentum=None") ~= nil, true)
    expect.eq(tostring(F.softmax(T.ones(2), { dim = -1 })), tostring(F.softmax(T.ones(2), -1)))
  end)
end)

describe("layers", function()
  it("Linear computes x W^T + b", function()
    local m = nn.Linear(2, 3)
    T.no_grad(function()  -- (parameters require grad: in-place writes need no_grad, as in PyTorch)
      m.weight:copy_(T.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }))
      m.bias:copy_(T.tensor({ 1, 0, -1 }))
    end)
    expect.close(m(T.tensor({ { 1, 1 }, { 2, -1 } }, { dtype = "float32" })), { { 4, 7, 10 }, { 1, 2, 3 } })
    expect.eq(nn.Linear(2, 3, { bias = false }).bias, nil)
    local bound = 1 / math.sqrt(50)
    expect.truthy(nn.Linear(50, 40).weight:abs():max():item() <= bound)
  end)
  it("Embedding looks rows up by 1-based index", function()
    local e = nn.Embedding(3, 2)
    T.no_grad(function() e.weight:copy_(T.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })) end)
    expect.close(e(T.tensor({ { 3, 1 } }):long()), { { { 5, 6 }, { 1, 2 } } })
  end)
  it("LayerNorm and RMSNorm normalise the last dims", function()
    local x = T.tensor({ { 1, 2, 3, 4 } }, { dtype = "float32" })
    -- mean 2.5, biased variance 1.25
    local s = 1 / math.sqrt(1.25 + 1e-5)
    expect.close(nn.LayerNorm(4)(x), { { -1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s } })
    local ln = nn.LayerNorm(4, { eps = 0 })
    T.no_grad(function()
      ln.weight:fill_(2)
      ln.bias:fill_(1)
    end)
    expect.close(ln(x), { { 1 - 3 / math.sqrt(1.25), 1 - 1 / math.sqrt(1.25), 1 + 1 / math.sqrt(1.25), 1 + 3 / math.sqrt(1.25) } })
    -- mean of squares 7.5
    local r = 1 / math.sqrt(7.5)
    expect.close(nn.RMSNorm(4, { eps = 0 })(x), { { r, 2 * r, 3 * r, 4 * r } })
    expect.eq(nn.LayerNorm({ 2, 2 })(x:view(1, 2, 2)).shape, { 1, 2, 2 })
    errs(function() nn.LayerNorm(3)(x) end, "layer_norm", "normalized_shape {3} expected to match the last sizes of the input of shape {1,4}")
  end)
  it("activations", function()
    local x = T.tensor({ -1, 0, 2 }, { dtype = "float32" })
    expect.close(nn.ReLU()(x), { 0, 0, 2 })
    expect.close(nn.SiLU()(x), { -1 / (1 + math.exp(1)), 0, 2 / (1 + math.exp(-2)) })
    expect.close(nn.GELU()(x), T.gelu(x))
    expect.close(nn.GELU({ approximate = "tanh" })(x), T.gelu(x, { approximate = "tanh" }))
  end)
  it("Dropout zeroes about p of the elements when training and is the identity in eval", function()
    local d = nn.Dropout(0.25)
    local x = T.ones(100000)
    local y = d(x)
    local zeros = y:eq(0):sum():item()
    expect.truthy(math.abs(zeros / 100000 - 0.25) < 0.01, "fraction zeroed " .. zeros / 100000)
    expect.close(y:max(), 1 / 0.75)
    expect.close(y:sum(), 100000, 0.02)
    expect.close(d:eval()(x), x, 0, 0)
    expect.close(F.dropout(x, 1), T.zeros(100000))
    expect.close(F.dropout(x, 0.5, false), x)
  end)
  it("Sequential chains its modules; ModuleList indexes from 1", function()
    local s = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    local x = T.randn(5, 3)
    expect.close(s(x), s[3](s[2](s[1](x))))
    local l = nn.ModuleList():append(nn.ReLU()):append(nn.SiLU())
    expect.eq(#l, 2)
    expect.eq(l[2].__name, "SiLU")
    errs(function() l(x) end, "ModuleList", "it has no forward")
  end)
end)

expect.covers("attention")
describe("T.attention", function()
  it("checks its arguments, naming the role of each tensor", function()
    errs(function() T.attention(T.randn(2, 3), T.randn(2, 4), T.randn(2, 3)) end, "attention",
         "key expected query's size 3 in its last dim, got float32 tensor of shape {2,4}")
    errs(function() T.attention(T.randn(2, 3), T.randn(4, 3), T.randn(5, 3)) end, "attention",
         "value expected key's length 4 in dim 1")
    errs(function() T.attention(T.randn(2, 2, 3), T.randn(3, 2, 3), T.randn(3, 2, 3)) end, "attention",
         "key and value expected query's batch dims")
    errs(function() T.attention(T.randn(3), T.randn(3), T.randn(3)) end, "attention",
         "query expected at least 2 dims {..., length, size}")
    errs(function() T.attention(T.ones(2, 2):long(), T.ones(2, 2):long(), T.ones(2, 2):long()) end, "attention",
         "query expected a floating tensor, got an int64 tensor")
    errs(function() T.attention(T.randn(2, 2), T.randn(2, 2), T.randn(2, 2), 0 / 0) end, "attention",
         "scale expected a finite number")
    local q = T.randn(2, 3, 4)
    errs(function() T.attention(q, q, q, nil, true, T.ones(3, 3):bool()) end, "attention",
         "causal = true and a mask cannot be given together")
    errs(function() T.attention(q, q, q, nil, false, T.ones(4, 3):bool()) end, "attention",
         "mask expected a shape that broadcasts to the scores' {2,3,3}, got bool tensor of shape {4,3}")
    errs(function() T.attention(q, q, q, nil, false, T.ones(3, 3):int()) end, "attention",
         "mask expected bool or query's dtype float32, got int32 tensor of shape {3,3}")
  end)
  it("has one mask rule, which F.scaled_dot_product_attention's routing asks through the api", function()
    local core = require "crescent.core"
    local q, k = T.randn(2, 3, 4), T.randn(2, 5, 4)
    local function fits(m) return core.api.attention_mask_fits(core.ptr(m), core.ptr(q), core.ptr(k)) ~= 0 end
    for i, m in ipairs { T.ones(3, 5):bool(), T.randn(5), T.randn(2, 1, 5), T.randn(2, 3, 5) } do
      expect.truthy(fits(m), "fitting mask " .. i)
    end
    -- another dtype, more dims than the scores {2, 3, 5}, sizes that do not broadcast
    for i, m in ipairs { T.ones(3, 5):int(), T.randn(3, 5):double(), T.randn(1, 2, 3, 5), T.randn(4, 5), T.randn(3, 4) } do
      expect.truthy(not fits(m), "unfit mask " .. i)
    end
  end)
  -- the composite softmax(q k^T * scale + mask) v, in float64
  local function masked(q, k, v, scale, m)
    local s = T.matmul(q:double() * scale, k:double():transpose(-2, -1))
    if m.dtype == "bool" then s = s:masked_fill(m:logical_not(), -math.huge) else s = s + m:double() end
    return T.matmul(s:softmax(-1), v:double())
  end
  it("adds a float mask or keeps the keys of a bool mask, broadcast to the scores", function()
    local q, k, v = T.randn(2, 3, 5, 8), T.randn(2, 3, 7, 8), T.randn(2, 3, 7, 4)
    local masks = {
      T.randn(5, 7), T.randn(3, 1, 7), T.randn(2, 1, 5, 7), T.randn(7), T.randn(2, 3, 7, 5):transpose(-1, -2),
      -- (bool masks keep a key in every row: the diagonal, key 1)
      T.rand(5, 7):gt(0.5):logical_or(T.eye(5, 7):bool()), T.rand(2, 1, 1, 7):gt(0.5):logical_or(T.eye(1, 7):bool()),
    }
    for i, m in ipairs(masks) do
      expect.close(T.attention(q, k, v, 0.3, false, m), masked(q, k, v, 0.3, m), 1e-5, 1e-5, "mask " .. i)
    end
    -- a row that sees no key is NaN (as softmax); the others are unchanged
    local m = T.ones(5, 7):bool()
    m[2] = false
    local got = T.attention(q, k, v, nil, false, m)
    expect.truthy(got:select(3, 2):isnan():all():item(), "the masked row")
    expect.close(got:narrow(3, 3, 3), T.attention(q, k, v):narrow(3, 3, 3), 1e-6, 1e-6)
  end)
  it("gives zeros for no keys and a row of its own for one key", function()
    expect.eq(T.attention(T.randn(2, 3), T.randn(0, 3), T.randn(0, 4)):totable(), T.zeros(2, 4):totable())
    local v = T.randn(1, 4)
    expect.close(T.attention(T.randn(3, 2), T.randn(1, 2), v, nil, true), v:expand(3, 4))
    local w = T.randn(5, 3)  -- head size 0: every score 0, each row the mean of v
    expect.close(T.attention(T.randn(2, 0), T.randn(5, 0), w, 1), w:mean(1, true):expand(2, 3))
    -- (the default scale 1 / sqrt(0) is inf: 0 * inf scores, NaN, as the composite in PyTorch)
    expect.truthy(T.attention(T.randn(2, 0), T.randn(5, 0), w):isnan():all():item())
  end)
end)

-- T.F against PyTorch 1.13 (no F.rms_norm or F.scaled_dot_product_attention there: their
-- definitions are written out in torch).
local suite = R.suite()
local x, w, b = T.randn(3, 4, 8), T.randn(8), T.randn(8)
suite:case("layer_norm", "layer_norm affine", "F.layer_norm(x, (8,), w, b)", { x = x, w = w, b = b },
  function() return F.layer_norm(x, 8, w, b) end)
suite:case("layer_norm", "layer_norm 2 dims", "F.layer_norm(x, (4, 8), eps=1e-3)", { x = x },
  function() return F.layer_norm(x, { 4, 8 }, nil, nil, 1e-3) end)
suite:case("layer_norm", "layer_norm float16", "F.layer_norm(x.float(), (8,)).half()", { x = x:half() },
  function() return F.layer_norm(x:half(), 8) end, 2e-3, 2e-3)
suite:case("rms_norm", "rms_norm", "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1.1920928955078125e-07) * w",
  { x = x, w = w }, function() return F.rms_norm(x, 8, w) end)
local q, k, v = T.randn(2, 3, 5, 4), T.randn(2, 3, 7, 4), T.randn(2, 3, 7, 6)
local SDPA = "(lambda s: s.softmax(-1) @ v)"
suite:case("scaled_dot_product_attention", "sdpa plain", SDPA .. "(q @ k.transpose(-2, -1) / 2)", { q = q, k = k, v = v },
  function() return F.scaled_dot_product_attention(q, k, v) end)
suite:case("scaled_dot_product_attention", "sdpa causal", SDPA ..
  "((q @ k.transpose(-2, -1) / 2).masked_fill(~torch.ones(5, 7, dtype=torch.bool).tril(), -inf))",
  { q = q, k = k, v = v }, function() return F.scaled_dot_product_attention(q, k, v, { causal = true }) end)
local mask = T.rand(5, 7):lt(0.7)
mask[1]:fill_(true)
suite:case("scaled_dot_product_attention", "sdpa bool mask, scale", SDPA ..
  "((q @ k.transpose(-2, -1) * 0.3).masked_fill(~m, -inf))", { q = q, k = k, v = v, m = mask },
  function() return F.scaled_dot_product_attention(q, k, v, { mask = mask, scale = 0.3 }) end)
local fmask = T.randn(5, 7)
suite:case("scaled_dot_product_attention", "sdpa float mask", SDPA .. "(q @ k.transpose(-2, -1) / 2 + m)",
  { q = q, k = k, v = v, m = fmask }, function() return F.scaled_dot_product_attention(q, k, v, { mask = fmask }) end)
-- T.attention: the fused op (vm/ops/attention.cpp; its CPU kernel walks one query row at a time)
suite:case("attention", "attention plain", SDPA .. "(q @ k.transpose(-2, -1) / 2)", { q = q, k = k, v = v },
  function() return T.attention(q, k, v) end)
suite:case("attention", "attention causal, scale", SDPA ..
  "((q @ k.transpose(-2, -1) * 0.3).masked_fill(~torch.ones(5, 7, dtype=torch.bool).tril(), -inf))",
  { q = q, k = k, v = v }, function() return T.attention(q, k, v, 0.3, true) end)
suite:case("attention", "attention float16", SDPA .. "(q.float() @ k.float().transpose(-2, -1) / 2).half()",
  { q = q:half(), k = k:half(), v = v:float() }, function() return T.attention(q:half(), k:half(), v:half()) end, 2e-3, 2e-3)
local qt = T.randn(5, 3, 4):transpose(1, 2)  -- {3, 5, 4}, not contiguous
suite:case("attention", "attention transposed, 3-d", SDPA .. "(q @ k.transpose(-2, -1) / 2)",
  { q = qt, k = k[1], v = v[1] }, function() return T.attention(qt, k[1], v[1]) end)
local logits, target = T.randn(6, 5), T.tensor({ 1, 5, 2, 2, 3, 4 }):long()
local cw = T.rand(5) + 0.5
suite:case("cross_entropy", "ce mean", "F.cross_entropy(z, t - 1)", { z = logits, t = target },
  function() return F.cross_entropy(logits, target) end)
suite:case("cross_entropy", "ce sum", "F.cross_entropy(z, t - 1, reduction='sum')", { z = logits, t = target },
  function() return F.cross_entropy(logits, target, { reduction = "sum" }) end)
suite:case("cross_entropy", "ce none ignore", "F.cross_entropy(z, torch.where(t == 2, -100, t - 1), reduction='none')",
  { z = logits, t = target },
  function() return F.cross_entropy(logits, T.where(target:eq(2), -100, target), { reduction = "none" }) end)
suite:case("cross_entropy", "ce weight ignore", "F.cross_entropy(z, torch.where(t == 2, 0, t - 1), weight=w, ignore_index=0)",
  { z = logits, t = target, w = cw },
  function() return F.cross_entropy(logits, T.where(target:eq(2), 1, target), { weight = cw, ignore_index = 1 }) end)
suite:case("cross_entropy", "ce smoothing", "F.cross_entropy(z, t - 1, label_smoothing=0.1, weight=w)",
  { z = logits, t = target, w = cw },
  function() return F.cross_entropy(logits, target, { label_smoothing = 0.1, weight = cw }) end)
local probs = T.rand(6, 5):softmax(-1)
suite:case("cross_entropy", "ce probabilities", "F.cross_entropy(z, p)", { z = logits, p = probs },
  function() return F.cross_entropy(logits, probs) end)
local z3, t3 = T.randn(2, 5, 3), T.tensor({ { 1, 2, 5 }, { 4, 4, 3 } }):long()
suite:case("cross_entropy", "ce spatial", "F.cross_entropy(z, t - 1)", { z = z3, t = t3 },
  function() return F.cross_entropy(z3, t3) end)
suite:case("cross_entropy", "ce one sample", "F.cross_entropy(z[0], t[0] - 1)", { z = logits, t = target },
  function() return F.cross_entropy(logits[1], target[1]) end)
suite:check("T.F vs PyTorch")

describe("T.F", function()
  it("rejects bad arguments with the function's name", function()
    errs(function() F.cross_entropy(T.randn(2, 3), T.tensor({ 1, 4 }):long()) end, "_cross_entropy", "gather: index 4 is out of range")
    errs(function() F.cross_entropy(T.randn(2, 3), T.ones(2, 3):int():float():double():long(), { reduction = "avg" }) end,
      "cross_entropy", "avg is not a valid value for reduction")
    errs(function() F.cross_entropy(T.randn(2, 3), T.ones(2, 3):bool()) end, "cross_entropy", "target expected int64 class indices")
    errs(function() F.scaled_dot_product_attention(T.ones(1, 2), T.ones(1, 2), 3) end, "scaled_dot_product_attention",
      "argument 3 (value) expected a tensor, got number")
    errs(function() F.scaled_dot_product_attention(q, k, v, { causal = true, mask = mask }) end,
      "scaled_dot_product_attention", "cannot be given together")
    errs(function() F.scaled_dot_product_attention(q, k, v, { dropout = 0.1 }) end, "scaled_dot_product_attention",
      "unknown option 'dropout'")
    errs(function() F.layer_norm(5, 2) end, "layer_norm", "argument 1 (input) expected a tensor, got number")
  end)
  it("embedding's max_norm rescales the rows it reads in place, as torch's embedding_renorm_", function()
    local w = T.tensor({ { 3, 4 }, { 0.3, 0.4 }, { 6, 8 }, { 1, 0 } }, { dtype = "float64" }):requires_grad_()
    local y = F.embedding(T.tensor({ { 1, 3 }, { 3, 2 } }), w, { max_norm = 1 })
    expect.close(w:detach(), T.tensor({ { 0.6, 0.8 }, { 0.3, 0.4 }, { 0.6, 0.8 }, { 1, 0 } }, { dtype = "float64" }), 1e-6)
    y:sum():backward()
    expect.eq(w.grad:totable(), { { 1, 1 }, { 1, 1 }, { 2, 2 }, { 0, 0 } })
    local e = nn.Embedding(5, 3, { max_norm = 0.5, norm_type = 1 })
    e(T.tensor({ 1, 2 }))
    expect.truthy(e.weight:narrow(1, 1, 2):abs():sum(2):le(0.5 + 1e-6):all():item())
    errs(function() F.embedding(T.tensor({ 1 }), w, { max_norm = 1, sparse = true }) end, "embedding", "not implemented")
  end)
  it("takes torch's keyword arguments as a trailing table; inplace writes the input", function()
    local x = T.randn(3, 4)
    expect.eq(F.layer_norm(x, { 4 }, { eps = 1e-3 }):totable(), F.layer_norm(x, { 4 }, nil, nil, 1e-3):totable())
    expect.eq(F.leaky_relu(x, { negative_slope = 0.2 }):totable(), F.leaky_relu(x, 0.2):totable())
    expect.eq(F.dropout(x, { p = 0.5, training = false }), x)
    expect.eq(F.pad(x, { 1, 1 }, { value = 3 }):totable(), F.pad(x, { 1, 1 }, "constant", 3):totable())
    expect.eq(F.batch_norm(x, nil, nil, { training = true, eps = 1e-3 }):totable(),
      F.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-3):totable())
    local y = x:clone()
    expect.eq(F.relu(y, { inplace = true }), y)
    expect.eq(y:totable(), x:relu():totable())
    expect.eq(F.hardtanh(x:clone(), -0.5, 0.5, true):totable(), x:clamp(-0.5, 0.5):totable())
    errs(function() F.layer_norm(x, { 4 }, { epsilon = 1 }) end, "layer_norm", "unknown option 'epsilon' (expected one of: normalized_shape")
    errs(function() F.softplus(x, 2, { beta = 1 }) end, "softplus", "got argument 2 (beta) twice")
    errs(function() F.relu(x, { inplace = 1 }) end, "relu", "inplace expected a boolean, got number")
    errs(function() F.linear(x, T.ones(2, 4), nil, 3) end, "linear", "expected at most 3 arguments, got 4")
  end)
end)

describe("activation modules", function()
  it("LeakyReLU, ELU, SELU and CELU give F's values, print their number and check it", function()
    local x = T.tensor({ -3, -0.5, 0, 2 })
    expect.close(nn.LeakyReLU(0.2)(x), T.tensor({ -0.6, -0.1, 0, 2 }), 1e-6, 1e-7)
    expect.close(nn.LeakyReLU()(x), F.leaky_relu(x, 0.01), 0, 0)
    expect.close(nn.ELU(2)(x), T.tensor({ 2 * math.exp(-3) - 2, 2 * math.exp(-0.5) - 2, 0, 2 }), 1e-6, 1e-7)
    expect.close(nn.CELU(0.5)(x), T.tensor({ 0.5 * math.exp(-6) - 0.5, 0.5 * math.exp(-1) - 0.5, 0, 2 }), 1e-6, 1e-7)
    expect.close(nn.SELU()(x), F.elu(x, 1.6732632423543772) * 1.0507009873554805, 1e-6, 1e-7)
    expect.eq(tostring(nn.ELU(0.5)), "ELU(alpha=0.5)")
    errs(function() nn.LeakyReLU("a") end, "LeakyReLU", "argument 1 (negative_slope) expected a number, got string")
    errs(function() F.celu(x, 0) end, "celu", "expected a non-zero number")
  end)
  it("Softplus, Mish, LogSigmoid, Hardsigmoid and Hardswish give F's values", function()
    local x = T.tensor({ -4, -1, 0, 1, 4 }, { dtype = "float32" })
    expect.close(nn.Softplus(2)(x), T.log1p(T.exp(x * 2)) / 2, 1e-6, 1e-7)
    expect.close(nn.Mish()(x), x * T.tanh(T.log1p(T.exp(x))), 1e-6, 1e-7)
    expect.close(nn.LogSigmoid()(x), T.log(T.sigmoid(x)), 1e-6, 1e-7)
    expect.close(nn.Hardsigmoid()(x), T.tensor({ 0, 1 / 3, 0.5, 2 / 3, 1 }), 1e-6, 1e-7)
    expect.close(nn.Hardswish()(x), T.tensor({ 0, -1 / 3, 0, 2 / 3, 4 }), 1e-6, 1e-7)
    expect.eq(tostring(nn.Softplus(2)), "Softplus(beta=2, threshold=20)")
    expect.close(nn.Softplus(2, 3)(x), T.tensor({ math.log(1 + math.exp(-8)) / 2, math.log(1 + math.exp(-2)) / 2,
      math.log(2) / 2, math.log(1 + math.exp(2)) / 2, 4 }), 1e-6, 1e-7)
    expect.eq(tostring(nn.Softplus(1, 5)), "Softplus(beta=1, threshold=5)")
  end)
  it("Hardtanh and ReLU6 clamp, pass no gradient at their bounds and check their numbers", function()
    local x = T.tensor({ -7, -1, -0.5, 0.5, 1, 6, 7 }, { requires_grad = true })
    local y = nn.Hardtanh()(x) + nn.ReLU6()(x) + nn.Hardtanh(-0.5, 0.5)(x)
    expect.close(y, T.tensor({ -1.5, -1.5, -1, 1.5, 2.5, 7.5, 7.5 }), 0, 0)
    y:sum():backward()
    expect.close(x.grad, T.tensor({ 0, 0, 1, 2, 1, 0, 0 }), 0, 0)
    expect.eq(tostring(nn.Hardtanh(-2, 2)), "Hardtanh(min_val=-2, max_val=2)")
    expect.eq(tostring(F.relu6(T.tensor({ -2, 3, 9 }))), tostring(T.tensor({ 0, 3, 6 })))
    errs(function() nn.Hardtanh(1, 1) end, "Hardtanh", "max_val expected greater than min_val, got 1 <= 1")
    errs(function() F.hardtanh(x, 2, 1) end, "hardtanh", "min_val cannot be greater than max_val")
    errs(function() F.hardtanh(x:gt(0), 0, 1) end, "hardtanh", "expected a numeric tensor (not bool)")
  end)
end)

describe("nn.init", function()
  local I = nn.init
  -- (bounds and moments of fixed-seed draws: the formulas are torch/nn/init.py's)
  local function within(t, lo, hi) return t:min():item() >= lo and t:max():item() <= hi end
  local function near(v, want, rel) expect.truthy(math.abs(v - want) <= rel * math.abs(want), ("%.6g against %.6g"):format(v, want)) end
  it("fills in place under no_grad with torch's bounds and scales", function()
    T.manual_seed(11)
    local w = T.empty(256, 512)
    expect.eq(I.uniform_(w, -2, 2), w)
    expect.truthy(within(w, -2, 2))
    I.xavier_uniform_(w, { gain = 2 })
    local a = 2 * math.sqrt(6 / 768)
    expect.truthy(within(w, -a, a) and w:abs():max():item() > 0.99 * a)
    I.kaiming_uniform_(w, { a = math.sqrt(5) })  -- (nn.Linear's: bound 1 / sqrt(fan_in))
    expect.truthy(within(w, -1 / math.sqrt(512), 1 / math.sqrt(512)))
    I.kaiming_normal_(w, 0, "fan_out", "relu")
    near(w:std():item(), math.sqrt(2 / 256), 0.02)
    I.xavier_normal_(w)
    near(w:std():item(), math.sqrt(2 / 768), 0.02)
    I.normal_(w, 1, 0.02)
    near(w:mean():item(), 1, 0.001)
    I.trunc_normal_(w, { std = 0.02 })
    near(w:std():item(), 0.02, 0.02)  -- (a, b = -2, 2 are values, not multiples of std: no cut here)
    I.trunc_normal_(w, 0, 1, -0.5, 0.5)
    expect.truthy(within(w, -0.5, 0.5))
    local l = nn.Linear(3, 4)
    I.zeros_(l.bias)
    expect.truthy(l.weight.requires_grad and l.weight.is_leaf and l.bias:eq(0):all():item())
  end)
  it("orthogonal_, eye_, dirac_, constant_ and calculate_gain", function()
    for _, shape in ipairs({ { 64, 100 }, { 100, 64 }, { 8, 2, 3, 3 } }) do
      local q = I.orthogonal_(T.empty(shape), 1.5):reshape(shape[1], -1)
      local g = q:size(1) <= q:size(2) and q:matmul(q:t()) or q:t():matmul(q)
      expect.close(g, T.eye(g:size(1)) * 2.25, 1e-5, 1e-5)
    end
    expect.eq(I.eye_(T.empty(2, 3)):totable(), { { 1, 0, 0 }, { 0, 1, 0 } })
    local d = I.dirac_(T.empty(4, 2, 3), 2)
    expect.eq(d:sum():item(), 4)
    expect.eq(d[1][1][2]:item() + d[2][2][2]:item() + d[3][1][2]:item() + d[4][2][2]:item(), 4)
    expect.eq(I.constant_(T.empty(2), 3):totable(), { 3, 3 })
    expect.close(T.tensor(I.calculate_gain("leaky_relu", 0.2)), math.sqrt(2 / 1.04), 1e-12)
    expect.eq(I.calculate_gain("tanh"), 5 / 3)
    errs(function() I.calculate_gain("swish") end, "calculate_gain", "unsupported nonlinearity swish")
    errs(function() I.kaiming_uniform_(T.empty(3, 3), { mode = "in" }) end, "kaiming_uniform_", "mode in not supported")
    errs(function() I.xavier_uniform_(T.empty(3)) end, "init", "fewer than 2 dimensions")
    errs(function() I.kaiming_normal_(T.empty(3, 3), { gain = 1 }) end, "kaiming_normal_", "unknown option 'gain'")
  end)
  it("the in-place draws: uniform_, normal_, exponential_, bernoulli_", function()
    T.manual_seed(5)
    local x = T.empty(20000)
    expect.truthy(within(x:uniform_(3, 4), 3, 4))
    near(x:normal_(2, 0.5):std():item(), 0.5, 0.03)
    near(x:exponential_(4):mean():item(), 0.25, 0.03)
    expect.truthy(within(x, 0, math.huge))
    local b = T.zeros(20000, { dtype = "int64" }):bernoulli_(0.3)
    expect.eq(b.dtype, "int64")
    near(b:double():mean():item(), 0.3, 0.05)
    expect.eq(T.zeros(3, { dtype = "bfloat16" }):normal_(5, 0).dtype, "bfloat16")
    errs(function() T.ones(3, { dtype = "int64" }):normal_() end, "normal_", "expected a floating tensor")
    errs(function() T.ones(3, { requires_grad = true }):uniform_() end, "uniform_", "leaf Variable that requires grad")
    errs(function() x:uniform_(2, 1) end, "uniform_", "expects from <= to")
    errs(function() x:bernoulli_(1.5) end, "bernoulli_", "expected p in [0, 1]")
    local f = T.compile(function(v) return v:clone():uniform_(-1, 1) end)
    for _ = 1, 3 do expect.truthy(within(f(T.zeros(64)), -1, 1)) end
  end)
end)

describe("compiled modules", function()
  it("give the eager results, also after load_state_dict changes the weights", function()
    local m = Net(8):eval()
    local f = T.compile(m)
    local xs = T.randn(4, 8)
    -- (the parameters require grad: with grad mode off the module is captured)
    for _ = 1, 3 do expect.close(T.no_grad(f, xs), m(xs), 1e-5, 1e-5) end
    expect.eq(T.no_grad(T.explain, f, xs).graph_count, 1)
    m:load_state_dict(Net(8):state_dict())
    for _ = 1, 3 do expect.close(T.no_grad(f, xs), m(xs), 1e-5, 1e-5) end
  end)
  it("compile attention and cross_entropy like eager", function()
    local g = T.compile(function(a, bb, c, z, t)
      return F.scaled_dot_product_attention(a, bb, c, { causal = true }), F.cross_entropy(z, t)
    end)
    for _ = 1, 3 do
      local o1, l1 = g(q, k, v, logits, target)
      expect.close(o1, F.scaled_dot_product_attention(q, k, v, { causal = true }), 1e-5, 1e-6)
      expect.close(l1, F.cross_entropy(logits, target), 1e-5, 1e-6)
    end
  end)
end)
