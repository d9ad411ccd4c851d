"""PyTorch DDP + torch.compile on the data-parallel GPT-2 benchmark (bench/ddp_gpt2_bench.lua is
crescent's side; both run from bench/run_dist.sh).

    python3 -m torch.distributed.run --nproc_per_node N bench/torch_ddp_gpt2.py CONFIG BATCH SEQ STEPS
    (AUTOCAST=bfloat16 by default; COMPILE=0: no torch.compile)

The model of tests/fixtures/torch_gpt2.py in a module, DistributedDataParallel over NCCL (a
1-process run has no process group), BATCH rows per rank, AdamW (fused: PyTorch's fastest on
CUDA). Rank 0 prints one JSON line: the median step time after WARM steps, tokens/s of every rank.
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from torch_gpt2 import forward, random_params  # noqa: E402

CONFIGS = {  # as G.configs in examples/models/gpt2.lua
    "small": dict(vocab=4096, n_ctx=512, d=256, n_head=8, n_layer=4),
    "gpt2": dict(vocab=50257, n_ctx=1024, d=768, n_head=12, n_layer=12),
}
name, batch, seq, steps = sys.argv[1], *(int(a) for a in sys.argv[2:5])
warm = int(os.environ.get("WARM", "3"))
autocast = os.environ.get("AUTOCAST", "bfloat16")
autocast = None if autocast in ("", "none") else autocast
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
dev = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
torch.cuda.set_device(dev)
if world > 1:
    dist.init_process_group("nccl")
cfg = CONFIGS[name]
torch.manual_seed(0)


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.ParameterDict(random_params(cfg["vocab"], cfg["d"], cfg["n_layer"], cfg["n_ctx"], scale=0.05))

    def forward(self, ids):
        return forward(dict(self.p.items()), ids, cfg["n_head"])


model = GPT().to(dev)
wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev]) if world > 1 else model
run = torch.compile(wrapped) if os.environ.get("COMPILE", "1") == "1" else wrapped
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
torch.manual_seed(1 + rank)
data = torch.randint(0, cfg["vocab"], (batch, seq + 1), device=dev)
ids, targets = data[:, :seq], data[:, 1:].reshape(-1)


def step():
    with torch.autocast("cuda", dtype=getattr(torch, autocast or "bfloat16"), enabled=bool(autocast)):
        loss = F.cross_entropy(run(ids).reshape(batch * seq, cfg["vocab"]), targets)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


first = [step() for _ in range(warm)][0]
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    last = step()
    times.append((time.perf_counter() - t0) * 1e3)
ms = statistics.median(times)
if rank == 0:
    print(json.dumps(dict(side="torch", config=name, world=world, batch_per_rank=batch, seq=seq,
                          compile=os.environ.get("COMPILE", "1") == "1", autocast=autocast or "none", step_ms=ms,
                          tokens_per_s=world * batch * seq / (ms / 1e3), first_loss=first, last_loss=last,
                          torch=torch.__version__)))
if world > 1:
    dist.destroy_process_group()
