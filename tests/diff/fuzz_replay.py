"""The PyTorch side of the compile fuzzer (tests/lua/test_compile_fuzz.lua, tests/lua/fuzz_torch.lua):
replays a batch of recorded programs in one process.

    python3 fuzz_replay.py MANIFEST STATUS.lua

MANIFEST's first line is a JSON header {"tol": {dtype: [rtol, atol]}, "reduce": [op names]} (the
tolerances of tests/diff/compare.lua, and the ops whose float results get a tolerance scaled by
their inputs); every further line is one program: {"key", "file", "calls"}. `file` is a
safetensors file of crescent's values; each call is {"f": crescent name, "a": args, "r": results,
"e": crescent's error, "post": {id: value}}. A tensor (argument or result) is {"$t": id, "s":
value name in `file`, "st": strides, "d": device}; "post" names the values, after a call that
writes in place, of every tensor sharing the target's storage. "f" = "=observe" is no call: its
arguments are the tensors the caller can see after a call of the program (results, inputs, stored
values).

Each program runs twice over:
- chain mode: torch runs the whole program on its own tensors (views and in-place writes through
  them included); every result and every written tensor is compared with crescent's value, and
  an argument that torch changed behind crescent's back (torch aliases it, crescent does not) is
  caught when it is next used. Random creations (randn, ...) take crescent's values.
- per-op mode: a call runs on crescent's own argument values (rebuilt with crescent's strides).
  At the first chain difference the call is rerun this way: if torch then agrees, the difference
  was amplified from earlier rounding (an ulp that became a different floor(), a flipped
  comparison): the program "diverged", and every later call is checked per-op only. Otherwise it
  is a finding.
STATUS is a Lua chunk: per program {chain = "ok" | "diverged", at = call, why =, findings = {{call =,
op =, kind = "differs" | "raises" | "accepts" | "alias", msg =, mode = "chain" | "op"}, ...}}; kinds
and messages follow compare.lua so that recipes.lua's EXCUSES apply.
"""
import json
import math
import sys
import warnings

import torch
import torch.nn.functional as F

from torch_io import W, alldims, lslice, lua_str, read_safetensors

warnings.filterwarnings("ignore")


class Program(Exception):
    """A problem of the recording or of this replayer (not a finding about crescent)."""


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
        elif not isinstance(b, torch.Tensor) and fn in (torch.maximum, torch.minimum, torch.atan2, torch.logical_and,
                                                        torch.logical_or, torch.logical_xor):
            b = W(b, a)
        return fn(a, b, **kw)
    return call


def reduce_call(fn, none_dims=None, dtype=True):
    """sum / mean / amax / ...: (x, dim?, keepdim?, opts?)."""
    def call(x, *rest):
        rest, o = split_opts(list(rest))
        dim = rest[0] if rest else None
        kd = bool(rest[1]) if len(rest) > 1 and rest[1] is not None else False
        kw = {"dtype": dtype_of(o)} if dtype and o.get("dtype") else {}
        if dim is None:
            if none_dims is None:
                return fn(x, **kw)
            return fn(x, none_dims(x), keepdim=kd, **kw)
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


