"""A training-shaped job for the JobSet examples (examples/kubernetes/): every rank joins one gloo group and
all-reduces its rank; the sum must be 0 + 1 + ... + (WORLD_SIZE - 1) on every rank.

It reads what tpurun (or torchrun) gives every worker: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
In a pod of the JobSet it runs as `tpurun -- python3 /app/examples/train.py`, on a CPU host as

    tpurun --nprocs 2 -- python3 examples/train.py --lr 3e-4

(the README's first example) and prints one line per rank, `rank 1/2: all_reduce sum 1 (expected 1)`; a wrong sum
exits 1. `--lr` is taken as a training script takes it, and rank 0 prints it: nothing is trained here. gloo on the
CPU, so that it runs wherever torch does (Debian's python3-torch is enough).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description="a gloo all_reduce of every rank's number, shaped like a training job")
    parser.add_argument("--lr", type=float, default=3e-4, help="learning rate (printed by rank 0; nothing is trained)")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    if rank == 0:
        print(f"rank 0/{world}: lr {args.lr:g}", flush=True)
    dist.init_process_group("gloo", rank=rank, world_size=world)  # env:// : MASTER_ADDR, MASTER_PORT
    t = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(t)
    got, want = int(t.item()), world * (world - 1) // 2
    print(f"rank {rank}/{world}: all_reduce sum {got} (expected {want})", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if got != want:
        print(f"rank {rank} (local {local}): wrong all_reduce sum {got}, expected {want}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
