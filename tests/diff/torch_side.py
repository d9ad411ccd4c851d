"""The PyTorch side of tests/diff/diff_torch.lua: runs a whole batch of cases in one process.

    python3 torch_side.py MANIFEST INPUTS.safetensors OUTPUTS.safetensors STATUS.lua DEVICE

MANIFEST has one case a line: `key<TAB>setup<TAB>expr`. `setup` is Python statements that build
the inputs from the saved bases (L(name) loads one onto DEVICE); `expr` is the PyTorch equivalent
of the crescent call (misuse cases call OPS, the compile fuzzer's mapping of crescent's calls in
fuzz_replay.py). Each result tensor is written to OUTPUTS as `key#i` (i from 1; a tuple or
list gives several), and STATUS (a Lua chunk returning a table) records per case either
{n = count} or {error = message}. The safetensors reading and writing and the helpers shared with
the compile fuzzer's replayer are in torch_io.py.
"""
import math
import sys
import warnings

import torch
import torch.nn.functional as F

from fuzz_replay import OPS
from torch_io import CRESCENT_DTYPES, W, alldims, lslice, lua_str, read_safetensors, write_safetensors

warnings.filterwarnings("ignore")  # var with too few elements etc.: the values are compared anyway


# ---- helpers the recipes' expressions use (more in torch_io.py) --------------------------------

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
    """The gradient mode (grad.lua): gradients of sum_k sum(result_k * W_k), W_k[i] = cos(0.7 i + k),
    over the floating results that require grad, w.r.t. leaves (zeros for an unused one)."""
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


# ---- the batch -----------------------------------------------------------------------------------

def main():
    manifest, inputs_path, outputs_path, status_path, device = sys.argv[1:6]
    inputs = read_safetensors(inputs_path)
    env0 = dict(torch=torch, F=F, math=math, nan=float("nan"), inf=float("inf"), W=W, idx1=idx1,
                alldims=alldims, multi=multi, squeeze_dims=squeeze_dims, lslice=lslice, gathered=gathered, grads=grads,
                OPS=OPS, DEV=device, L=lambda name: inputs[name].clone().to(device))
    outputs, status = {}, []
    with open(manifest) as f:
        for line in f:
            key, setup, expr = line.rstrip("\n").split("\t")
            env = dict(env0)
            try:
                exec(setup, env)
                r = eval(expr, env)
                rs = list(r) if isinstance(r, (tuple, list)) else [r]
                for x in rs:
                    if not isinstance(x, torch.Tensor):
                        raise TypeError("torch result is a %s, not a tensor" % type(x).__name__)
                    if x.dtype not in CRESCENT_DTYPES:
                        raise TypeError("torch result dtype %s has no crescent equivalent" % x.dtype)
                for i, x in enumerate(rs):
                    outputs["%s#%d" % (key, i + 1)] = x
                status.append("%s = {n = %d}" % (key, len(rs)))
            except Exception as e:  # noqa: BLE001 - any torch error is an expected outcome
                status.append("%s = {error = %s}" % (key, lua_str("%s: %s" % (type(e).__name__, e))))
    write_safetensors(outputs_path, outputs)
    with open(status_path, "w") as f:
        f.write("return {\n" + ",\n".join(status) + "\n}\n")


if __name__ == "__main__":
    main()
