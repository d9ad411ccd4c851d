"""PyTorch's fused attention (F.scaled_dot_product_attention: flash / cuDNN kernels;
float32 takes the memory-efficient kernel) on the shapes of
bench/attention_bench.lua: median device µs (triton do_bench) and TFLOP/s.
Mode bwd: the backward on GPT-2 124M's training shapes, alone (autograd.grad of a kept forward)
and forward + backward (FLOPs: 2.5x the forward's).

    python3 bench/torch_attention.py [fwd|bwd]
"""
import sys

import torch
import torch.nn.functional as F
import triton.testing as tt


def forward():
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        for B, H, L, E, causal in ((16, 8, 1024, 64, False), (16, 8, 1024, 64, True), (4, 12, 2048, 64, True),
                                   (8, 8, 1024, 128, False)):
            q, k, v = (torch.randn(B, H, L, E, device="cuda", dtype=dt) for _ in range(3))
            us = tt.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), warmup=25, rep=200) * 1e3
            flops = 4 * B * H * L * L * E * (0.5 if causal else 1)
            print(f"torch sdpa {dt} {B}x{H}x{L}x{E} causal={causal}: {us:.1f} us, {flops / us / 1e6:.0f} TFLOP/s")


def backward():
    for L in (512, 1024):
        B, H, E = 8, 12, 64
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            q, k, v = (torch.randn(B, H, L, E, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
            go = torch.randn(B, H, L, E, device="cuda", dtype=dt)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            bwd = tt.do_bench(lambda: torch.autograd.grad(o, (q, k, v), go, retain_graph=True), warmup=25, rep=200) * 1e3
            step = tt.do_bench(lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                                           (q, k, v), go), warmup=25, rep=200) * 1e3
            flops = 4 * B * H * L * L * E * 0.5
            print(f"torch sdpa bwd {dt} {B}x{H}x{L}x{E} causal=True: backward {bwd:.1f} us "
                  f"({2.5 * flops / bwd / 1e6:.0f} TFLOP/s), forward + backward {step:.1f} us")


backward() if sys.argv[1:] == ["bwd"] else forward()
