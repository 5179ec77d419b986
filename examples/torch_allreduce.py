"""A real torch.distributed job: every rank contributes rank+1 to a gloo all_reduce and checks the sum.

Run it under tpurun exactly as under torchrun (it reads the env:// variables both set):

    tpurun --nprocs 4 -- python3 examples/torch_allreduce.py
    torchrun --nproc-per-node 4 examples/torch_allreduce.py

FAIL_RANK=N makes rank N raise after the collective; PyTorch's @record writes the traceback to
TORCHELASTIC_ERROR_FILE, which the launcher shows as the root cause.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    if t.item() != want:
        raise SystemExit(f"rank {rank}: all_reduce gave {t.item()}, want {want}")
    print(f"rank {rank}/{world} (local {os.environ['LOCAL_RANK']}): all_reduce sum {t.item():g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if os.environ.get("FAIL_RANK") == str(rank):
        raise RuntimeError(f"rank {rank} was asked to fail (FAIL_RANK={rank})")


if __name__ == "__main__":
    main()
