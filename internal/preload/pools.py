"""Thread pools of native libraries in the preloaded interpreter (see preload.py): what keeps OpenBLAS's from starting
at import, sizes it in each forked worker as loading it there would have, and names what keeps others from starting.
Run by preload.py by path; stdlib only."""

import ctypes
import os

# OpenBLAS (Debian's libopenblas0-pthread, pip NumPy's copy) starts its thread pool when it is loaded, sized by
# OPENBLAS_NUM_THREADS, else GOTO_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs. So the preloaded imports run with
# OPENBLAS_NUM_THREADS=1 (a pool of no thread), the variable is put back after them, and each worker sizes the pool
# as loading it would have, from its own environment (openblas_set_num_threads, prefixed in NumPy's copy).
BLAS_VAR = "OPENBLAS_NUM_THREADS"
BLAS_VARS = (b"OPENBLAS_NUM_THREADS", b"GOTO_NUM_THREADS", b"OMP_NUM_THREADS")
BLAS_SETTERS = ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads64_")
# What keeps a thread pool from starting at import, by the library that has it: named when a refusal remains.
POOL_VARS = (("libgomp", "OMP_NUM_THREADS=1"), ("libiomp", "OMP_NUM_THREADS=1"), ("libmkl", "MKL_NUM_THREADS=1"),
             ("libblis", "BLIS_NUM_THREADS=1"), ("openblas", "OPENBLAS_NUM_THREADS=1"))


def loaded_libs():
    """The shared libraries mapped into this process, by path."""
    with open("/proc/self/maps") as f:
        return sorted({p[5].strip() for p in (line.split(None, 5) for line in f) if len(p) == 6 and ".so" in p[5]})


def openblas():
    """[(set_num_threads, get_num_procs)] of every OpenBLAS loaded in this process."""
    out = []
    for path in loaded_libs():
        if "openblas" not in path.rsplit("/", 1)[-1]:
            continue
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        for name in BLAS_SETTERS:
            if hasattr(lib, name):
                out.append((getattr(lib, name), getattr(lib, name.replace("set_num_threads", "get_num_procs"), None)))
                break
    return out


def size_openblas(blas, env):
    """Size each OpenBLAS pool of blas as loading it with env would have: the first positive of BLAS_VARS (OpenBLAS
    reads a leading number), else the CPUs, at most the CPUs."""
    want = 0
    for k in BLAS_VARS:
        digits = env.get(k, b"").strip()
        digits = digits[:len(digits) - len(digits.lstrip(b"0123456789"))]
        if digits and int(digits) > 0:
            want = int(digits)
            break
    for setter, procs in blas:
        cpus = procs() if procs is not None else 0
        n = min(want or cpus, cpus or want)
        if n > 1:
            setter(n)


def pool_vars():
    """[(library, VAR=1)] of the thread-pool libraries loaded in this process (POOL_VARS)."""
    names = [path.rsplit("/", 1)[-1] for path in loaded_libs()]
    return [(lib, var) for lib, var in POOL_VARS if any(lib in n for n in names)]
