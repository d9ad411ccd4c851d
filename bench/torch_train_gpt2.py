"""PyTorch on the GPT training-step benchmark (bench/train_gpt2_bench.lua is crescent's side):
the step of bench/torch_gpt2_step.py with PyTorch's default AdamW for the device. MODE=eager, or
MODE=compile: torch.compile(model) (default mode). One JSON line: the median step time after
WARM steps (each warm step's time too: the first holds torch.compile's compile), and on a GPU
the peak memory allocated and reserved over the timed steps.

    /usr/bin/python3 bench/torch_train_gpt2.py CONFIG BATCH SEQ STEPS      (THREADS=2 by default)
    DEVICE=cuda AUTOCAST=bfloat16 MODE=compile python3 bench/torch_train_gpt2.py ...  (on a GPU)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import cuda_memory, emit, train_loop  # noqa: E402
from torch_gpt2_step import make_step  # noqa: E402

name, batch, seq, steps = sys.argv[1], *(int(a) for a in sys.argv[2:5])
warm = int(os.environ.get("WARM", "3"))
dev = os.environ.get("DEVICE", "cpu")
autocast = os.environ.get("AUTOCAST") or None
autocast = None if autocast == "none" else autocast
mode = os.environ.get("MODE", "eager")
if mode not in ("eager", "compile"):
    sys.exit(f"torch_train_gpt2.py: MODE expected eager or compile, got {mode}")
if mode == "compile" and not hasattr(torch, "compile"):
    sys.exit(f"torch_train_gpt2.py: MODE=compile needs torch.compile (PyTorch 2), this is torch {torch.__version__}")
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
model, step = make_step(name, batch, seq, dev, autocast, compile=mode == "compile")
out = dict(config=name, batch=batch, seq=seq, device=dev, autocast=autocast or "none", mode=mode)
out.update(train_loop(step, max(warm, 1), steps, cuda=dev != "cpu"))
out.update(tokens_per_s=batch * seq / (out["step_ms"] / 1e3), params=sum(t.numel() for t in model.parameters()),
           torch=torch.__version__)
if dev != "cpu":
    out.update(cuda_memory())
emit(out)
