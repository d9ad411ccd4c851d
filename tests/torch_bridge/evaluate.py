"""The "eval" handler of crescent's PyTorch bridge: Python expressions evaluated in torch, for the
spec files' references (tests/lua/lib/torch_ref.lua) and the differential test (tests/diff/).

Header options: "device" (where L() puts inputs, DEV in expressions; default cpu), "prelude"
(Python statements run once, their names seen by every job), "tensors_only" (a result must be a
tensor or a flat tuple / list of tensors in crescent's dtypes, else the job raises), "upcast_low"
(torch 1.13 on the CPU lacks many float16 / bfloat16 kernels: a job raising "not implemented for"
with such inputs is rerun on float32 copies of them and a float32 result rounded back, which is
what crescent computes). Each job: {"key", "expr", "setup": Python statements run first, "env":
{name: a JSON value, or {"s": NAME} for input NAME}}. A job's record: {error = "Type: message"},
or its result: {tensor = name in the outputs, dtype =, shape =, stride =} (values in the outputs),
{list = {record, ...}}, {number = v} or {str = s}.
"""
import math

import torch
import torch.nn.functional as F

import crescent_ops
from exchange import CRESCENT_DTYPES, context_lost, error_text, number, transportable

LOW = (torch.float16, torch.bfloat16)
HELPERS = ("W", "idx1", "alldims", "multi", "squeeze_dims", "lslice", "gathered", "grads", "OPS")


def base_env(header, inputs):
    device = header.get("device", "cpu")
    env = dict(torch=torch, F=F, math=math, nan=float("nan"), inf=float("inf"), DEV=device,
               L=lambda name: inputs[name].clone().to(device))
    env.update({name: getattr(crescent_ops, name) for name in HELPERS})
    if header.get("prelude"):
        exec(header["prelude"], env)
    return env


def value(v, env):
    if isinstance(v, dict) and "s" in v:
        return env["L"](v["s"])
    if isinstance(v, list):
        return [value(x, env) for x in v]
    return number(v)


def upcast(env, expr, e):
    """expr again on float32 copies of the float16 / bfloat16 tensors of env, or e raised."""
    low = [v.dtype for v in env.values() if isinstance(v, torch.Tensor) and v.dtype in LOW]
    if "not implemented for" not in str(e) or not low:
        raise e
    up = {k: (v.float() if isinstance(v, torch.Tensor) and v.dtype in LOW else v) for k, v in env.items()}
    r = eval(expr, up)
    return r.to(low[0]) if isinstance(r, torch.Tensor) and r.dtype == torch.float32 else r


def evaluate(job, env0, header):
    env = dict(env0)
    for name, v in (job.get("env") or {}).items():
        env[name] = value(v, env0)
    exec(job.get("setup") or "", env)
    try:
        return eval(job["expr"], env)
    except Exception as e:  # noqa: BLE001 - kept when there is no float32 retry
        if not header.get("upcast_low"):
            raise
        return upcast(env, job["expr"], e)


def check_tensors(r):
    for x in (list(r) if isinstance(r, (tuple, list)) else [r]):
        if not isinstance(x, torch.Tensor):
            raise TypeError("torch result is a %s, not a tensor" % type(x).__name__)
        if x.dtype not in CRESCENT_DTYPES:
            raise TypeError("torch result dtype %s has no crescent equivalent" % x.dtype)


def result(name, r, tensors):
    """The record of result r; its tensors go to `tensors` named after name."""
    if isinstance(r, torch.Tensor):
        tensors[name] = transportable(r.detach()).cpu()  # (kept if a later job loses the CUDA context)
        return {"tensor": name, "dtype": str(r.dtype)[6:], "shape": list(r.shape), "stride": list(r.stride())}
    if isinstance(r, (tuple, list)):
        return {"list": [result("%s#%d" % (name, i + 1), x, tensors) for i, x in enumerate(r)]}
    if isinstance(r, str):
        return {"str": r}
    return {"number": r if isinstance(r, bool) else float(r)}


def run(header, jobs, inputs, outputs):
    env0 = base_env(header, inputs)
    cuda = header.get("device", "cpu").startswith("cuda")
    status = {}
    for job in jobs:
        key = job["key"]
        try:
            r = evaluate(job, env0, header)
            if cuda:  # a kernel's assert is this job's outcome
                torch.cuda.synchronize()
            if header.get("tensors_only"):
                check_tensors(r)
            tensors = {}
            status[key] = result(key, r, tensors)
            outputs.update(tensors)
        except Exception as e:  # noqa: BLE001 - any torch error is an expected outcome
            status[key] = {"error": error_text(e)}
            if context_lost(e):  # the other jobs go to a new process
                status["=context_lost"] = True
                break
    return status
