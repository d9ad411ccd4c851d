"""crescent's calls in torch, for crescent's PyTorch bridge: the helpers the differential test's
expressions use (tests/diff/recipes.lua), and OPS, crescent's ops by name as torch calls taking
crescent's arguments (1-based dims and indices, sizes as varargs or a table, an options table
last), which the compile fuzzer's replayer (replay.py) and the misuse cases (tests/diff/misuse.lua)
call.
"""
import math

import torch
import torch.nn.functional as F


# ---- helpers of the differential test's expressions ---------------------------------------------

def W(v, like):
    """A Lua number in first position, where torch wants a tensor: a 0-d tensor that promotes like
    a Python scalar (the dtype of `like` when both are floats or both integers, else float32)."""
    integers = isinstance(v, int) and not isinstance(v, bool) and not like.is_floating_point() and like.dtype != torch.bool
    if like.is_floating_point() or integers:
        return torch.tensor(v, dtype=like.dtype, device=like.device)
    return torch.tensor(v, device=like.device)


def alldims(a):
    return tuple(range(a.dim()))


def lslice(a, d, start, stop, step):
    """crescent's slice(d, start, stop, step): 1-based, inclusive stop, negatives from the end. Its
    bounds are integers, as aten::slice's (Python's slicing would take True as 1)."""
    if any(isinstance(v, bool) for v in (d, start, stop, step)):
        raise TypeError("slice(): the bounds must be integers, not bool")
    n = a.shape[d]
    s0 = 0 if start is None else (start - 1 if start > 0 else n + start)
    e0 = n if stop is None else (stop if stop >= 0 else n + stop + 1)  # stop 0: before the first
    return a[(slice(None),) * (d % a.dim()) + (slice(s0, e0, step or 1),)]


def idx1(r):
    """(values, indices) with the indices made 1-based, as crescent returns them."""
    return r[0], r[1] + 1


def multi(fn, a, dims, keepdim=False, **kw):
    """fn over several dims for torch 1.13 functions that take one (prod, all, any)."""
    if dims is None:
        return fn(a, **kw) if not keepdim else multi(fn, a, alldims(a) or (0,), True, **kw)
    if isinstance(dims, int):
        return fn(a, dims, keepdim=keepdim, **kw)
    nd = max(a.dim(), 1)
    norm = sorted({d % nd for d in dims}, reverse=True)
    if len(norm) != len(dims):
        raise RuntimeError("dim appears multiple times in the list of dims")
    r = a
    for d in norm:
        r = fn(r, d, keepdim=True, **kw)
        kw.pop("dtype", None)  # the first step converts
    if not keepdim:
        for d in norm:
            if r.dim() > 0:
                r = r.squeeze(d)
    return r


def squeeze_dims(a, dims):
    """squeeze with a tuple of dims (torch >= 2.0; torch 1.13 takes one)."""
    nd = max(a.dim(), 1)
    for d in dims:
        if not -nd <= d < nd:
            raise IndexError("Dimension out of range")
    for d in sorted({d % nd for d in dims}, reverse=True):
        a = a.squeeze(d)
    return a


def gathered(values, indices, a, d, keepdim=True):
    """values next to a gathered at the (1-based) indices: checks indices up to ties."""
    i = indices - 1
    if not keepdim:
        i = i.unsqueeze(d)
    g = a.gather(d, i)
    return values, (g if keepdim else g.squeeze(d))


def grads(fn, leaves):
    """The differential test's gradient mode (tests/diff/grad.lua): gradients of sum_k sum(result_k *
    W_k), W_k[i] = cos(0.7 i + k), over the floating results that require grad, w.r.t. leaves
    (zeros for an unused one)."""
    r = fn()
    total = None
    for k, y in enumerate(list(r) if isinstance(r, (tuple, list)) else [r]):
        if isinstance(y, torch.Tensor) and y.is_floating_point() and y.requires_grad:
            w = torch.cos(torch.arange(y.numel(), dtype=torch.float64, device=y.device) * 0.7 + k)
            t = (y * w.to(y.dtype).reshape(y.shape)).sum()
            total = t if total is None else total + t
    if total is None:
        raise RuntimeError("no differentiable result")
    gs = torch.autograd.grad(total, leaves, allow_unused=True)
    return [g if g is not None else torch.zeros_like(x) for g, x in zip(gs, leaves)]


# ---- crescent's calling conventions ----------------------------------------------------------------

