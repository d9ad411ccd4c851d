"""The anchor's workloads in PyTorch (../shared/anchors/torch_anchor.py), shared by
bench/torch_cpu.py and bench/torch_cuda.py: name -> (fn, args, bytes moved or None).
Beyond the anchor: sum_all (sum of N), row_sum_long (8 rows of N / 4), mse_1d (mean of (x - y)^2).
GPU sizes: N = 2^24; R, C = 8192, 4096; CPU sizes: N = 2^22; R, C = 2048, 2048.
DTYPE=float16 / bfloat16 (environment) makes every input of that dtype; bytes moved scale with it."""
import os

import torch

DTYPE = getattr(torch, os.environ.get("DTYPE", "float32"))


def gelu(x):
    return x * 0.5 * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


def small_chain(x):
    for _ in range(20):
        x = torch.sin(x) * 1.01 + 0.1
    return x


def attention(q, k, v):
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 8, dim=-1), v)


def workloads(device="cpu"):
    gpu = device != "cpu"
    N = 1 << 24 if gpu else 1 << 22
    R, C = (8192, 4096) if gpu else (2048, 2048)
    rows, heads = (4096, (16, 8, 1024, 64)) if gpu else (512, (2, 8, 256, 64))

    def r(*shape):
        return torch.randn(*shape, device=device).to(DTYPE)

    e = torch.finfo(DTYPE).bits // 8  # bytes per element
    N8, RC8, RC4 = 2 * e * N, 2 * e * R * C, e * R * C

    return {
        "pw_chain": (lambda x: torch.sin((x + 1) * 2), (r(N),), N8),
        "gelu": (gelu, (r(N),), N8),
        "add_mul_sum": (lambda x, y: ((x + y) * 2).sum(), (r(R, C), r(R, C)), RC8),
        "row_sum": (lambda x: x.sum(dim=1), (r(R, C),), RC4),
        "bias_relu": (lambda x, b: torch.relu(x + b), (r(R, C), r(C)), RC8),
        "softmax": (lambda x: torch.softmax(x, dim=-1), (r(R, C),), RC8),
        "layernorm": (lambda x, w, b: torch.nn.functional.layer_norm(x, (C,), w, b), (r(R, C), r(C), r(C)), RC8),
        "small_chain": (small_chain, (r(1024),), None),
        "mlp": (lambda x, w1, b1, w2, b2: gelu(x @ w1 + b1) @ w2 + b2,
                (r(rows, 1024), r(1024, 4096), r(4096), r(4096, 1024), r(1024)), None),
        "attention": (attention, (r(*heads), r(*heads), r(*heads)), None),
        "sum_all": (lambda x: x.sum(), (r(N),), e * N),
        "row_sum_long": (lambda x: x.sum(dim=1), (r(8, N // 4),), 2 * e * N),
        "mse_1d": (lambda x, y: ((x - y) * (x - y)).mean(), (r(N), r(N)), 2 * e * N),
    }
