"""tpurun's worker-side Python module (stdlib only).

In a worker started by tpurun:
    import tpurun
    for r in tpurun.replicas():
        tpurun.report(r, {"loss": 0.1})      # JSON when JSON gives it back unchanged, else pickle
    tpurun.fail(r, exc)                       # an error (type, message, traceback) for replica r

Function mode (xmp.spawn without its traps): ``python3 -m tpurun.fn module:function`` is what ``tpurun --fn``
runs in each worker. ``tpurun.spawn(fn, args, nprocs)`` runs the tpurun binary and returns {ordinal: result}.

Importing this module marks the inherited result descriptor non-inheritable, so subprocesses never get it.
"""

from ._wire import ChannelError, channel, protect_fd, replicas_from_env
from ._spawn import SpawnError, decode_results, load_document, run, spawn, target_of

__all__ = ["report", "fail", "replicas", "spawn", "run", "SpawnError", "ChannelError", "target_of", "load_document",
           "decode_results"]

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
