"""PyTorch's side of bench/train_probe.lua: the step of bench/torch_gpt2_step.py on CUDA, the mean
of 8 steady steps after 4 and its peak memory; PROF=1: then torch.profiler's kernel table of two.

    python3 bench/torch_train_probe.py [eager|compile] [none|bfloat16] [config] [batch] [seq]
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import emit  # noqa: E402
from torch_gpt2_step import make_step  # noqa: E402

mode, ac = (sys.argv[1:3] + ["eager", "none"][len(sys.argv[1:3]):])
config, batch, seq = (sys.argv[3:6] + ["gpt2", "8", "512"][len(sys.argv[3:6]):])
ac = None if ac == "none" else ac
model, step = make_step(config, int(batch), int(seq), "cuda", ac, compile=mode == "compile")
for _ in range(4):
    step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for _ in range(8):
    step()
torch.cuda.synchronize()
emit(dict(mode=mode, autocast=ac or "none", step_ms=(time.perf_counter() - t0) / 8 * 1e3,
          peak_allocated_mib=torch.cuda.max_memory_allocated() / 2**20,
          peak_reserved_mib=torch.cuda.max_memory_reserved() / 2**20))
if os.environ.get("PROF"):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        step()
        step()
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=60, max_name_column_width=90))
