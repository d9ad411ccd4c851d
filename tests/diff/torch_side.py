"""The PyTorch side of tests/diff/diff_torch.lua: runs a whole batch of cases in one process.

    python3 torch_side.py MANIFEST INPUTS.safetensors OUTPUTS.safetensors STATUS.lua DEVICE

MANIFEST has one case a line: `key<TAB>setup<TAB>expr`. `setup` is Python statements that build
the inputs from the saved bases (L(name) loads one onto DEVICE); `expr` is the PyTorch equivalent
of the crescent call. Each result tensor is written to OUTPUTS as `key#i` (i from 1; a tuple or
list gives several), and STATUS (a Lua chunk returning a table) records per case either
{n = count} or {error = message}. safetensors is read and written here by hand (the format is a
length-prefixed JSON header and raw bytes), so only torch is needed.
"""
import json
import math
import struct
import sys
import warnings

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")  # var with too few elements etc.: the values are compared anyway

ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
             "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
             "U8": torch.uint8, "BOOL": torch.bool}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}
# the dtypes crescent has; any other result dtype is reported as an error of the torch side
CRESCENT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = ST_DTYPES[e["dtype"]], e["shape"]
        b, end = e["data_offsets"]
        if end == b:
            out[name] = torch.empty(shape, dtype=dtype)
        else:
            out[name] = torch.frombuffer(bytearray(body[b:end]), dtype=dtype).reshape(shape).clone()
    return out


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bool:  # torch.empty(..., dtype=bool) may hold bytes other than 0 and 1
        t = t.view(torch.uint8) != 0
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    header, chunks, pos = {}, [], 0
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [pos, pos + len(b)]}
        chunks.append(b)
        pos += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def lua_str(s):
    s = str(s).split("\n")[0][:300]
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---- helpers the recipes' expressions use ----------------------------------------------------------

def W(v, like):
    """A Lua number in first position, where torch wants a tensor: a 0-d tensor that promotes like
    a Python scalar (the dtype of `like` when both are floats or both integers, else float32)."""
    if like.is_floating_point():
        return torch.tensor(v, dtype=like.dtype, device=like.device)
    return torch.tensor(v, device=like.device)


def idx1(r):
    """(values, indices) with the indices made 1-based, as crescent returns them."""
    return r[0], r[1] + 1


def alldims(a):
    return tuple(range(a.dim()))


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


def lslice(a, d, start, stop, step):
    """crescent's slice(d, start, stop, step): 1-based, inclusive stop, negatives from the end."""
    n = a.shape[d]
    s0 = 0 if start is None else (start - 1 if start > 0 else n + start)
    e0 = n if stop is None else (stop if stop >= 0 else n + stop + 1)  # stop 0: before the first
    return a[(slice(None),) * (d % a.dim()) + (slice(s0, e0, step or 1),)]


def gathered(values, indices, a, d, keepdim=True):
    """values next to a gathered at the (1-based) indices: checks indices up to ties."""
    i = indices - 1
    if not keepdim:
        i = i.unsqueeze(d)
    g = a.gather(d, i)
    return values, (g if keepdim else g.squeeze(d))


# ---- the batch -----------------------------------------------------------------------------------

def main():
    manifest, inputs_path, outputs_path, status_path, device = sys.argv[1:6]
    inputs = read_safetensors(inputs_path)
    env0 = dict(torch=torch, F=F, math=math, nan=float("nan"), inf=float("inf"), W=W, idx1=idx1,
                alldims=alldims, multi=multi, squeeze_dims=squeeze_dims, lslice=lslice, gathered=gathered,
                DEV=device, L=lambda name: inputs[name].clone().to(device))
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