def pd(d):
    """A 1-based dim (negative from the end) as torch's; 0 (invalid in crescent) stays invalid, and
    so does a boolean (torch refuses True as a dim)."""
    if d is None or isinstance(d, bool):
        return d
    if isinstance(d, list):
        return tuple(pd(x) for x in d)
    return d - 1 if d > 0 else (d if d < 0 else 1 << 40)


def pi(i):
    """A 1-based index value (negative from the end) as torch's (a boolean stays one)."""
    if isinstance(i, bool):
        return i
    return i - 1 if i > 0 else (i if i < 0 else 1 << 40)


def split_opts(args):
    """Positional arguments and the trailing options table ({} when none)."""
    if args and isinstance(args[-1], dict):
        return args[:-1], args[-1]
    return args, {}


def sizes(args):
    """Sizes given as varargs or as one table (and maybe options after them)."""
    args, opts = split_opts(args)
    return (list(args[0]) if args and isinstance(args[0], list) else list(args)), opts


def bincount(x, *rest):
    """T.bincount(x[, weights][, minlength]): the weights a tensor, the minlength a number."""
    w = next((r for r in rest if isinstance(r, torch.Tensor)), None)
    m = next((r for r in rest if isinstance(r, (int, float))), 0)
    if isinstance(m, bool):
        return torch.bincount(x, weights=w, minlength=m)  # (torch refuses a boolean, as crescent)
    return torch.bincount(x, weights=w, minlength=int(m) if m == int(m) else m)  # (a fraction: torch raises)


def dtype_of(o, default=None):
    return getattr(torch, o["dtype"]) if o.get("dtype") else default


def device_of(o):
    d = o.get("device")
    return torch.device(d) if d else None


def num_first(fn, op):
    """A binary op whose first operand may be a Lua number."""
    def call(a, b, o=None):
        kw = {"alpha": o["alpha"]} if o and "alpha" in o else {}
        if not isinstance(a, torch.Tensor):
            if op and not kw:
                return op(a, b)
            a = W(a, b)
        elif not isinstance(b, torch.Tensor) and fn in (torch.maximum, torch.minimum, torch.atan2, torch.hypot, torch.logical_and,
                                                        torch.logical_or, torch.logical_xor):
            b = W(b, a)
        return fn(a, b, **kw)
    return call


def reduce_call(fn, none_dims=None, dtype=True, one_dim=False):
    """sum / mean / amax / ...: (x, dim?, keepdim?, opts?). one_dim: torch takes one dim (prod, all,
    any), so a list of integer dims is reduced one dim at a time (multi)."""
    def call(x, *rest):
        rest, o = split_opts(list(rest))
        dim = rest[0] if rest else None
        kd = bool(rest[1]) if len(rest) > 1 and rest[1] is not None else False
        kw = {"dtype": dtype_of(o)} if dtype and o.get("dtype") else {}
        if dim is None:
            if none_dims is None:
                return fn(x, **kw)
            return fn(x, none_dims(x), keepdim=kd, **kw)
        if one_dim and isinstance(dim, list) and dim and all(type(d) is int for d in dim):
            nd = max(x.dim(), 1)
            if not all(-nd <= d < nd for d in pd(dim)):
                raise IndexError("Dimension out of range")
            return multi(fn, x, pd(dim), kd, **kw)
        return fn(x, pd(dim), keepdim=kd, **kw)
    return call


def var_call(fn):
    def call(x, *rest):
        rest, o = split_opts(list(rest))
        dim = rest[0] if rest else None
        kd = bool(rest[1]) if len(rest) > 1 and rest[1] is not None else False
        kw = {}
        if "correction" in o:
            kw["correction"] = o["correction"]
        elif "unbiased" in o:
            kw["unbiased"] = o["unbiased"]
        if dim is None:
            return fn(x, dim=None, keepdim=kd, **kw) if kw else fn(x)
        return fn(x, pd(dim), keepdim=kd, **kw)
    return call


def norm(x, *rest):
    rest, o = split_opts(list(rest))
    dim = rest[0] if rest else None
    kd = bool(rest[1]) if len(rest) > 1 and rest[1] is not None else False
    return torch.linalg.vector_norm(x, ord=o.get("p", 2), dim=pd(dim), keepdim=kd)


def arg_call(fn):
    def call(x, dim=None, kd=None):
        if dim is None:
            return fn(x) + 1
        return fn(x, pd(dim), keepdim=bool(kd)) + 1
    return call


