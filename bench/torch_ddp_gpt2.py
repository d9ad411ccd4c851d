"""PyTorch DDP + torch.compile on the data-parallel GPT-2 benchmark (bench/ddp_gpt2_bench.lua is
crescent's side; both run from bench/run_dist.sh).

    python3 -m torch.distributed.run --nproc_per_node N bench/torch_ddp_gpt2.py CONFIG BATCH SEQ STEPS
    (AUTOCAST=bfloat16 by default; COMPILE=0: no torch.compile)

The step of bench/torch_gpt2_step.py, DistributedDataParallel over NCCL (a 1-process run has no
process group), BATCH rows per rank, AdamW (fused: PyTorch's fastest on CUDA). Rank 0 prints one
JSON line: the median step time after WARM steps, tokens/s of every rank.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import emit, train_loop  # noqa: E402
from torch_gpt2_step import make_step  # noqa: E402

name, batch, seq, steps = sys.argv[1], *(int(a) for a in sys.argv[2:5])
autocast = os.environ.get("AUTOCAST", "bfloat16")
autocast = None if autocast in ("", "none") else autocast
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
dev = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
torch.cuda.set_device(dev)
if world > 1:
    dist.init_process_group("nccl")
compile = os.environ.get("COMPILE", "1") == "1"
wrap = (lambda m: torch.nn.parallel.DistributedDataParallel(m, device_ids=[dev])) if world > 1 else None
_, step = make_step(name, batch, seq, dev, autocast, compile=compile, wrap=wrap, data_seed=1 + rank, fused=True)
run = train_loop(step, int(os.environ.get("WARM", "3")), steps)
if rank == 0:
    emit(dict(side="torch", config=name, world=world, batch_per_rank=batch, seq=seq, compile=compile,
              autocast=autocast or "none", step_ms=run["step_ms"], tokens_per_s=world * batch * seq / (run["step_ms"] / 1e3),
              first_loss=run["first_loss"], last_loss=run["last_loss"], torch=torch.__version__))
if world > 1:
    dist.destroy_process_group()
