"""tpurun's worker-side Python module (stdlib only).

In a worker started by tpurun:
    import tpurun
    tpurun.report({"loss": 0.1})              # this worker's replica (one device per process): JSON when JSON
                                              # gives it back unchanged, else pickle
    for r in tpurun.replicas():               # a worker that owns several replicas says which
        tpurun.report(r, {"loss": 0.1})
    tpurun.fail(exc)                          # an error (type, message, traceback); or tpurun.fail(r, exc)

Function mode (xmp.spawn without its traps): ``python3 -m tpurun.fn module:function`` is what ``tpurun --fn``
runs in each worker. ``tpurun.spawn(fn, args, nprocs)`` takes xmp.spawn's parameters, runs the tpurun binary and
returns {ordinal: result}; ``tpurun.run(argv)`` runs any tpurun command line and returns its results document.

JAX: ``tpurun.jax_initialize()`` calls jax.distributed.initialize with the process id, process count and
coordinator that tpurun's environment gives.

Install: ``make wheel && pip install --no-index dist/tpurun-*.whl`` in a tpurun checkout (the binary and this module
in one wheel), or ``pip install <tpurun checkout>/worker/python`` (this module alone, stdlib only, works offline), or
put the directory ``tpurun --python-path`` prints on PYTHONPATH.

Importing this module marks the inherited result descriptor non-inheritable, so subprocesses never get it.
"""

from ._wire import ChannelError, channel, protect_fd, replicas_from_env
from ._spawn import (SpawnConfigError, SpawnError, SpawnTimeout, decode_results, load_document, main_reference, run,
                     spawn, target_of)
from ._jax import jax_initialize
from ._lock import Lock

# tpurun's one version: the binary's --version (launcher.Version) and the wheel's (make wheel) are this line.
__version__ = "0.2.0"

__all__ = ["report", "fail", "replicas", "spawn", "run", "SpawnError", "SpawnConfigError", "SpawnTimeout",
           "ChannelError", "target_of", "load_document", "decode_results", "main_reference", "jax_initialize", "Lock",
           "__version__"]

protect_fd()


def replicas():
    """The replicas (device ordinals) this worker owns, from TPURUN_REPLICAS."""
    return replicas_from_env()


class _Own:
    """report's and fail's "not given": the replica is this worker's one replica."""

    def __repr__(self):
        return "<not given>"


_OWN = _Own()


def _replica_of(func, replica, what):
    """(replica, what) from report's or fail's arguments: both given, or what alone (given first, or by keyword)
    for the one replica this worker owns."""
    if what is _OWN:
        if replica is _OWN:
            raise TypeError("tpurun.%s() needs the value: tpurun.%s(value) or tpurun.%s(replica, value)"
                            % (func, func, func))
        replica, what = _OWN, replica
    if replica is not _OWN:
        return replica, what
    owned = channel().replicas
    if owned is None or len(owned) != 1:
        raise TypeError("tpurun.%s(value): this worker owns replicas %s (TPURUN_REPLICAS), so say which: "
                        "tpurun.%s(replica, value) for each of tpurun.replicas()"
                        % (func, ",".join(map(str, owned or [])), func))
    return owned[0], what


def report(replica=_OWN, value=_OWN):
    """report(value) or report(replica, value): report value as the result of replica, or of this worker's one
    replica when it owns one (one device per process, the usual case; a worker owning several must say which).
    JSON when JSON gives it back unchanged (same values, same types), otherwise pickled (and marked so): a tuple
    stays a tuple, an int key stays an int, an integer too long for Python's json (over 4300 digits) stays an
    integer."""
    replica, value = _replica_of("report", replica, value)
    channel().report(replica, value)


def fail(replica=_OWN, exc=_OWN):
    """fail(exc) or fail(replica, exc): report exc (an exception) as the failure of replica, or of this worker's
    one replica, with its type, message and traceback."""
    replica, exc = _replica_of("fail", replica, exc)
    channel().fail(replica, exc)
