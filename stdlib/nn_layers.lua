-- crescent.nn_layers: the convolution, normalisation, pooling and shape layers of T.nn and its
-- small modules (activations, Identity, Flatten, Unflatten), over T.F. Parameters are initialised
-- as PyTorch's (kaiming-uniform bounds 1/sqrt(fan_in)); buffers and state_dict names are
-- PyTorch's, so weights saved from PyTorch load as they are.
local core = require "crescent.core"
local F = require "crescent.functional"
local fail = core.fail

local L = {}
local T
function L.bind(t) T = t end

-- install(nn, h): adds the layers to nn; h = {positive_int =, options =, uniform =}
function L.install(nn, h)
  local positive_int, options, uniform = h.positive_int, h.options, h.uniform

  -- An integer or a list of n as a list of n.
  local function ntuple(v, n)
    if type(v) ~= "table" then
      local t = {}
      for i = 1, n do t[i] = v end
      return t
    end
    return v
  end
  local function list_str(t) return "(" .. table.concat(t, ", ") .. ")" end

  -- convolutions ----------------------------------------------------------------------------------

  local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }

  -- F.pad's list for a padding_mode other than zeros: the reversed (before, after) pairs.
  local function mode_pad(padding, ks, dilation, n)
    local pad = {}
    for i = n, 1, -1 do
      local lo, hi
      if padding == "same" then
        local total = dilation[i] * (ks[i] - 1)
        lo = math.floor(total / 2)
        hi = total - lo
      elseif padding == "valid" then
        lo, hi = 0, 0
      else
        lo, hi = padding[i], padding[i]
      end
      pad[#pad + 1], pad[#pad + 2] = lo, hi
    end
    return pad
  end

  -- Conv1d / Conv2d(in, out, kernel_size[, {stride =, padding =, dilation =, groups =, bias = true,
  -- padding_mode = "zeros", dtype =}]): padding an integer, a list, "valid" or "same".
  local function conv_class(name, n, fn)
    local cls = nn.Module:extend(name)
    function cls:init(cin, cout, k, opts)
      positive_int(name, 1, "in_channels", cin)
      positive_int(name, 2, "out_channels", cout)
      opts = options(name, 4, opts, { stride = true, padding = true, dilation = true, groups = true, bias = true, padding_mode = true, dtype = true })
      local groups = opts.groups or 1
      positive_int(name, 4, "groups", groups)
      if cin % groups ~= 0 then fail(name .. ": in_channels must be divisible by groups") end
      if cout % groups ~= 0 then fail(name .. ": out_channels must be divisible by groups") end
      local mode = opts.padding_mode or "zeros"
      if not PADDING_MODES[mode] then fail(name .. ": padding_mode expected \"zeros\", \"reflect\", \"replicate\" or \"circular\", got " .. tostring(mode)) end
      self.in_channels, self.out_channels, self.groups, self.padding_mode = cin, cout, groups, mode
      self.kernel_size, self.stride = ntuple(k, n), ntuple(opts.stride or 1, n)
      self.padding = type(opts.padding) == "string" and opts.padding or ntuple(opts.padding or 0, n)
      self.dilation = ntuple(opts.dilation or 1, n)
      local shape, fan_in = { cout, cin / groups }, cin / groups
      for i = 1, n do
        positive_int(name, 3, "kernel_size", self.kernel_size[i])
        shape[#shape + 1] = self.kernel_size[i]
        fan_in = fan_in * self.kernel_size[i]
      end
      local bound = 1 / math.sqrt(fan_in)
      self.weight = uniform(shape, bound, opts.dtype)
      if opts.bias ~= false then self.bias = uniform({ cout }, bound, opts.dtype) end
    end
    function cls:forward(x)
      local padding = self.padding
      if self.padding_mode ~= "zeros" then
        x = F.pad(x, mode_pad(padding, self.kernel_size, self.dilation, n), self.padding_mode)
        padding = 0
      end
      return fn(x, self.weight, self.bias, { stride = self.stride, padding = padding, dilation = self.dilation, groups = self.groups })
    end
    function cls:extra_repr()
      local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels, list_str(self.kernel_size), list_str(self.stride))
      s = s .. ", padding=" .. (type(self.padding) == "string" and self.padding or list_str(self.padding))
      if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
      if self.bias == nil then s = s .. ", bias=False" end
      if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
      return s
    end
    return cls
  end
  nn.Conv1d = conv_class("Conv1d", 1, F.conv1d)
  nn.Conv2d = conv_class("Conv2d", 2, F.conv2d)

  -- ConvTranspose2d(in, out, kernel_size[, {stride =, padding =, output_padding =, groups =,
  -- bias = true, dilation =, dtype =}]): weight {in, out / groups, kh, kw}.
  local ConvT = nn.Module:extend("ConvTranspose2d")
  function ConvT:init(cin, cout, k, opts)
    local name = "ConvTranspose2d"
    positive_int(name, 1, "in_channels", cin)
    positive_int(name, 2, "out_channels", cout)
    opts = options(name, 4, opts, { stride = true, padding = true, output_padding = true, groups = true, bias = true, dilation = true, dtype = true })
    local groups = opts.groups or 1
    positive_int(name, 4, "groups", groups)
    if cin % groups ~= 0 or cout % groups ~= 0 then fail(name .. ": in_channels and out_channels must be divisible by groups") end
    self.in_channels, self.out_channels, self.groups = cin, cout, groups
    self.kernel_size, self.stride = ntuple(k, 2), ntuple(opts.stride or 1, 2)
    self.padding, self.output_padding = ntuple(opts.padding or 0, 2), ntuple(opts.output_padding or 0, 2)
    self.dilation = ntuple(opts.dilation or 1, 2)
    local kh, kw = positive_int(name, 3, "kernel_size", self.kernel_size[1]), positive_int(name, 3, "kernel_size", self.kernel_size[2])
    local bound = 1 / math.sqrt(cout / groups * kh * kw)
    self.weight = uniform({ cin, cout / groups, kh, kw }, bound, opts.dtype)
    if opts.bias ~= false then self.bias = uniform({ cout }, bound, opts.dtype) end
  end
  function ConvT:forward(x)
    return F.conv_transpose2d(x, self.weight, self.bias, { stride = self.stride, padding = self.padding,
      output_padding = self.output_padding, groups = self.groups, dilation = self.dilation })
  end
  function ConvT:extra_repr()
    return string.format("%d, %d, kernel_size=%s, stride=%s, padding=%s", self.in_channels, self.out_channels,
      list_str(self.kernel_size), list_str(self.stride), list_str(self.padding))
  end
  nn.ConvTranspose2d = ConvT

  -- normalisation ---------------------------------------------------------------------------------

  -- BatchNorm1d / BatchNorm2d(num_features[, {eps = 1e-5, momentum = 0.1, affine = true,
  -- track_running_stats = true, dtype =}]): momentum false gives the cumulative average (PyTorch's
  -- momentum=None). Buffers running_mean, running_var, num_batches_tracked.
  local function batch_norm_class(name, dims)
    local cls = nn.Module:extend(name)
    function cls:init(c, opts)
      positive_int(name, 1, "num_features", c)
      opts = options(name, 2, opts, { eps = true, momentum = true, affine = true, track_running_stats = true, dtype = true })
      self.num_features, self.eps = c, opts.eps or 1e-5
      if opts.momentum == false then self._cumulative = true else self.momentum = opts.momentum or 0.1 end
      self._track = opts.track_running_stats ~= false
      if opts.affine ~= false then
        self.weight = T.ones({ c }, { dtype = opts.dtype })
        self.bias = T.zeros({ c }, { dtype = opts.dtype })
      end
      if self._track then
        self:register_buffer("running_mean", T.zeros({ c }, { dtype = opts.dtype }))
        self:register_buffer("running_var", T.ones({ c }, { dtype = opts.dtype }))
        self:register_buffer("num_batches_tracked", T.tensor(0, { dtype = "int64" }))
      end
    end
    function cls:forward(x)
      if not dims[x:dim()] then
        fail(string.format("%s: expected %s input (got %dD input)", name, dims.what, x:dim()))
      end
      local factor = self.momentum or 0
      if self.training and self._track then
        T.no_grad(function() self.num_batches_tracked:add_(1) end)
        if self._cumulative then factor = 1 / self.num_batches_tracked:item() end
      end
      local use_batch = self.training or not self._track
      local stats = not self.training or self._track
      return F.batch_norm(x, stats and self.running_mean or nil, stats and self.running_var or nil, self.weight, self.bias,
        use_batch, factor, self.eps)
    end
    function cls:extra_repr()
      return string.format("%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s", self.num_features, tostring(self.eps),
        tostring(self.momentum), tostring(self.weight ~= nil), tostring(self._track))
    end
    return cls
  end
  nn.BatchNorm1d = batch_norm_class("BatchNorm1d", { [2] = true, [3] = true, what = "2D or 3D" })
  nn.BatchNorm2d = batch_norm_class("BatchNorm2d", { [4] = true, what = "4D" })

  -- GroupNorm(num_groups, num_channels[, {eps = 1e-5, affine = true, dtype =}])
  local GroupNorm = nn.Module:extend("GroupNorm")
  function GroupNorm:init(g, c, opts)
    positive_int("GroupNorm", 1, "num_groups", g)
    positive_int("GroupNorm", 2, "num_channels", c)
    if c % g ~= 0 then fail("GroupNorm: num_channels must be divisible by num_groups") end
    opts = options("GroupNorm", 3, opts, { eps = true, affine = true, dtype = true })
    self.num_groups, self.num_channels, self.eps = g, c, opts.eps or 1e-5
    if opts.affine ~= false then
      self.weight = T.ones({ c }, { dtype = opts.dtype })
      self.bias = T.zeros({ c }, { dtype = opts.dtype })
    end
  end
  function GroupNorm:forward(x) return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps) end
  function GroupNorm:extra_repr() return string.format("%d, %d, eps=%s, affine=%s", self.num_groups, self.num_channels, tostring(self.eps), tostring(self.weight ~= nil)) end
  nn.GroupNorm = GroupNorm

  -- pools -------------------------------------------------------------------------------------------

  -- A module calling F[fname](x, first, opts) with the options it was made with.
  local function functional_class(name, fname, allowed, label)
    local cls = nn.Module:extend(name)
    function cls:init(first, opts)
      if first == nil then fail(name .. ": argument 1 expected a size, got nil") end
      self._first, self._opts = first, allowed and options(name, 2, opts, allowed) or nil
    end
    function cls:forward(x)
      if self._opts then return F[fname](x, self._first, self._opts) end
      return F[fname](x, self._first)
    end
    function cls:extra_repr() return (label or "kernel_size") .. "=" .. (type(self._first) == "table" and list_str(self._first) or tostring(self._first)) end
    return cls
  end
  nn.MaxPool2d = functional_class("MaxPool2d", "max_pool2d", { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true })
  nn.AvgPool2d = functional_class("AvgPool2d", "avg_pool2d", { stride = true, padding = true, ceil_mode = true, count_include_pad = true, divisor_override = true })
  nn.AdaptiveAvgPool2d = functional_class("AdaptiveAvgPool2d", "adaptive_avg_pool2d", nil, "output_size")
  nn.MaxPool1d = functional_class("MaxPool1d", "max_pool1d", { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true })
  nn.AvgPool1d = functional_class("AvgPool1d", "avg_pool1d", { stride = true, padding = true, ceil_mode = true, count_include_pad = true })
  nn.AdaptiveAvgPool1d = functional_class("AdaptiveAvgPool1d", "adaptive_avg_pool1d", nil, "output_size")
  nn.AdaptiveMaxPool2d = functional_class("AdaptiveMaxPool2d", "adaptive_max_pool2d", { return_indices = true }, "output_size")
  nn.AdaptiveMaxPool1d = functional_class("AdaptiveMaxPool1d", "adaptive_max_pool1d", { return_indices = true }, "output_size")

  -- Upsample({size =, scale_factor =, mode = "nearest", align_corners =}): F.interpolate
  local Upsample = nn.Module:extend("Upsample")
  function Upsample:init(opts) self._opts = options("Upsample", 1, opts, { size = true, scale_factor = true, mode = true, align_corners = true }) end
  function Upsample:forward(x) return F.interpolate(x, self._opts) end
  nn.Upsample = Upsample

  -- attention -------------------------------------------------------------------------------------

  -- MultiheadAttention(embed_dim, num_heads[, {dropout = 0, bias = true, kdim =, vdim =,
  -- batch_first = false, dtype =}]): PyTorch's parameters (in_proj_weight {3E, E} or
  -- q/k/v_proj_weight when kdim / vdim differ, in_proj_bias, out_proj).
  -- forward(query, key, value[, {key_padding_mask =, attn_mask =, need_weights = true,
  -- average_attn_weights = true, is_causal = false}]) -> output, weights (nil unless need_weights).
  -- Bool masks are true where attention is NOT allowed, as PyTorch's; float masks are added.
  local MHA = nn.Module:extend("MultiheadAttention")
  function MHA:init(E, H, opts)
    local name = "MultiheadAttention"
    positive_int(name, 1, "embed_dim", E)
    positive_int(name, 2, "num_heads", H)
    if E % H ~= 0 then fail(name .. ": embed_dim must be divisible by num_heads") end
    opts = options(name, 3, opts, { dropout = true, bias = true, kdim = true, vdim = true, batch_first = true, dtype = true })
    self.embed_dim, self.num_heads, self.dropout = E, H, opts.dropout or 0
    self.batch_first = opts.batch_first == true
    local kdim, vdim = opts.kdim or E, opts.vdim or E
    self._same = kdim == E and vdim == E
    local dt = opts.dtype
    if self._same then
      self.in_proj_weight = uniform({ 3 * E, E }, math.sqrt(6 / (4 * E)), dt)
    else
      self.q_proj_weight = uniform({ E, E }, math.sqrt(6 / (2 * E)), dt)
      self.k_proj_weight = uniform({ E, kdim }, math.sqrt(6 / (E + kdim)), dt)
      self.v_proj_weight = uniform({ E, vdim }, math.sqrt(6 / (E + vdim)), dt)
    end
    if opts.bias ~= false then self.in_proj_bias = T.zeros({ 3 * E }, { dtype = dt }) end
    self.out_proj = nn.Linear(E, E, { bias = opts.bias ~= false, dtype = dt })
    if self.out_proj.bias then T.no_grad(function() self.out_proj.bias:zero_() end) end
  end

  -- A mask as an additive float tensor of dtype (bool: true -> -inf).
  local function additive(m, dtype)
    if m.dtype == "bool" then return T.zeros(m.shape, { dtype = dtype, device = m.device }):masked_fill(m, -math.huge) end
    return m
  end

  -- PyTorch's mask shapes, each named by its dims and their values: a wrong one raises here
  -- rather than in a view or a broadcast inside the attention.
  local function check_mask(what, m, shapes)
    if not T.is_tensor(m) then fail(string.format("MultiheadAttention: %s expected a tensor, got %s", what, type(m))) end
    -- (an integer 0 / 1 mask would add its values to the scores: refused, as torch)
    if m.dtype ~= "bool" and not (m.dtype:find("float") or m.dtype == "bfloat16") then
      fail(string.format("MultiheadAttention: %s expected a bool or floating tensor, got %s", what, m.dtype))
    end
    local got, names = m:_shape_str(), {}
    for i, s in ipairs(shapes) do
      local want = "{" .. table.concat(s, ",") .. "}"
      if got == want then return end
      names[i] = s.dims .. " = " .. want
    end
    fail(string.format("MultiheadAttention: %s expected shape %s, got %s", what, table.concat(names, " or "), got))
  end

  function MHA:forward(q, k, v, opts)
    local name = "MultiheadAttention"
    opts = options(name, 4, opts, { key_padding_mask = true, attn_mask = true, need_weights = true, average_attn_weights = true, is_causal = true })
    local unbatched = q:dim() == 2
    if unbatched then q, k, v = q:unsqueeze(2), k:unsqueeze(2), v:unsqueeze(2)
    elseif self.batch_first then q, k, v = q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2) end
    local L, N, E = q:size(1), q:size(2), q:size(3)
    if E ~= self.embed_dim then fail(string.format("%s: query expected embed_dim %d in its last dim, got %d", name, self.embed_dim, E)) end
    local S, H = k:size(1), self.num_heads
    if v:size(1) ~= S or (k:dim() == 3 and v:size(2) ~= k:size(2)) then
      fail(string.format("%s: key shape %s does not match value shape %s", name, k:_shape_str(), v:_shape_str()))
    end
    local hd = E / H
    local b = self.in_proj_bias
    local function proj(x, i, w)
      w = w or self.in_proj_weight:narrow(1, (i - 1) * E + 1, E)
      return T.linear(x, w, b and b:narrow(1, (i - 1) * E + 1, E))
    end
    -- {len, N, E} -> {N, H, len, hd}
    local function heads(x, len) return x:reshape(len, N, H, hd):permute(2, 3, 1, 4) end
    local qh = heads(proj(q, 1, self.q_proj_weight), L)
    local kh = heads(proj(k, 2, self.k_proj_weight), S)
    local vh = heads(proj(v, 3, self.v_proj_weight), S)
    local scores = T.matmul(qh, kh:transpose(-2, -1)) * (1 / math.sqrt(hd))
    local am, kpm = opts.attn_mask, opts.key_padding_mask
    if kpm ~= nil then
      check_mask("key_padding_mask", kpm, { unbatched and { S, dims = "(S)" } or { N, S, dims = "(N, S)" } })
    end
    if am ~= nil then
      check_mask("attn_mask", am, { { L, S, dims = "(L, S)" },
        { N * H, L, S, dims = unbatched and "(num_heads, L, S)" or "(N*num_heads, L, S)" } })
    end
    if opts.is_causal and am == nil then am = T.ones(L, S, { dtype = "bool", device = q.device }):triu(1) end
    if am ~= nil then
      am = additive(am, scores.dtype)
      scores = scores + (am:dim() == 3 and am:view(N, H, L, S) or am)
    end
    if kpm ~= nil then
      kpm = additive(kpm, scores.dtype)
      scores = scores + (unbatched and kpm:view(1, 1, 1, S) or kpm:view(N, 1, 1, S))
    end
    local w = F.dropout(scores:softmax(-1), self.dropout, self.training)
    local out = T.matmul(w, vh):permute(3, 1, 2, 4):reshape(L, N, E)
    out = self.out_proj(out)
    if unbatched then out = out:squeeze(2) elseif self.batch_first then out = out:transpose(1, 2) end
    if opts.need_weights == false then return out, nil end
    if opts.average_attn_weights ~= false then w = w:mean(2) end
    return out, unbatched and w:squeeze(1) or w
  end
  nn.MultiheadAttention = MHA

  -- small modules ---------------------------------------------------------------------------------

  nn.Tanh = nn.Module:extend("Tanh")
  function nn.Tanh:forward(x) return T.tanh(x) end
  nn.Sigmoid = nn.Module:extend("Sigmoid")
  function nn.Sigmoid:forward(x) return T.sigmoid(x) end
  nn.Identity = nn.Module:extend("Identity")
  function nn.Identity:forward(x) return x end

  -- Softmax(dim) / LogSoftmax(dim)
  for _, c in ipairs({ { "Softmax", "softmax" }, { "LogSoftmax", "log_softmax" } }) do
    local cls = nn.Module:extend(c[1])
    function cls:init(dim)
      if type(dim) ~= "number" then fail(c[1] .. ": argument 1 (dim) expected a dim, got " .. tostring(dim)) end
      self.dim = dim
    end
    function cls:forward(x) return T[c[2]](x, self.dim) end
    function cls:extra_repr() return "dim=" .. self.dim end
    nn[c[1]] = cls
  end

  -- Flatten([start_dim = 2[, end_dim = -1]]): the batch dim kept
  local Flatten = nn.Module:extend("Flatten")
  function Flatten:init(s, e) self.start_dim, self.end_dim = s or 2, e or -1 end
  function Flatten:forward(x) return x:flatten(self.start_dim, self.end_dim) end
  function Flatten:extra_repr() return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim) end
  nn.Flatten = Flatten

  -- Unflatten(dim, sizes): dim becomes sizes (their product must be its size)
  local Unflatten = nn.Module:extend("Unflatten")
  function Unflatten:init(dim, sizes)
    if type(dim) ~= "number" then fail("Unflatten: argument 1 (dim) expected a dim, got " .. tostring(dim)) end
    if type(sizes) ~= "table" or #sizes == 0 then fail("Unflatten: argument 2 (unflattened_size) expected a list of sizes, got " .. tostring(sizes)) end
    self.dim, self.unflattened_size = dim, sizes
  end
  function Unflatten:forward(x)
    local s, d = x.shape, self.dim < 0 and x:dim() + self.dim + 1 or self.dim
    local out = {}
    for i = 1, d - 1 do out[#out + 1] = s[i] end
    for _, v in ipairs(self.unflattened_size) do out[#out + 1] = v end
    for i = d + 1, #s do out[#out + 1] = s[i] end
    return x:view(out)
  end
  function Unflatten:extra_repr() return string.format("dim=%d, unflattened_size=%s", self.dim, list_str(self.unflattened_size)) end
  nn.Unflatten = Unflatten
end

return L
