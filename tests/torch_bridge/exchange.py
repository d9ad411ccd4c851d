"""The exchange format of crescent's PyTorch bridge (tests/lua/lib/torch_bridge.lua, bridge.py):
safetensors read and written by hand (a length-prefixed JSON header and raw bytes, so only torch
is needed), the JSON encoding of Lua numbers, and the Lua literals of the status file.
"""
import json
import math
import struct

import torch

ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
             "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
             "U8": torch.uint8, "BOOL": torch.bool}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}
# the dtypes crescent has; a result in another dtype travels as float64 or int64
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


def transportable(t):
    """t in a dtype crescent can load (its own, or float64 / int64 for any other)."""
    if t.dtype in CRESCENT_DTYPES:
        return t
    return t.to(torch.float64 if t.is_floating_point() or t.is_complex() else torch.int64)


def number(v):
    """A number of the JSON the Lua side writes: NaN and the infinities come as {"$f": "nan"}."""
    return float(v["$f"]) if isinstance(v, dict) and "$f" in v else v


def short(s):
    """A message for the status file: its first line, at most 300 characters."""
    return str(s).split("\n")[0][:300]


def error_text(e):
    return short("%s: %s" % (type(e).__name__, e))


ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def lua_str(s):
    out = []
    for c in str(s):
        if c in ESCAPES:
            out.append(ESCAPES[c])
        elif ord(c) < 32 or ord(c) == 127:
            out.append("\\%03d" % ord(c))
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def lua(v):
    """v (None, a bool, number, string, list or dict of those) as a Lua literal."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "(0/0)"
        if math.isinf(v):
            return "(1/0)" if v > 0 else "(-1/0)"
        return repr(v)
    if isinstance(v, str):
        return lua_str(v)
    if isinstance(v, (list, tuple)):
        return "{" + ", ".join(lua(x) for x in v) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join("[%s] = %s" % (lua_str(k), lua(x)) for k, x in v.items() if x is not None) + "}"
    raise TypeError("no Lua literal for a %s" % type(v).__name__)


def write_status(path, status):
    """The status file: a Lua chunk returning {[key] = record}."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("return {\n" + ",\n".join("[%s] = %s" % (lua_str(k), lua(r)) for k, r in status.items()) + "\n}\n")


def context_lost(e):
    """Whether torch error e was a CUDA kernel's device-side assert, after which the process's CUDA
    context is gone (the handlers end their batch; torch_bridge.lua runs the rest in a new process)."""
    return "device-side assert" in str(e)
