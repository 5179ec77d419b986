#!/usr/bin/env python3
"""The entry points of PyTorch's local_elastic_agent_test.py as command-line workers, for tpurun's port of those
tests: `entry.py NAME [ARGS...]`. Each does what the test's function does; a return value the agent API would
collect is written to OUTDIR/<RANK>.json instead. torch is imported only where the entry point needs it."""
import json
import os
import signal
import sys
import time


def out(outdir, value):
    tmp = os.path.join(outdir, "." + os.environ["RANK"])
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.rename(tmp, os.path.join(outdir, os.environ["RANK"] + ".json"))


def happy():
    pass


def sad():
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        raise RuntimeError("sad because i throw")

    main()


def check_env():
    for var in ["RANK", "LOCAL_RANK", "ROLE_RANK", "ROLE_NAME", "GROUP_RANK", "LOCAL_WORLD_SIZE", "ROLE_WORLD_SIZE",
                "WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING"]:
        _ = os.environ[var]


def check_env_value(key, expected):
    if key not in os.environ:
        raise RuntimeError(f"Environment variable {key} not found in os.environ")
    if os.environ[key] != expected:
        raise RuntimeError(f"os.environ['{key}']={os.environ[key]} does not equal the expected value: {expected}")


def check_present(key, should_exist):
    if (should_exist == "true") != (key in os.environ):
        raise RuntimeError(f"{key} in os.environ: {key in os.environ}, want {should_exist}")


def dist_sum(wait="0"):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend="gloo")
    t = torch.tensor(rank)
    time.sleep(float(wait))
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    if t.item() != sum(range(world)):
        raise RuntimeError(f"Expected rank sum {sum(range(world))}, got {t.item()}")


def bipolar():
    if int(os.environ["RANK"]) % 2:
        raise RuntimeError("sad because i throw")


def bipolar_sleep(sec):
    if int(os.environ["RANK"]) % 2:
        raise RuntimeError("sad because i throw")
    time.sleep(float(sec))


def role_info(outdir):
    out(outdir, {k: int(os.environ[k]) for k in ["RANK", "ROLE_RANK", "GROUP_RANK", "ROLE_WORLD_SIZE", "WORLD_SIZE"]}
        | {"ROLE_NAME": os.environ["ROLE_NAME"]})


def sleep(sec, outdir):
    time.sleep(float(sec))
    out(outdir, int(os.environ["RANK"]))


def dummy_compute(outdir):
    import torch

    out(outdir, list(torch.rand(100, 100).shape))


def fail_rank_one_once(outdir):
    if os.environ["RANK"] == "1" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        os.kill(os.getpid(), signal.SIGKILL)
    dummy_compute(outdir)


def echo(msg):
    return msg


def rpc_master(msg, outdir):
    import torch.distributed.rpc as rpc

    rpc.init_rpc("master", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    ret = rpc.rpc_sync(to="worker", func=echo, args=(msg,))
    rpc.shutdown()
    out(outdir, f"{ret} from worker")


def rpc_worker():
    import torch.distributed.rpc as rpc

    rpc.init_rpc("worker", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rpc.shutdown()


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