OPS = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log2": torch.log2, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "relu": torch.relu, "silu": F.silu, "erf": torch.erf, "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "sign": torch.sign,
    "reciprocal": torch.reciprocal, "square": torch.square, "isnan": torch.isnan, "isinf": torch.isinf,
    "logical_not": torch.logical_not,
    "gelu": lambda x, o=None: F.gelu(x, approximate=(o or {}).get("approximate", "none")),
    "add": num_first(torch.add, lambda a, b: a + b), "sub": num_first(torch.sub, lambda a, b: a - b),
    "mul": num_first(torch.mul, lambda a, b: a * b), "div": num_first(torch.div, lambda a, b: a / b),
    "pow": num_first(torch.pow, lambda a, b: a ** b), "remainder": num_first(torch.remainder, lambda a, b: a % b),
    "fmod": num_first(torch.fmod, None), "atan2": num_first(torch.atan2, None),
    "maximum": num_first(torch.maximum, None), "minimum": num_first(torch.minimum, None),
    "eq": num_first(torch.eq, lambda a, b: b == a), "ne": num_first(torch.ne, lambda a, b: b != a),
    "lt": num_first(torch.lt, lambda a, b: b > a), "le": num_first(torch.le, lambda a, b: b >= a),
    "gt": num_first(torch.gt, lambda a, b: b < a), "ge": num_first(torch.ge, lambda a, b: b <= a),
    "logical_and": num_first(torch.logical_and, None), "logical_or": num_first(torch.logical_or, None),
    "logical_xor": num_first(torch.logical_xor, None),
    "where": torch.where, "clamp": clamp(torch.clamp), "lerp": torch.lerp,
    "addcmul": lambda x, a, b, v=None: torch.addcmul(x, a, b, value=1 if v is None else v),
    "masked_fill": torch.masked_fill,
    "sum": reduce_call(torch.sum), "mean": reduce_call(torch.mean), "prod": reduce_call(torch.prod),
    "amax": reduce_call(torch.amax, alldims, False), "amin": reduce_call(torch.amin, alldims, False),
    "logsumexp": reduce_call(torch.logsumexp, alldims, False), "all": reduce_call(torch.all, None, False),
    "any": reduce_call(torch.any, None, False), "norm": norm, "var": var_call(torch.var), "std": var_call(torch.std),
    "argmax": arg_call(torch.argmax), "argmin": arg_call(torch.argmin), "max": maxmin(torch.max),
    "min": maxmin(torch.min),
    "cumsum": lambda x, d, o=None: torch.cumsum(x, pd(d), dtype=dtype_of(o or {})),
    "softmax": softmax(torch.softmax), "log_softmax": softmax(torch.log_softmax),
    "transpose": lambda x, a, b: x.transpose(pd(a), pd(b)), "t": lambda x: x.t(),
    "permute": lambda x, *p: x.permute(pd(sizes(list(p))[0])),
    "narrow": lambda x, d, s, n: torch.narrow(x, pd(d), pi(s), n),
    "select": lambda x, d, i: x.select(pd(d), pi(i)), "index": lambda x, i: x.select(0, pi(i)),
    "slice": lambda x, d, a=None, b=None, s=None: lslice(x, pd(d), a, b, s),
    "unsqueeze": lambda x, d: x.unsqueeze(pd(d)), "squeeze": squeeze,
    "expand": lambda x, *s: x.expand(tuple(sizes(list(s))[0])), "view": lambda x, *s: x.view(tuple(sizes(list(s))[0])),
    "reshape": lambda x, *s: x.reshape(tuple(sizes(list(s))[0])), "flatten": flatten,
    "contiguous": lambda x: x.contiguous(), "clone": lambda x: x.clone(), "float": lambda x: x.float(),
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
    "eye": eye, "linspace": linspace, "attention": attention,
    "as_strided": lambda x, size, stride, off=None: torch.as_strided(x, as_list(size), as_list(stride), 0 if off is None else off),
    "sort": lambda x, d=None, desc=None: order(torch.sort(x, -1 if d is None else pd(d), descending=bool(desc))),
    "topk": lambda x, k, d=None, largest=None, srt=None: order(torch.topk(x, k, -1 if d is None else pd(d),
                                                                         largest=largest is not False, sorted=srt is not False)),
}
RANDOM = {"randn", "rand", "randint", "empty", "empty_like"}  # torch cannot make crescent's values
TIES = {"argmax", "argmin", "max", "min"}  # indices: any index of an equal value is right


# ---- comparing -------------------------------------------------------------------------------------

TOL, REDUCE = {}, set()


def max_abs(t):
    t = t.detach().double()
    t = t[torch.isfinite(t)] if t.numel() else t
    return float(t.abs().max()) if t.numel() else 0.0


def reduce_scale(tensors):
    """compare.lua's C.reduce_scale: the product of the inputs' magnitudes times sqrt(largest size)."""
    m, n = 1.0, 1
    for t in tensors:
        m *= max(1.0, max_abs(t))
        n = max(n, t.numel())
    return m * math.sqrt(n)


def dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def differs(got, want, scale=1.0):
    """compare.lua's compare_one for crescent's tensor `got` and torch's `want`: None or a message."""
    if not isinstance(want, torch.Tensor):
        return "torch gives a %s, not a tensor" % type(want).__name__
    if got.dtype != want.dtype:
        return "dtype %s, torch %s" % (dtype_name(got), dtype_name(want))
    if list(got.shape) != list(want.shape):
        return "shape %s, torch %s" % (list(got.shape), list(want.shape))
    a, b = got.detach().cpu(), want.detach().cpu()
    tol = TOL.get(dtype_name(got))
    if tol is None or a.numel() == 0:
        bad = a != b
    else:
        a, b = a.double(), b.double()
        s = max(1.0, max_abs(b), scale)
        close = torch.isfinite(a) & torch.isfinite(b) & ((a - b).abs() <= tol[0] * b.abs() + tol[1] * s)
        bad = ~((a == b) | (torch.isnan(a) & torch.isnan(b)) | close)
    n = int(bad.sum())
    if n == 0:
        return None
    first = int(bad.reshape(-1).nonzero()[0])
    return "%d of %d values differ; first at flat index %d: got %s, torch %s" % (
        n, bad.numel(), first + 1, a.reshape(-1)[first].item(), b.reshape(-1)[first].item())


