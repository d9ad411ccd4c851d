"""PyTorch's side of bench/head_gemm_bench.lua: the same products, the median of 20 calls timed
with CUDA events (torch_common.device_us).

    python3 bench/torch_head_gemm.py [rows=4096]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import device_us, emit  # noqa: E402

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
    def r(*s):
        return torch.randn(*s, device="cuda").to(dt)
    x, W, dY, W3 = r(rows, 768), r(50257, 768), r(rows, 50257), r(3072, 768)
    for case, f, args in (("head x W^T", lambda a, b: a @ b.t(), (x, W)), ("head dY W", lambda a, b: a @ b, (dY, W)),
                          ("head dY^T x", lambda a, b: a.t() @ b, (dY, x)), ("mlp x W^T", lambda a, b: a @ b.t(), (x, W3))):
        emit(dict(side="torch", dtype=name, case=case, us=device_us(f, args, 20, warm=3)))
