"""What the Python sides of crescent's PyTorch comparisons share (tests/diff/torch_side.py for the
per-op differential test, tests/diff/fuzz_replay.py for the compile fuzzer's programs):
safetensors read and written by hand (the format is a length-prefixed JSON header and raw bytes,
so only torch is needed), Lua string literals for the status files, and helpers that translate
crescent's conventions (weak Lua numbers, 1-based inclusive slices) to torch calls.
"""
import json
import struct

import torch

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


# ---- crescent's conventions in torch -----------------------------------------------------------

def W(v, like):
    """A Lua number in first position, where torch wants a tensor: a 0-d tensor that promotes like
    a Python scalar (the dtype of `like` when both are floats or both integers, else float32)."""
    if like.is_floating_point():
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
