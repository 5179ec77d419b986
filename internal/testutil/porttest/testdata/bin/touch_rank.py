#!/usr/bin/env python3
"""A worker as PyTorch's launcher tests use one (test/distributed/launcher/bin/test_script.py does the same): print
the variables the agent must set, then touch DIR/<RANK>, or raise with --fail. Written for tpurun's port of
those tests; stdlib only."""
import argparse
import os
import pathlib

NEEDED = ["LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
          "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
          "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "TEST_SENTINEL_PARENT", "TORCHELASTIC_ERROR_FILE"]

p = argparse.ArgumentParser()
p.add_argument("--fail", action="store_true")
p.add_argument("--touch-file-dir", "--touch_file_dir", dest="touch_file_dir")
args = p.parse_args()
print("Distributed env vars set by agent:")
for name in NEEDED:
    print(f"{name} = {os.environ[name]}")  # a KeyError fails the worker: the agent did not set it
if args.fail:
    raise RuntimeError("raising exception since --fail flag was set")
f = pathlib.Path(args.touch_file_dir, os.environ["RANK"])
f.touch()
print(f"Success, created {f}")