def number_differs(got, want, dtype):
    if isinstance(got, bool) or isinstance(want, bool) or dtype not in TOL:
        return None if got == want else "item %r, torch %r" % (got, want)
    if got == want or (got != got and want != want):
        return None
    rtol, atol = TOL[dtype]
    if math.isfinite(got) and math.isfinite(want) and abs(got - want) <= rtol * abs(want) + atol * max(1.0, abs(want)):
        return None
    return "item %r, torch %r" % (got, want)


def with_strides(v, st):
    """A copy of v with strides st (crescent's; dims of stride 0 stay expanded)."""
    st = st or []
    if len(st) != v.dim() or v.numel() == 0:
        return v.clone()
    first = tuple(slice(0, 1) if s == 0 else slice(None) for s in st)
    core = v[first]
    base = torch.empty_strided(core.shape, [s if s != 0 else 1 for s in st], dtype=v.dtype, device=v.device)
    base.copy_(core)
    return base.expand(v.shape) if 0 in st else base


def tensors_in(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += tensors_in(a)
        elif isinstance(a, dict):
            out += tensors_in(list(a.values()))
    return out


def storage_ptr(t):
    return t.storage().data_ptr()


# ---- replaying one program ---------------------------------------------------------------------------

class Replay:
    def __init__(self, prog):
        self.vals = read_safetensors(prog["file"])
        self.calls = prog["calls"]
        self.chain = {}      # id -> torch's own tensor
        self.version = {}    # id -> its _version when last compared
        self.findings = []
        self.state, self.resyncs, self.relayouts = "ok", 0, 0
        self.at, self.why, self.detail = None, None, None  # the first divergence

    def value(self, enc):
        """crescent's value of a tensor, on its device, with its strides."""
        return with_strides(self.vals[enc["s"]].to(enc.get("d", "cpu")), enc.get("st"))

    def args(self, enc, chain):
        """The arguments of a call: torch's own tensors (chain) or crescent's values."""
        if isinstance(enc, list):
            return [self.args(e, chain) for e in enc]
        if isinstance(enc, dict):
            if "$t" in enc:
                return self.chain[enc["$t"]] if chain else self.value(enc)
            if "$f" in enc:
                return float(enc["$f"])
            return {k: self.args(v, chain) for k, v in enc.items()}
        return enc

    def scale(self, c, chain):
        if c["f"] not in REDUCE:
            return 1.0
        ts = [a for a in self.args(c["a"], chain) if isinstance(a, torch.Tensor)]
        return reduce_scale(ts)

    def ties_ok(self, c, k, got, res, chain):
        """Result k of max/min/argmax/argmin holds indices: right when crescent's indices point at
        torch's values (ties may pick either index)."""
        f, a = c["f"], c["a"]
        dim = a[1] if len(a) > 1 else None
        if f in ("max", "min"):
            if dim is None or k != 1:
                return False
            values = res[0]
        else:
            values = OPS["amax" if f == "argmax" else "amin"](self.args(a[0], chain), *a[1:3])
        x = self.args(a[0], chain)
        if dim is None or x.dim() == 0:
            x, dim0 = x.reshape(-1), 0
        else:
            dim0 = pd(dim)
        i = got.to(x.device) - 1
        if i.dim() < x.dim():
            i = i.reshape(-1) if x.dim() == 1 else i.unsqueeze(dim0)
        try:
            g = x.gather(dim0, i).reshape(values.shape)
        except Exception:  # noqa: BLE001 - indices out of range
            return False
        return differs(g, values) is None

    def compare(self, c, res, chain):
        """Problems of torch's results res against crescent's: [message], [] when they agree."""
        want = c.get("r", [])
        if len(res) != len(want):
            return ["%d results, torch %d" % (len(want), len(res))]
        scale = self.scale(c, chain)
        out = []
        for k, (w, r) in enumerate(zip(want, res)):
            where = "result %d: " % (k + 1) if len(want) > 1 else ""
            if isinstance(w, list):
                if not isinstance(r, list) or len(r) != len(w):
                    out.append(where + "a list of %d tensors, torch %r" % (len(w), type(r).__name__))
                    continue
                for j, (wj, rj) in enumerate(zip(w, r)):
                    m = differs(self.vals[wj["s"]], rj, scale)
                    if m:
                        out.append(where + "tensor %d: %s" % (j + 1, m))
            elif isinstance(w, dict) and "$t" in w:
                got = self.vals[w["s"]]
                m = differs(got, r, scale)
                if m and c["f"] in TIES and isinstance(r, torch.Tensor) and got.shape == r.shape \
                        and self.ties_ok(c, k, got, res, chain):
                    m = None
                if m:
                    out.append(where + m)
            else:
                x = c["a"][0] if c["a"] else None
                dt = dtype_name(self.vals[x["s"]]) if isinstance(x, dict) and "$t" in x else "float64"
                m = number_differs(float(w["$f"]) if isinstance(w, dict) else w, r, dt)
                if m:
                    out.append(where + m)
        return out

    def post_problems(self, c, chain, target_only):
        """Written tensors: crescent's values after the call against torch's."""
        out = []
        tid = c["a"][0].get("$t") if c["a"] and isinstance(c["a"][0], dict) else None
        for sid, name in (c.get("post") or {}).items():
            i = int(sid)
            if target_only and i != tid:
                continue
            t = self.chain.get(i) if chain else (self.last_target if i == tid else None)
            if t is None:
                continue
            m = differs(self.vals[name], t)
            if m:
                out.append(("target" if i == tid else "alias", "tensor %d after the write: %s" % (i, m)))
        return out

    def adopt(self, c):
        """After a finding, a divergence or a random creation: torch's tensors take crescent's values.
        Written tensors are overwritten in place (torch's views of them stay views); a new result
        replaces torch's."""
        post = c.get("post") or {}
        for sid, name in post.items():
            t, v = self.chain.get(int(sid)), self.vals[name]
            try:
                t.copy_(v.to(t.device))
            except Exception:  # noqa: BLE001 - none yet, or an expanded tensor: replace it
                self.chain[int(sid)] = v.to(t.device if t is not None else "cpu")
            self.version[int(sid)] = self.chain[int(sid)]._version
        for w in c.get("r", []):
            for e in (w if isinstance(w, list) else [w]):
                if isinstance(e, dict) and "$t" in e and str(e["$t"]) not in post:
                    self.chain[e["$t"]] = self.value(e)
                    self.version[e["$t"]] = self.chain[e["$t"]]._version

    def keep(self, c, res):
        """torch's results become its tensors. A new one (sharing no storage with the arguments) takes
        crescent's strides: crescent's pointwise results are contiguous where torch's follow their
        inputs' strides, and later views, view() errors and reshape's view-or-copy depend on them."""
        for w, r in zip(c.get("r", []), res):
            for e, t in zip(w if isinstance(w, list) else [w], r if isinstance(r, list) else [r]):
                if isinstance(e, dict) and "$t" in e and isinstance(t, torch.Tensor):
                    st = e.get("st")
                    if st and list(t.stride()) != st and 0 not in st and t.numel() > 0 \
                            and storage_ptr(t) not in self.last_storages:
                        t = with_strides(t, st)
                        self.relayouts += 1
                    self.chain[e["$t"]] = t
                    self.version[e["$t"]] = t._version
        for sid in (c.get("post") or {}):
            t = self.chain.get(int(sid))
            if t is not None:
                self.version[int(sid)] = t._version

    def find(self, i, c, kind, msg, mode):
        self.findings.append({"call": i, "op": c["f"], "kind": kind, "msg": msg, "mode": mode})

    def stale(self, c):
        """Arguments torch changed since they were last compared, and differ from crescent's values."""
        out = []

        def walk(e):
            if isinstance(e, list):
                for x in e:
                    walk(x)
            elif isinstance(e, dict) and "$t" in e:
                t = self.chain.get(e["$t"])
                if t is not None and t._version != self.version.get(e["$t"]):
                    m = differs(self.vals[e["s"]], t)
                    self.version[e["$t"]] = t._version
                    if m:
                        out.append("tensor %d (written through an alias in torch only?): %s" % (e["$t"], m))
            elif isinstance(e, dict):
                for x in e.values():
                    walk(x)
        walk(c["a"])
        return out

    def outcome_problem(self, c, res, err):
        """(kind, message) when crescent's and torch's outcomes disagree on raising, else None."""
        if c.get("e") and err is None:
            return "raises", "crescent raises: " + c["e"]
        if err is not None and not c.get("e"):
            return "accepts", "crescent returns a result; torch raises " + err
        return None

    def per_op(self, i, c, record=True):
        """Call i on crescent's values: its problems (recorded as findings when record)."""
        res, err = self.run_target(c, False)
        bad = self.outcome_problem(c, res, err)
        probs = [bad] if bad else []
        if not bad and res is not None and c["f"] not in RANDOM:
            probs += [("differs", m) for m in self.compare(c, res, False)]
            probs += [("differs", m) for _, m in self.post_problems(c, False, True)]
        if record:
            for kind, m in probs:
                self.find(i, c, kind, m, "op")
        return probs

    def run_target(self, c, chain):
        """run(), keeping the written target (argument 1) for post_problems in per-op mode."""
        fn = OPS.get(c["f"])
        if fn is None:
            raise Program("no torch mapping for crescent's %s" % c["f"])
        args = self.args(c["a"], chain)
        self.last_target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        self.last_storages = {storage_ptr(t) for t in tensors_in(args)}
        try:
            r = fn(*args)
        except Exception as e:  # noqa: BLE001 - torch raising is an outcome
            return None, "%s: %s" % (type(e).__name__, e)
        if c["f"] == "setindex":
            r = ()
        return (list(r) if isinstance(r, tuple) else [r]), None

    def diverge(self, i, c, why, msg):
        """A chain difference that vanishes on crescent's own values (an amplified rounding
        difference): torch's tensors take crescent's values and the chain goes on."""
        self.resyncs += 1
        if self.at is None:
            self.at, self.why, self.detail = i, why, "%s: %s" % (c["f"], msg)
        self.adopt(c)

    def chain_step(self, i, c):
        stale = self.stale(c)
        if stale:
            for m in stale:
                self.find(i, c, "alias", m, "chain")
            self.state = "stopped"
            return
        if c["f"] == "=observe":
            return
        res, err = self.run_target(c, True)
        bad = self.outcome_problem(c, res, err)
        if (res is not None and c["f"] in RANDOM) or (err is not None and not bad):  # random values; both raise
            self.adopt(c)
        elif bad:
            if self.per_op(i, c, record=False):
                self.find(i, c, bad[0], bad[1], "chain")
                self.adopt(c)
            else:
                self.diverge(i, c, "raising", bad[1])
        else:
            probs = self.compare(c, res, True)
            posts = self.post_problems(c, True, False)
            if not probs and not posts:
                self.keep(c, res)
            elif not probs and all(k == "alias" for k, _ in posts):
                for _, m in posts:
                    self.find(i, c, "alias", m, "chain")
                self.state = "stopped"
            elif self.per_op(i, c):
                self.state = "stopped"
            else:
                self.diverge(i, c, "rounding", (probs + [m for _, m in posts])[0])

    def replay(self):
        for i, c in enumerate(self.calls, 1):
            if self.state == "ok":
                self.chain_step(i, c)
            elif c["f"] != "=observe":
                self.per_op(i, c)
        return self


def lua_value(v):
    if isinstance(v, str):
        return lua_str(v)
    if v is None:
        return "nil"
    return repr(v)


def status_entry(key, r):
    fs = ",\n    ".join("{call = %d, op = %s, kind = %s, mode = %s, msg = %s}" % (
        f["call"], lua_str(f["op"]), lua_str(f["kind"]), lua_str(f["mode"]), lua_str(f["msg"])) for f in r.findings)
    return ("  %s = {chain = %s, resyncs = %d, relayouts = %d, at = %s, why = %s, detail = %s, calls = %d, "
            "findings = {\n    %s}}") % (key, lua_str(r.state), r.resyncs, r.relayouts, lua_value(r.at),
                                         lua_value(r.why), lua_value(r.detail), len(r.calls), fs)


def main():
    manifest, status_path = sys.argv[1:3]
    out = []
    with open(manifest) as f:
        header = json.loads(f.readline())
        TOL.update(header["tol"])
        REDUCE.update(header["reduce"])
        for line in f:
            prog = json.loads(line)
            try:
                out.append(status_entry(prog["key"], Replay(prog).replay()))
            except Exception as e:  # noqa: BLE001 - reported per program, the batch goes on
                out.append("  %s = {failed = %s}" % (prog["key"], lua_str("%s: %s" % (type(e).__name__, e))))
    with open(status_path, "w") as f:
        f.write("return {\n" + ",\n".join(out) + "\n}\n")


if __name__ == "__main__":
    main()
