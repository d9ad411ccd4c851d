"""PyTorch DDP + torch.compile on the data-parallel GPT-2 benchmark (bench/ddp_gpt2_bench.lua is
crescent's side; both run from bench/run_dist.sh).

    python3 bench/torch_ddp_gpt2.py CONFIG BATCH SEQ STEPS [NPROC]
    (AUTOCAST=bfloat16 by default; COMPILE=0: no torch.compile)

Starts NPROC processes itself (torch.multiprocessing, no torchrun; default 1, or WORLD_SIZE when
a launcher already set RANK), one per GPU, each with the step of bench/torch_gpt2_step.py under
DistributedDataParallel over NCCL (gradient_as_bucket_view, as crescent's side; a 1-process run
has no process group), BATCH rows per rank, AdamW (fused: PyTorch's fastest on CUDA). Rank 0
prints one JSON line: the median step time after WARM steps, tokens/s of every rank.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import emit, train_loop  # noqa: E402
from torch_gpt2_step import make_step  # noqa: E402


def worker(local_rank, world, args):
    name, batch, seq, steps = args
    rank = int(os.environ.get("RANK", local_rank))
    autocast = os.environ.get("AUTOCAST", "bfloat16")
    autocast = None if autocast in ("", "none") else autocast
    dev = f"cuda:{local_rank}"
    torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("nccl", rank=rank, world_size=world)
    compile = os.environ.get("COMPILE", "1") == "1"
    wrap = None
    if world > 1:
        wrap = lambda m: torch.nn.parallel.DistributedDataParallel(m, device_ids=[dev], gradient_as_bucket_view=True)  # noqa: E731
    _, step = make_step(name, batch, seq, dev, autocast, compile=compile, wrap=wrap, data_seed=1 + rank, fused=True)
    run = train_loop(step, int(os.environ.get("WARM", "3")), steps)
    if rank == 0:
        emit(dict(side="torch", config=name, world=world, batch_per_rank=batch, seq=seq, compile=compile,
                  autocast=autocast or "none", step_ms=run["step_ms"], tokens_per_s=world * batch * seq / (run["step_ms"] / 1e3),
                  first_loss=run["first_loss"], last_loss=run["last_loss"], torch=torch.__version__))
    if world > 1:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    args = (sys.argv[1], *(int(a) for a in sys.argv[2:5]))
    if "RANK" in os.environ:  # (started by torchrun or another launcher: one process of many)
        worker(int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), args)
    else:
        nproc = int(sys.argv[5]) if len(sys.argv) > 5 else 1
        if nproc > torch.cuda.device_count():
            sys.exit(f"torch_ddp_gpt2.py: {nproc} processes asked, {torch.cuda.device_count()} GPU(s) here")
        if nproc == 1:
            worker(0, 1, args)
        else:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(free_port()))
            mp.spawn(worker, args=(nproc, args), nprocs=nproc, join=True)
