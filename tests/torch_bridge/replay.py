"""The "replay" handler of crescent's PyTorch bridge: replays the compile fuzzer's recorded programs
(tests/lua/lib/fuzz_torch.lua, tests/lua/test_compile_fuzz.lua) in torch.

The header carries {"tol": {dtype: [rtol, atol]}, "reduce": [op names]} (the tolerances of
tests/diff/compare.lua, and the ops whose float results get a tolerance scaled by their inputs);
each job is one program: {"key", "calls"}. Its values are the inputs named "KEY/NAME". Each call
is {"f": crescent name, "a": args, "r": results, "e": crescent's error, "post": {id: value}}. A
tensor (argument or result) is {"$t": id, "s": value name, "st": strides, "d": device}; "post"
names the values, after a call that writes in place, of every tensor sharing the target's storage.
"f" = "=observe" is no call: its arguments are the tensors the caller can see after a call of the
program (results, inputs, stored values).

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
A program's record: {chain = "ok" | "diverged" | "stopped", at = call, why =, detail =, calls =,
resyncs =, relayouts =, findings = {{call =, op =, kind = "differs" | "raises" | "accepts" |
"alias", msg =, mode = "chain" | "op"}, ...}} or {failed = message}; kinds and messages follow
compare.lua so that tests/diff/excuses.lua applies.
"""
import math

import torch

from crescent_ops import OPS, RANDOM, TIES, pd
from exchange import context_lost, error_text, short


class Program(Exception):
    """A problem of the recording or of this replayer (not a finding about crescent)."""


class ContextLost(Exception):
    """A torch CUDA kernel asserted (an index out of range): the process's CUDA context is gone, so
    the call raised and nothing after it can run here."""


SYNC = [False]  # CUDA: wait for each call, so that a kernel's assert is that call's outcome


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
    def __init__(self, prog, vals):
        self.vals = vals  # crescent's values by name
        self.calls = prog["calls"]
        self.chain = {}      # id -> torch's own tensor
        self.version = {}    # id -> its _version when last compared
        self.findings = []
        self.state, self.resyncs, self.relayouts = "ok", 0, 0
        self.at, self.why, self.detail = None, None, None  # the first divergence
        self.lost = False  # a device-side assert ended the replay (ContextLost)

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
            if SYNC[0]:
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - torch raising is an outcome
            if context_lost(e):
                raise ContextLost("%s: %s" % (type(e).__name__, e)) from e
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
            try:
                if self.state == "ok":
                    self.chain_step(i, c)
                elif c["f"] != "=observe":
                    self.per_op(i, c)
            except ContextLost as e:  # torch raised here; the rest of the program cannot run
                if not c.get("e"):
                    self.find(i, c, "accepts", "crescent returns a result; torch raises " + str(e), "chain")
                self.state, self.lost = "stopped", True
                if self.at is None:
                    self.at, self.why = i, "torch's CUDA context is gone (a device-side assert)"
                break
        return self


def record(r):
    """A replayed program's record for the status file."""
    return {"chain": r.state, "resyncs": r.resyncs, "relayouts": r.relayouts, "at": r.at,
            "why": r.why and short(r.why), "detail": r.detail and short(r.detail), "calls": len(r.calls),
            "findings": [{"call": f["call"], "op": short(f["op"]), "kind": short(f["kind"]), "mode": short(f["mode"]),
                          "msg": short(f["msg"])} for f in r.findings]}


def run(header, jobs, inputs, outputs):
    TOL.update(header["tol"])
    REDUCE.update(header["reduce"])
    SYNC[0] = header.get("device") == "cuda"
    status = {}
    for prog in jobs:
        prefix = prog["key"] + "/"
        vals = {k[len(prefix):]: v for k, v in inputs.items() if k.startswith(prefix)}
        try:
            r = Replay(prog, vals).replay()
            status[prog["key"]] = record(r)
        except Exception as e:  # noqa: BLE001 - reported per program, the batch goes on
            status[prog["key"]] = {"failed": error_text(e)}
            continue
        if r.lost:  # the other programs go to a new process (torch_bridge.lua's attempt)
            status["=context_lost"] = True
            break
    return status