def maxmin(fn):
    def call(x, dim=None, kd=None):
        if dim is None:
            return fn(x)
        r = fn(x, pd(dim), keepdim=bool(kd))
        return r[0], r[1] + 1
    return call


def aminmax(x, o=None):
    """aminmax(x, {dim =, keepdim =}): torch's keyword arguments as crescent's options."""
    o = o or {}
    kw = {"keepdim": bool(o.get("keepdim", False))}
    if o.get("dim") is not None:
        kw["dim"] = pd(o["dim"])
    return tuple(torch.aminmax(x, **kw))


def creation(fn):
    def call(*args):
        s, o = sizes(list(args))
        return fn(s, dtype=dtype_of(o), device=device_of(o))
    return call


def like(fn):
    def call(x, o=None):
        o = o or {}
        return fn(x, dtype=dtype_of(o), device=device_of(o))
    return call


def arange(*args):
    args, o = split_opts(list(args))
    return torch.arange(*args, dtype=dtype_of(o), device=device_of(o))


DTYPES = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "bool"}


def to(x, target=None, o=None):
    """x:to(dtype | device | {dtype =, device =})."""
    if isinstance(target, dict):
        o, target = target, None
    if target is not None:
        return x.to(getattr(torch, target) if target in DTYPES else target)
    o = o or {}
    return x.to(device=device_of(o) or x.device, dtype=dtype_of(o, x.dtype))


def setindex(x, k, v):
    s = x.select(0, pi(k))
    if isinstance(v, torch.Tensor):
        s.copy_(v)
    else:
        s.fill_(v)


def copy_(x, v):
    return x.copy_(v) if isinstance(v, torch.Tensor) else x.fill_(v)


def clamp(fn):
    def call(x, lo=None, hi=None):
        return fn(x, min=lo, max=hi)
    return call


def split(x, size, d=None):
    return list(torch.split(x, size, 0 if d is None else pd(d)))


def chunk(x, n, d=None):
    return list(torch.chunk(x, n, 0 if d is None else pd(d)))


def squeeze(x, d=None):
    if d is None:
        return x.squeeze()
    if isinstance(d, list):
        if any(isinstance(e, bool) for e in d):
            raise TypeError("squeeze(): argument 'dim' must be int, not bool")  # as x.squeeze(True)
        for e in sorted({pd(e) % max(x.dim(), 1) for e in d}, reverse=True):
            x = x.squeeze(e)
        return x
    return x.squeeze(pd(d))


def flatten(x, a=None, b=None):
    return torch.flatten(x, 0 if a is None else pd(a), -1 if b is None else pd(b))


def softmax(fn):
    def call(x, d, o=None):
        return fn(x, pd(d), dtype=dtype_of(o or {}))
    return call


def as_list(v):
    return v if isinstance(v, list) else [v]


def eye(n, *rest):
    rest, o = split_opts(list(rest))
    return torch.eye(n, *rest, dtype=dtype_of(o), device=device_of(o))


def linspace(a, b, n, o=None):
    o = o or {}
    return torch.linspace(a, b, n, dtype=dtype_of(o), device=device_of(o))


def order(r):
    """(values, indices) of sort / topk with 1-based indices."""
    return r[0], r[1] + 1


