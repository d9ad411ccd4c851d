"""PyTorch eager on the training-step benchmark (bench/train_bench.lua is crescent's side).

    /usr/bin/python3 bench/torch_train.py VOCAB D HEADS LAYERS CTX BATCH REPS   (THREADS=2 by default)

The same GPT (tests/fixtures/torch_gpt2.py), one step = forward, cross entropy, backward, AdamW
(torch.optim's default, single-tensor in 1.13); and an AdamW step alone over 20 parameters of
256 x 256, single-tensor (foreach=False) and foreach. One JSON line of medians (and the step's
CPU time per call).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from torch_gpt2 import forward, random_params  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import emit, measure  # noqa: E402

torch.set_num_threads(int(os.environ.get("THREADS", "2")))
V, D, H, NL, L, B, REPS = (int(a) for a in (sys.argv[1:8] or (86, 96, 4, 3, 64, 16, 30)))
torch.manual_seed(0)


p = {k: v.clone().requires_grad_(True) for k, v in random_params(V, D, NL, L, 0.3).items()}
opt = torch.optim.AdamW(list(p.values()), lr=1e-3)
ids, targets = torch.randint(0, V, (B, L)), torch.randint(0, V, (B * L,))


def step():
    opt.zero_grad()
    F.cross_entropy(forward(p, ids, H).reshape(-1, V), targets).backward()
    opt.step()


step_ms, step_cpu_ms = measure(step, 5, REPS)


def adamw(foreach):
    ps = [torch.randn(256, 256, requires_grad=True) for _ in range(20)]
    for q in ps:
        q.grad = torch.randn(256, 256)
    o = torch.optim.AdamW(ps, lr=1e-3, foreach=foreach)
    return measure(o.step, 3, REPS)[0]


emit({"step_ms": step_ms, "step_cpu_ms": step_cpu_ms, "tokens_per_s": B * L / (step_ms / 1e3), "adamw_single_ms": adamw(False),
      "adamw_foreach_ms": adamw(True), "params": sum(t.numel() for t in p.values())})
