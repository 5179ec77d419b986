"""tpurun's worker-side Python module (stdlib only).

In a worker started by tpurun:
    import tpurun
    for r in tpurun.replicas():
        tpurun.report(r, {"loss": 0.1})      # JSON when JSON gives it back unchanged, else pickle
    tpurun.fail(r, exc)                       # an error (type, message, traceback) for replica r

Function mode (xmp.spawn without its traps): ``python3 -m tpurun.fn module:function`` is what ``tpurun --fn``
runs in each worker. ``tpurun.spawn(fn, args, nprocs)`` takes xmp.spawn's parameters, runs the tpurun binary and
returns {ordinal: result}; ``tpurun.run(argv)`` runs any tpurun command line and returns its results document.

JAX: ``tpurun.jax_initialize()`` calls jax.distributed.initialize with the process id, process count and
coordinator that tpurun's environment gives.

Install: ``pip install <tpurun checkout>/worker/python`` (stdlib only, works offline), or put the directory
``tpurun --python-path`` prints on PYTHONPATH.

Importing this module marks the inherited result descriptor non-inheritable, so subprocesses never get it.
"""

from ._wire import ChannelError, channel, protect_fd, replicas_from_env
from ._spawn import (SpawnError, SpawnTimeout, decode_results, load_document, main_reference, run, spawn,
                     target_of)
from ._jax import jax_initialize

__version__ = "0.1.0"

__all__ = ["report", "fail", "replicas", "spawn", "run", "SpawnError", "SpawnTimeout", "ChannelError", "target_of",
           "load_document", "decode_results", "main_reference", "jax_initialize", "__version__"]

protect_fd()


def replicas():
    """The replicas (device ordinals) this worker owns, from TPURUN_REPLICAS."""
    return replicas_from_env()


def report(replica, value):
    """Report value as the result of replica: JSON when JSON gives it back unchanged (same values, same types),
    otherwise pickled (and marked so): a tuple stays a tuple, an int key stays an int."""
    channel().report(replica, value)


def fail(replica, exc):
    """Report exc (an exception) as the failure of replica, with its type, message and traceback."""
    channel().fail(replica, exc)
