"""PyTorch eager on the training-step benchmark (bench/train_gpt2_bench.lua is crescent's side).

    /usr/bin/python3 bench/torch_train_gpt2.py CONFIG BATCH SEQ STEPS      (THREADS=2 by default)
    DEVICE=cuda AUTOCAST=bfloat16 python3 bench/torch_train_gpt2.py ...  (on a GPU)

The model of tests/fixtures/torch_gpt2.py (examples/models/gpt2.lua's twin), one step = forward,
cross-entropy over the next tokens, backward, AdamW step (PyTorch's default implementation for
the device), zero_grad, loss.item(). One JSON line: the median step time after WARM steps, and
on a GPU the peak memory allocated and reserved (torch.cuda.max_memory_allocated / _reserved).
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from torch_gpt2 import forward, random_params  # noqa: E402

CONFIGS = {  # as G.configs in examples/models/gpt2.lua
    "tiny": dict(vocab=96, n_ctx=64, d=32, n_head=4, n_layer=2),
    "small": dict(vocab=4096, n_ctx=512, d=256, n_head=8, n_layer=4),
    "gpt2": dict(vocab=50257, n_ctx=1024, d=768, n_head=12, n_layer=12),
}
name, batch, seq, steps = sys.argv[1], *(int(a) for a in sys.argv[2:5])
warm = int(os.environ.get("WARM", "3"))
dev = os.environ.get("DEVICE", "cpu")
autocast = os.environ.get("AUTOCAST") or None
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
torch.manual_seed(0)
cfg = CONFIGS[name]
p = {k: v.to(dev).requires_grad_() for k, v in
     random_params(cfg["vocab"], cfg["d"], cfg["n_layer"], cfg["n_ctx"], scale=0.05).items()}
opt = torch.optim.AdamW(p.values(), lr=3e-4)
data = torch.randint(0, cfg["vocab"], (batch, seq + 1)).to(dev)
ids, targets = data[:, :seq], data[:, 1:].reshape(-1)


def step():
    with torch.autocast(dev, dtype=getattr(torch, autocast or "bfloat16"), enabled=bool(autocast)):
        logits = forward(p, ids, cfg["n_head"])
        loss = F.cross_entropy(logits.reshape(batch * seq, cfg["vocab"]), targets)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


first = [step() for _ in range(warm)][0]
if dev != "cpu":
    torch.cuda.reset_peak_memory_stats()
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    last = step()
    times.append((time.perf_counter() - t0) * 1e3)
ms = statistics.median(times)
out = dict(config=name, batch=batch, seq=seq, device=dev, autocast=autocast or "none", step_ms=ms,
           tokens_per_s=batch * seq / (ms / 1e3), first_loss=first, last_loss=last,
           params=sum(t.numel() for t in p.values()), torch=torch.__version__)
if dev != "cpu":
    out["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    out["reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
print(json.dumps(out))
