"""The GPT training step of bench/torch_train_gpt2.py and bench/torch_ddp_gpt2.py (crescent's:
bench/lib/gpt2_train.lua): the model of tests/fixtures/torch_gpt2.py (examples/models/gpt2.lua's
twin) as a module, one step = forward, cross entropy over the next tokens (under autocast when
asked), backward, AdamW step, zero_grad, loss.item()."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from torch_gpt2 import forward, random_params  # noqa: E402

CONFIGS = {  # as G.configs in examples/models/gpt2.lua
    "tiny": dict(vocab=96, n_ctx=64, d=32, n_head=4, n_layer=2),
    "small": dict(vocab=4096, n_ctx=512, d=256, n_head=8, n_layer=4),
    "gpt2": dict(vocab=50257, n_ctx=1024, d=768, n_head=12, n_layer=12),
}


class GPT(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg["n_head"]
        ps = random_params(cfg["vocab"], cfg["d"], cfg["n_layer"], cfg["n_ctx"], scale=0.05)
        self.names = {k.replace(".", "_"): k for k in ps}  # (torch 1.13 takes no "." in parameter names)
        self.p = torch.nn.ParameterDict({k.replace(".", "_"): v for k, v in ps.items()})

    def forward(self, ids):
        return forward({self.names[k]: v for k, v in self.p.items()}, ids, self.n_head)


def make_step(name, batch, seq, dev, autocast=None, compile=False, wrap=None, data_seed=None, **adamw):
    """The model (on `dev`), and step() -> the loss as a float. compile: torch.compile(model)
    (default mode); wrap(model) -> module (DDP); adamw: AdamW's options past lr."""
    cfg = CONFIGS[name]
    torch.manual_seed(0)
    model = GPT(cfg).to(dev)
    wrapped = wrap(model) if wrap else model
    run = torch.compile(wrapped) if compile else wrapped
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, **adamw)
    if data_seed is not None:
        torch.manual_seed(data_seed)
    data = torch.randint(0, cfg["vocab"], (batch, seq + 1)).to(dev)
    ids, targets = data[:, :seq], data[:, 1:].reshape(-1)
    amp_dev = torch.device(dev).type

    def step():
        with torch.autocast(amp_dev, dtype=getattr(torch, autocast or "bfloat16"), enabled=bool(autocast)):
            loss = F.cross_entropy(run(ids).reshape(batch * seq, cfg["vocab"]), targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return model, step
