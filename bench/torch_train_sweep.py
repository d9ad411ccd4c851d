"""PyTorch on the sequence-length sweep (bench/train_sweep.lua is crescent's side): the GPT of
bench/torch_gpt2_step.py, torch.compile(model) (default mode, automatic dynamic shapes) or eager,
AdamW, batches whose length cycles through LENS. ROUNDS passes: the first timed from the cold
start, the last as the steady state; the graphs Dynamo compiled. One JSON line.

    python3 bench/torch_train_sweep.py MODE ROUNDS LENS BATCH CONFIG     (DEVICE=cuda on a GPU)
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import emit  # noqa: E402
from torch_gpt2_step import CONFIGS, GPT  # noqa: E402

mode, rounds, batch, name = sys.argv[1], int(sys.argv[2]), int(sys.argv[4]), sys.argv[5]
lens = [int(n) for n in sys.argv[3].split(",")]
dev = os.environ.get("DEVICE", "cpu")
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
cfg = CONFIGS[name]
torch.manual_seed(0)
model = GPT(cfg).to(dev)
run = torch.compile(model) if mode == "compile" else model
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
V = cfg["vocab"]


def step(n):
    data = torch.randint(0, V, (batch, n + 1), device=dev)
    loss = F.cross_entropy(run(data[:, :n]).reshape(batch * n, V), data[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


first = last = None
for r in range(rounds):
    t0 = time.perf_counter()
    for n in lens:
        step(n)
    ms = (time.perf_counter() - t0) * 1e3 / len(lens)
    first = ms if first is None else first
    last = ms
stats = torch._dynamo.utils.counters["stats"] if mode == "compile" else {}
emit(dict(mode=mode, device=dev, lengths=len(lens), first_round_step_ms=first, last_round_step_ms=last,
          unique_graphs=stats.get("unique_graphs", 0), torch=torch.__version__))