def attention(q, k, v, scale=None, causal=None, mask=None):
    """crescent's fused attention as its composite."""
    s = torch.matmul(q, k.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    return torch.matmul(torch.softmax(s, -1), v)


def add_(x, b, o=None):
    return x.add_(b, alpha=o["alpha"]) if o and "alpha" in o else x.add_(b)


def sub_(x, b, o=None):
    return x.sub_(b, alpha=o["alpha"]) if o and "alpha" in o else x.sub_(b)


def index(x, i):
    """x[i] (a number: select along dim 1) or the registry's index (a list of index tensors)."""
    if isinstance(i, (int, float)):
        return x.select(0, pi(i))
    return x[tuple(t - 1 for t in i)]


def gelu_backward(g, x, approximate):
    """aten's gelu_backward on operands promoted and broadcast first: torch 1.13's oneDNN path of
    it fails on operands of two shapes or two dtypes."""
    dt = torch.result_type(g, x)
    g, x = torch.broadcast_tensors(g.to(dt), x.to(dt))
    return torch.ops.aten.gelu_backward(g, x, approximate=approximate)


OPS = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log2": torch.log2, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "relu": torch.relu, "silu": F.silu, "erf": torch.erf, "erfinv": torch.erfinv, "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "sign": torch.sign,
    "reciprocal": torch.reciprocal, "square": torch.square, "isnan": torch.isnan, "isinf": torch.isinf,
    "logical_not": torch.logical_not,
    "gelu": lambda x, o=None: F.gelu(x, approximate=(o or {}).get("approximate", "none")),
    "_gelu_backward": lambda g, x: gelu_backward(g, x, "none"),
    "_gelu_tanh_backward": lambda g, x: gelu_backward(g, x, "tanh"),
    "leaky_relu": F.leaky_relu, "elu": F.elu, "softplus": F.softplus, "mish": F.mish, "logsigmoid": F.logsigmoid,
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "hardtanh": F.hardtanh,
    "add": num_first(torch.add, lambda a, b: a + b), "sub": num_first(torch.sub, lambda a, b: a - b),
    "mul": num_first(torch.mul, lambda a, b: a * b), "div": num_first(torch.div, lambda a, b: a / b),
    "pow": num_first(torch.pow, lambda a, b: a ** b), "remainder": num_first(torch.remainder, lambda a, b: a % b),
    "fmod": num_first(torch.fmod, None), "atan2": num_first(torch.atan2, None), "hypot": num_first(torch.hypot, None),
    "_div_floor": num_first(lambda a, b: torch.div(a, b, rounding_mode="floor"), None),
    "_div_trunc": num_first(lambda a, b: torch.div(a, b, rounding_mode="trunc"), None),
    "maximum": num_first(torch.maximum, None), "minimum": num_first(torch.minimum, None),
    "eq": num_first(torch.eq, lambda a, b: b == a), "ne": num_first(torch.ne, lambda a, b: b != a),
    "lt": num_first(torch.lt, lambda a, b: b > a), "le": num_first(torch.le, lambda a, b: b >= a),
    "gt": num_first(torch.gt, lambda a, b: b < a), "ge": num_first(torch.ge, lambda a, b: b <= a),
    "logical_and": num_first(torch.logical_and, None), "logical_or": num_first(torch.logical_or, None),
    "logical_xor": num_first(torch.logical_xor, None),
    "where": torch.where, "clamp": clamp(torch.clamp), "lerp": torch.lerp,
    "addcmul": lambda x, a, b, v=None: torch.addcmul(x, a, b, value=1 if v is None else v),
    "masked_fill": torch.masked_fill,
    "sum": reduce_call(torch.sum), "mean": reduce_call(torch.mean), "prod": reduce_call(torch.prod, one_dim=True),
    "amax": reduce_call(torch.amax, alldims, False), "amin": reduce_call(torch.amin, alldims, False),
    "logsumexp": reduce_call(torch.logsumexp, alldims, False), "all": reduce_call(torch.all, None, False, True),
    "any": reduce_call(torch.any, None, False, True), "norm": norm, "var": var_call(torch.var), "std": var_call(torch.std),
    "argmax": arg_call(torch.argmax), "argmin": arg_call(torch.argmin), "max": maxmin(torch.max),
    "min": maxmin(torch.min), "aminmax": aminmax,
    "cumsum": lambda x, d, o=None: torch.cumsum(x, pd(d), dtype=dtype_of(o or {})),
    "softmax": softmax(torch.softmax), "log_softmax": softmax(torch.log_softmax),
    "transpose": lambda x, a, b: x.transpose(pd(a), pd(b)), "t": lambda x: x.t(),
    "permute": lambda x, *p: x.permute(pd(sizes(list(p))[0])),
    "narrow": lambda x, d, s, n: torch.narrow(x, pd(d), pi(s), n),
    "select": lambda x, d, i: x.select(pd(d), pi(i)), "index": index,
    "slice": lambda x, d, a=None, b=None, s=None: lslice(x, pd(d), a, b, s),
    "unsqueeze": lambda x, d: x.unsqueeze(pd(d)), "squeeze": squeeze,
    "expand": lambda x, *s: x.expand(tuple(sizes(list(s))[0])), "view": lambda x, *s: x.view(tuple(sizes(list(s))[0])),
    "reshape": lambda x, *s: x.reshape(tuple(sizes(list(s))[0])), "flatten": flatten,
    "contiguous": lambda x: x.contiguous(), "clone": lambda x: x.clone(), "detach": lambda x: x.detach(), "float": lambda x: x.float(),
    "double": lambda x: x.double(), "long": lambda x: x.long(), "int": lambda x: x.int(),
    "half": lambda x: x.half(), "bfloat16": lambda x: x.bfloat16(), "bool": lambda x: x.bool(),
    "cpu": lambda x: x.cpu(), "cuda": lambda x: x.cuda(), "to": to,
    "cat": lambda ts, d=None: torch.cat(ts, 0 if d is None else pd(d)),
    "stack": lambda ts, d=None: torch.stack(ts, 0 if d is None else pd(d)),
    "split": split, "chunk": chunk,
    "index_select": lambda x, d, i: torch.index_select(x, pd(d), i - 1),
    "gather": lambda x, d, i: torch.gather(x, pd(d), i - 1),
    "embedding": lambda i, w, o=None: F.embedding(i - 1, w, padding_idx=pi(o["padding_idx"]) if o and "padding_idx" in o else None),
    "index_add": lambda x, d, i, s, o=None: torch.index_add(x, pd(d), i - 1, s, alpha=(o or {}).get("alpha", 1)),
    "index_add_": lambda x, d, i, s, o=None: x.index_add_(pd(d), i - 1, s, alpha=(o or {}).get("alpha", 1)),
    "scatter_add": lambda x, d, i, s: torch.scatter_add(x, pd(d), i - 1, s),
    "scatter_add_": lambda x, d, i, s: x.scatter_add_(pd(d), i - 1, s),
    "scatter_reduce": lambda x, d, i, s, r, o=None: torch.scatter_reduce(
        x, pd(d), i - 1, s, r, include_self=(o or {}).get("include_self", True)),
    "masked_select": torch.masked_select,
    "nonzero": lambda x: torch.nonzero(x) + 1,
    "index_put": lambda x, l, v, acc=None: torch.index_put(x, tuple(i - 1 for i in l), v, accumulate=bool(acc)),
    "index_put_": lambda x, l, v, acc=None: x.index_put_(tuple(i - 1 for i in l), v, accumulate=bool(acc)),
    "matmul": torch.matmul, "mm": torch.mm, "bmm": torch.bmm, "linear": F.linear,
    "tril": lambda x, k=0: torch.tril(x, k), "triu": lambda x, k=0: torch.triu(x, k),
    "zeros": creation(torch.zeros), "ones": creation(torch.ones), "empty": creation(torch.empty),
    "randn": creation(torch.randn), "rand": creation(torch.rand),
    "randint": lambda lo, hi, s, o=None: torch.randint(lo, hi, s, dtype=dtype_of(o or {}, torch.int64),
                                                        device=device_of(o or {})),
    "full": lambda s, v, o=None: torch.full(s, v, dtype=dtype_of(o or {}), device=device_of(o or {})),
    "arange": arange,
    "tensor": lambda data, o=None: torch.tensor(data, dtype=dtype_of(o or {}), device=device_of(o or {})),
    "zeros_like": like(torch.zeros_like), "ones_like": like(torch.ones_like), "empty_like": like(torch.empty_like),
    "add_": add_, "sub_": sub_, "mul_": lambda x, b: x.mul_(b), "div_": lambda x, b: x.div_(b),
    "fill_": lambda x, v: x.fill_(v), "zero_": lambda x: x.zero_(), "copy_": copy_,
    "clamp_": clamp(torch.clamp_), "masked_fill_": lambda x, m, v: x.masked_fill_(m, v),
    "setindex": setindex, "item": lambda x: x.item(),
    # the other in-place pointwise forms (vm/registry.hpp CR_INPLACE_OPS): the method of self
    **{n + "_": (lambda n: lambda x, *a: getattr(x, n + "_")(*a))(n) for n in (
        "neg", "abs", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
        "sigmoid", "relu", "erf", "floor", "ceil", "trunc", "sign", "reciprocal", "square", "pow", "fmod",
        "remainder", "atan2", "hypot", "lerp", "addcmul")},
    "eye": eye, "linspace": linspace, "attention": attention,
    "as_strided": lambda x, size, stride, off=None: torch.as_strided(x, as_list(size), as_list(stride), 0 if off is None else off),
    "bincount": bincount,
    "sort": lambda x, d=None, desc=None: order(torch.sort(x, -1 if d is None else pd(d), descending=bool(desc))),
    "topk": lambda x, k, d=None, largest=None, srt=None: order(torch.topk(x, k, -1 if d is None else pd(d),
                                                                         largest=largest is not False, sorted=srt is not False)),
}
RANDOM = {"randn", "rand", "randint", "empty", "empty_like"}  # torch cannot make crescent's values
TIES = {"argmax", "argmin", "max", "min"}  # indices: any index of an equal value is right
