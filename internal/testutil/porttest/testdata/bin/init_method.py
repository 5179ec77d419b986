#!/usr/bin/env python3
"""gloo all_reduce of a one-hot tensor per rank, initialized with --init-method (env:// or tcp://): the sum is the
world size (PyTorch's bin/test_script_init_method.py does the same)."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--init-method", "--init_method", required=True)
p.add_argument("--world-size", "--world_size", type=int, default=int(os.getenv("WORLD_SIZE", "-1")))
p.add_argument("--rank", type=int, default=int(os.getenv("RANK", "-1")))
a = p.parse_args()
dist.init_process_group(backend="gloo", init_method=a.init_method, world_size=a.world_size, rank=a.rank)
t = F.one_hot(torch.tensor(dist.get_rank()), num_classes=dist.get_world_size())
dist.all_reduce(t)
if torch.sum(t).item() != dist.get_world_size():
    raise RuntimeError(f"world size {dist.get_world_size()}, sum {torch.sum(t).item()}")
print("Done")
