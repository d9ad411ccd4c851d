"""PyTorch's side of bench/head_gemm_bench.lua (the same products, median of 20 event-timed calls).

    python3 bench/torch_head_gemm.py [rows=4096]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import emit  # noqa: E402

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
    def r(*s):
        return torch.randn(*s, device="cuda").to(dt)
    x, W, dY, W3 = r(rows, 768), r(50257, 768), r(rows, 50257), r(3072, 768)
    for case, f in (("head x W^T", lambda: x @ W.t()), ("head dY W", lambda: dY @ W),
                    ("head dY^T x", lambda: dY.t() @ x), ("mlp x W^T", lambda: x @ W3.t())):
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        s, e, ts = torch.cuda.Event(True), torch.cuda.Event(True), []
        for _ in range(20):
            s.record()
            f()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e3)
        emit(dict(side="torch", dtype=name, case=case, us=sorted(ts)[10]))
