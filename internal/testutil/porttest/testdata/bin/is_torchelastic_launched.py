#!/usr/bin/env python3
"""Write torch.distributed.is_torchelastic_launched() to --out-file (bin/test_script_is_torchelastic_launched.py)."""
import argparse

import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--out-file", "--out_file")
a = p.parse_args()
with open(a.out_file, "w") as out:
    out.write(f"{dist.is_torchelastic_launched()}")
