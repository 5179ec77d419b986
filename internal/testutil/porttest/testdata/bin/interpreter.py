#!/usr/bin/env python3
"""Import torch, then write this worker's interpreter (sys.executable) to <dir>/<RANK>: which Python the launcher
ran PROGRAM.py with (torch.distributed.run: os.getenv("PYTHON_EXEC", sys.executable))."""
import os
import sys

import torch.distributed  # noqa: F401  (a Python without torch fails here: ModuleNotFoundError)

with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as out:
    out.write(sys.executable)
