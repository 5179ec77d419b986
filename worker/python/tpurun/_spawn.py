"""spawn() and run(): the tpurun binary as a subprocess, like xmp.spawn but with the results returned.

spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method='spawn', *, tpurun=None, extra_args=(),
env=None, timeout=None, grace=None, stderr=None) takes torch_xla's xmp.spawn parameters in xmp.spawn's order,
then tpurun's own, keyword-only. See spawn's docstring for what each one does here.
"""

import base64
import codecs
import collections
import difflib
import fcntl
import io
import json
import operator
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

from . import _wire
from ._wire import ENV_FN_ARGS_FILE, ENV_FN_AUTHKEY_FILE, ENV_FN_FUNCTION_FILE, ENV_FN_MAIN, TARGET_ERROR, json_exact

# The start methods multiprocessing (and so xmp.spawn) accepts.
START_METHODS = ("spawn", "fork", "forkserver")

# How long run() waits for tpurun to stop after SIGTERM before it sends SIGKILL: longer than tpurun's own
# --grace (10 s), so tpurun has the time to stop its workers in order and print its document.
DEFAULT_GRACE = 15.0

# Arguments whose JSON is longer than this go in a file, not on tpurun's command line (Linux refuses an argument
# of 128 KiB or more).
MAX_ARGS_JSON = 64 << 10

# How long run() goes on reading tpurun's output after tpurun exited: a descendant that outlived it may hold the
# pipes open.
DRAIN_SECONDS = 5.0

# tpurun's own lines on stderr ("tpurun: ...", "tpurun plan: ...") and how many of the last ones are kept.
_OWN_LINE = re.compile(rb"^tpurun(?: [a-z-]+)?: ")
_OWN_LINES_KEPT = 50


class SpawnError(RuntimeError):
    """A tpurun run failed. root_cause is the explanation, document the results document (None when tpurun printed
    none), exit_code tpurun's exit code, results the results that did arrive, error the first worker error
    ({type, message, traceback}) or None, messages the last lines tpurun itself printed on stderr ("tpurun: ...",
    worker output left out)."""

    def __init__(self, root_cause, document=None, exit_code=None, results=None, error=None, messages=None):
        super().__init__(root_cause)
        self.root_cause = root_cause
        self.document = document
        self.exit_code = exit_code
        self.results = results or {}
        self.error = error
        self.messages = list(messages or [])


class SpawnConfigError(SpawnError, ValueError):
    """tpurun refused the run before starting anything (exit 2: a bad flag, an impossible --nprocs, a malformed
    environment value), or the workers found the function or its arguments unusable before calling it. A
    ValueError too, as xmp.spawn raises for a bad configuration, so `except ValueError` written for xmp.spawn
    catches it; the message carries the reason tpurun printed."""


class SpawnTimeout(SpawnError):
    """tpurun ran past run()'s or spawn()'s timeout and was stopped: SIGTERM, then SIGKILL after the grace period.
    timeout and grace are the seconds that applied; killed says whether SIGKILL was needed."""

    def __init__(self, root_cause, timeout=None, grace=None, killed=False, **kw):
        super().__init__(root_cause, **kw)
        self.timeout = timeout
        self.grace = grace
        self.killed = killed


def main_reference(main=None):
    """What the workers import as __mp_main__, as multiprocessing's spawn start method does: the module name of a
    `python -m module` caller, else the absolute path of the script run as __main__; None for an interactive
    session, `python -c`, or a package's __main__ (which would run the whole program again)."""
    main = sys.modules.get("__main__") if main is None else main
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name:
        if name == "__main__" or name.endswith(".__main__") or name.startswith("tpurun."):
            return None  # a package's __main__ runs the program; tpurun.fn is a worker's runner, not a caller
        return name
    path = getattr(main, "__file__", None)
    if not path or os.path.splitext(os.path.basename(path))[0] == "ipython":
        return None
    path = os.path.abspath(path)
    if not os.path.isfile(path):  # a script read from stdin (`python3 -`: "<stdin>"), or one since removed
        return None
    return path


def target_of(fn):
    """The 'module:qualname' of fn, by which the workers import it; raises ValueError for a function they cannot
    import by name (a lambda, a nested function, one defined in an interactive __main__), before anything runs.
    spawn() sends those by value when cloudpickle is importable."""
    target, problem = _target(fn)
    if problem:
        raise ValueError("spawn(fn): %s %s, which the workers cannot import by name; tpurun.spawn sends it by value "
                         "when cloudpickle is importable, else define it with def at the top level of a module file"
                         % (_dotted(fn), problem))
    return target


def _dotted(fn):
    return "%s.%s" % (getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", "?"))


def _target(fn):
    """(target, problem): fn's 'module:qualname', and why the workers cannot import it by that name (a phrase),
    or None when they can. The target of a function they cannot import is only its name, for messages."""
    if isinstance(fn, str):
        return fn, None
    if not callable(fn):
        raise TypeError("spawn(fn): fn must be a function or a 'module:function' string, got %s" % type(fn).__name__)
    qual = getattr(fn, "__qualname__", None)
    mod = getattr(fn, "__module__", None)
    if not qual or not mod:
        raise ValueError("spawn(fn): %r has no __module__/__qualname__; pass a top-level function" % (fn,))
    if "<lambda>" in qual:
        return mod + ":" + qual, "is a lambda"
    if "<locals>" in qual:
        return mod + ":" + qual, "is a nested function"
    if mod == "__main__":
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        if spec is not None and spec.name and spec.name != "__main__":
            mod = spec.name
        else:
            path = os.path.abspath(main.__file__) if getattr(main, "__file__", None) else None
            if not path or not os.path.isfile(path):  # no file, or "<stdin>"
                return "__main__:" + qual, ("is defined in an interactive __main__ (a notebook, the REPL, a script "
                                            "on stdin or python -c)")
            mod = path
    return mod + ":" + qual, None


def _by_value(fn, problem):
    """fn pickled by value with cloudpickle, for workers that cannot import it by name (problem says why); without
    cloudpickle a ValueError saying what to do."""
    cp = _wire.cloudpickle()
    if cp is None:
        raise ValueError("spawn(fn): %s %s, which the workers cannot import by name. tpurun.spawn sends such a "
                         "function by value with cloudpickle, which is not importable here: `pip install cloudpickle` "
                         "(in the workers' Python too), or define the function with def at the top level of a module "
                         "file" % (_dotted(fn), problem))
    try:
        return cp.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        raise TypeError("spawn(fn): %s %s, which the workers cannot import by name, and cloudpickle cannot pickle it "
                        "by value: %s: %s" % (_dotted(fn), problem, type(e).__name__, e)) from None


def load_document(out):
    """The results document tpurun printed as the last thing on stdout, or None. out is bytes or a bytearray (or
    str).

    The document is the last line; the lines are tried from the end (found with rfind, not by scanning the
    output), and only one that starts with "{" is decoded, from its start to the end of the output, once: a
    document of hundreds of MiB (large results) costs one UTF-8 decode and one JSON decode."""
    if isinstance(out, str):
        out = out.encode("utf-8", "surrogatepass")
    view = memoryview(out)
    end = len(out)
    while end > 0 and out[end - 1] in b" \t\r\n":
        end -= 1
    stop = end
    while stop > 0:
        start = out.rfind(b"\n", 0, stop) + 1
        j = start
        while j < stop and out[j] in b" \t\r":
            j += 1
        if j < stop and out[j] == 0x7B:  # "{"
            doc = _document_at(view[j:end])
            if doc is not None:
                return doc
        stop = start - 1
    return None


def _document_at(view):
    """The results document that view holds (and nothing else but whitespace), or None."""
    try:
        text = str(view, "utf-8")
    except UnicodeDecodeError:
        text = str(view, "utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("results"), list) and "ok" in doc:
        return doc
    return None


class _Unpickler(pickle.Unpickler):
    """Unpickles a worker's result: what the worker's __mp_main__ (the caller's script, imported there) defined is
    this process's __main__, as multiprocessing maps it."""

    def find_class(self, module, name):
        if module == "__mp_main__":
            module = "__main__"
        return super().find_class(module, name)


def _unpickle(data):
    return _Unpickler(io.BytesIO(data)).load()


class _Payload:
    """The payload of one frame of a stream, as the file pickle reads: reads end at its end. A bytes or bytearray
    in the pickle is read from the stream straight into the object that holds it (readinto), with no copy between."""

    def __init__(self, f, n):
        self.f, self.left = f, n

    def read(self, n=-1):
        b = self.f.read(self.left if n is None or n < 0 else min(n, self.left))
        self.left -= len(b)
        return b

    def readinto(self, b):
        n = self.f.readinto(memoryview(b).cast("B")[:self.left])
        self.left -= n
        return n

    def readline(self, size=-1):
        b = self.f.readline(self.left if size is None or size < 0 else min(size, self.left))
        self.left -= len(b)
        return b

    def skip(self):
        while self.left and self.read(1 << 20):
            pass


class _Unframed:
    """In place of a value whose frame could not be unpickled: its error, raised by decode_results for its
    replica."""

    def __init__(self, error):
        self.error = error


class _Lost(Exception):
    """A framed value that never arrived: tpurun's output ended first, or carried something other than a frame."""


def _read_framed(pipe, values, out):
    """Reads tpurun --json-frames's stdout: a result frame per pickled value (worker/PROTOCOL.md), each unpickled
    from the pipe as it comes into values[replica] (or an _Unframed), then the document, read into out."""
    try:
        while True:
            head = pipe.read(_wire.HEADER.size)
            if len(head) < _wire.HEADER.size or head[:4] != _wire.MAGIC:
                out += head  # the document (after a newline) or the end of the output
                break
            _, version, kind, enc, _, replica, n = _wire.HEADER.unpack(head)
            if (version, kind, enc) != (_wire.VERSION, _wire.KIND_RESULT, _wire.ENC_PICKLE):
                values[replica] = _Unframed(_Lost("a frame of version %d, kind %d, encoding %d came in its place"
                                                  % (version, kind, enc)))
                break
            payload = _Payload(pipe, n)
            try:
                values[replica] = _Unpickler(payload).load()
                if payload.left:
                    raise pickle.UnpicklingError("the pickle ended %d bytes before its frame" % payload.left)
            except BaseException as e:  # SystemExit from a __setstate__ too: the document must still be read
                values[replica] = _Unframed(e)
            payload.skip()
    except OSError:
        pass
    _read_all(pipe, out)


def _importing():
    """Whether this thread is importing a module (spawn called at a module's top level): it then holds that
    module's import lock, which the thread that unpickles framed values would wait for (a class of that module)
    while this thread waits for tpurun, which waits for the frames to be read."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_globals.get("__name__") == "importlib._bootstrap":  # frozen or not
            return True
        f = f.f_back
    return False


def _decode_one(r, framed=None):
    if r.get("framed"):
        v = (framed or {}).get(r.get("replica"), _Unframed(_Lost("tpurun's output carried no frame for it")))
        if isinstance(v, _Unframed):
            raise v.error
        return v
    if r.get("encoding") == "pickle":
        return _unpickle(base64.b64decode(r["value_b64"]))
    return r.get("value")


def decode_results(doc, framed=None):
    """{replica: value} of the successful results of a document, unpickling values marked as pickle (a class of
    the worker's __mp_main__ is looked up in this process's __main__); a result marked "framed" (tpurun
    --json-frames) takes its value from framed, {replica: value} as read from the frames before the document.
    Raises SpawnError naming the replica when a pickled value cannot be unpickled here."""
    out = {}
    for r in doc.get("results") or []:
        if not r.get("ok"):
            continue
        try:
            out[r["replica"]] = _decode_one(r, framed)
        except _Lost as e:
            raise SpawnError("the result of replica %s (rank %s, pid %s) was lost on its way from tpurun: %s"
                             % (r.get("replica"), r.get("rank"), r.get("pid"), e),
                             document=doc, exit_code=doc.get("exit_code"), results=out) from None
        except Exception as e:
            raise SpawnError("the result of replica %s (rank %s, pid %s) was pickled by the worker but cannot be "
                             "unpickled in this process: %s: %s; make its class importable here (define it in a "
                             "module both import, or in the script that calls spawn)"
                             % (r.get("replica"), r.get("rank"), r.get("pid"), type(e).__name__, e),
                             document=doc, exit_code=doc.get("exit_code"), results=out) from e
    return out


def _decode_some(doc, framed=None):
    """decode_results, keeping what decodes: for the results attached to a SpawnError."""
    out = {}
    for r in doc.get("results") or []:
        if r.get("ok"):
            try:
                out[r["replica"]] = _decode_one(r, framed)
            except Exception:
                pass
    return out


def root_cause(doc, exit_code):
    """(message, first error) explaining why a run failed, from its document."""
    errs = sorted((r for r in doc.get("results") or [] if not r.get("ok") and r.get("error")),
                  key=lambda r: r.get("replica", 0))
    if errs:
        r = errs[0]
        e = r["error"]
        msg = "replica %s (rank %s, pid %s) raised %s: %s" % (
            r.get("replica"), r.get("rank"), r.get("pid"), e.get("type"), e.get("message"))
        if e.get("traceback"):
            msg += "\n" + e["traceback"].rstrip()
        return msg, e
    vs = doc.get("violations") or []
    if vs:
        parts = []
        for v in vs:
            s = "%s: %s" % (v.get("kind"), v.get("message"))
            if v.get("hint"):
                s += " (hint: %s)" % v["hint"]
            parts.append(s)
        return "; ".join(parts), None
    failed = [rk for rk in doc.get("ranks") or [] if rk.get("signal") or rk.get("exit_code")]
    # tpurun exits with the first failure's status: name that rank, not one stopped because of it.
    rk = next((rk for rk in failed if rk.get("exit_code") == exit_code), failed[0] if failed else None)
    if rk is not None:
        if rk.get("signal"):
            return "rank %s (pid %s) was killed by %s" % (rk.get("rank"), rk.get("pid"), rk["signal"]), None
        msg = "rank %s (pid %s) exited with code %s" % (rk.get("rank"), rk.get("pid"), rk["exit_code"])
        if rk.get("error"):
            msg += ": " + rk["error"]
        return msg, None
    return "tpurun exited with code %s" % (exit_code,), None


# The file of this copy of the module that names the tpurun binary that installed it (`tpurun --python-path` writes
# it: pymodule.BinaryFile); a copy pip installed has none.
BINARY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_binary")


def installed_binary():
    """The absolute path of the tpurun binary that installed this copy of the module (`tpurun --python-path`), or
    None for a copy without one (pip install)."""
    try:
        with open(BINARY_FILE, "rb") as f:
            path = os.fsdecode(f.read())
    except OSError:
        return None
    return path if os.path.isabs(path) else None


# The variable run() sets for tpurun to the calling interpreter (sys.executable), which the workers run unless
# --python or $PYTHON_EXEC names another (Go: worker.EnvCallerPython; spec.ResolvePython owns the rule).
ENV_CALLER_PYTHON = "TPURUN_CALLER_PYTHON"


def _executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def wheel_binary():
    """The tpurun binary the wheel (`make wheel`) installed beside this copy of the module: in the scripts directory
    of the install scheme whose site-packages holds it (a venv's bin/, ~/.local/bin for --user), or None."""
    import sysconfig  # here: importing it costs every worker that imports tpurun
    site = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    schemes = [sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else None]
    user = os.name + "_user"
    if user in sysconfig.get_scheme_names():
        schemes.append(user)
    for scheme in schemes:
        paths = sysconfig.get_paths(scheme) if scheme else sysconfig.get_paths()
        libs = {os.path.realpath(paths[k]) for k in ("purelib", "platlib") if paths.get(k)}
        path = os.path.join(paths.get("scripts", ""), "tpurun")
        if os.path.realpath(site) in libs and _executable(path):
            return path
    return None


def find_binary(tpurun=None):
    """The tpurun binary run() and spawn() start: tpurun= when given, else $TPURUN, else the binary that installed
    this copy of the module (PYTHONPATH from `tpurun --python-path`) while it is there, else the binary the same
    wheel installed (`pip install dist/tpurun-*.whl`: the venv's bin/tpurun), else tpurun on PATH."""
    path = tpurun or os.environ.get("TPURUN")
    if path:
        return path
    installed = installed_binary()
    if _executable(installed):
        return installed
    path = wheel_binary() or shutil.which("tpurun")
    if path:
        return path
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if installed:
        copy = "this copy of the module (%s) was installed by %s, which is no longer there" % (here, installed)
    else:
        copy = ("this copy of the module (%s) names no binary and no tpurun is installed beside it (the module "
                "alone: pip install worker/python, or a checkout)" % here)
    raise FileNotFoundError(
        "tpurun: the tpurun binary was not found: no tpurun= argument, TPURUN is not set, %s, and no tpurun is on "
        "PATH (%s). Install both halves: `make wheel && pip install --no-index dist/tpurun-*.whl`, or pass "
        "tpurun='/path/to/tpurun', or `export TPURUN=/path/to/tpurun`, or `export PATH=/dir/of/tpurun:$PATH`, or use "
        "the binary's own copy of this module: `export PYTHONPATH=$(/path/to/tpurun --python-path)`"
        % (copy, os.environ.get("PATH", "")))


_SPAWN_KEYWORDS = ("fn", "args", "nprocs", "join", "daemon", "start_method", "tpurun", "extra_args", "env", "timeout",
                   "grace", "stderr", "verbose")


def _refuse_unknown(func, unknown, known):
    parts = []
    for k in sorted(unknown):
        near = difflib.get_close_matches(k, known, n=1)
        parts.append("%r (did you mean %r?)" % (k, near[0]) if near else repr(k))
    raise TypeError("%s() got unexpected keyword argument%s %s; it takes %s"
                    % (func, "s" if len(parts) > 1 else "", ", ".join(parts), ", ".join(known)))


def _pickle_args(args, dumps=pickle.dumps):
    try:
        return dumps(args, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        pass
    for i, a in enumerate(args):  # name the argument that cannot be pickled
        try:
            dumps(a, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise TypeError("spawn: args[%d] (a %s) can be neither passed as JSON nor pickled: %s: %s"
                            % (i, type(a).__name__, type(e).__name__, e)) from None
    raise TypeError("spawn: args cannot be pickled")


def _write_private(path, data):
    """Write data to a new file at path that only this user can read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _fork_preload(main, target):
    """What the preloaded interpreter of start_method='fork' imports: the caller's main module (as __mp_main__,
    where the imports of a script are) and the module of the target when it is another importable module."""
    out = ["__main__"] if main else []
    mod = target.partition(":")[0]
    if mod != main and mod != "__main__" and not mod.endswith(".py") and os.sep not in mod:
        out.append(mod)
    return out


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn", *, tpurun=None, extra_args=(),
          env=None, timeout=None, grace=None, stderr=None, verbose=False, **unknown):
    """Run fn(index, *args) in one process per device under tpurun; return {ordinal: result}.

    The parameters up to start_method are torch_xla's xmp.spawn's, in its order, so a call written for xmp.spawn
    works unchanged (positionally too); the rest are keyword-only:

    fn           a top-level function (found by import path in the workers) or a 'module:function' string. A
                 function defined in the script run as __main__ is found: the workers import that script (or the
                 `python -m` module) as __mp_main__, as multiprocessing's spawn does. One they cannot import by
                 name (a lambda, a nested function, one defined in a notebook, the REPL or a script on stdin) is
                 sent by value with cloudpickle, and its arguments with it, when cloudpickle is importable (it is
                 then needed in the workers' Python too); without it such a function is a ValueError.
    args         passed after index: as JSON when JSON carries them unchanged, else pickled (an argparse
                 Namespace, tuples, objects arrive as they were sent).
    nprocs       --nprocs; None lets tpurun use every device, as xmp.spawn does.
    join, daemon accepted as xmp.spawn accepts them under PJRT, where they have no effect: spawn always waits for
                 the workers and returns their results; join=False or daemon=True warns that it has no effect.
    start_method 'spawn', 'fork' or 'forkserver' (anything else is a ValueError, as in multiprocessing). 'spawn'
                 and 'forkserver': every worker is a fresh interpreter. 'fork': a safe fork: tpurun's preloaded
                 interpreter (tpurun --preload) imports this script as __mp_main__ (and fn's module) once, proves
                 that it holds no thread, device or initialized runtime, and forks every worker from it, so the
                 imports at the top of the script are paid once; this process itself is never forked, so state
                 it built before the call is not inherited. An import that starts a thread or opens a device is
                 refused (SpawnConfigError, exit code 2) naming it: import it inside fn, or use 'spawn'.
    tpurun       path of the binary (default $TPURUN, then the binary whose `tpurun --python-path` gave this
                 copy of the module, then the one the wheel installed beside it, then PATH: find_binary).
    extra_args   more tpurun flags, e.g. ['--grace', '30s'].
    env          the environment for tpurun and the workers (default os.environ).
    timeout      seconds; past it tpurun is stopped (see run) and SpawnTimeout raised.
    grace        seconds between SIGTERM and SIGKILL when stopping tpurun (default 15).
    stderr       None (the default): the workers' stdout goes to this process's sys.stdout, their stderr and
                 tpurun's own lines to sys.stderr, as they come (in a notebook, the cell's output and its stderr
                 stream); tpurun writes the results on a pipe of their own (tpurun --json-fd). A file object, a file
                 descriptor or subprocess.DEVNULL: all of it goes there, as with run.
    verbose      tpurun's own lines (its start, each attempt's summary) on success too; by default, as xmp.spawn,
                 only the workers' output and, when something fails, tpurun's report (see run).

    Any other keyword is a TypeError naming it. A result whose class the worker's __mp_main__ defined is
    unpickled with this process's __main__. On failure it raises SpawnError carrying the root cause: a worker's
    exception with its traceback (shown once: in this error, not in tpurun's report), a contract violation, or,
    as SpawnConfigError (a ValueError too, as xmp.spawn raises), the reason tpurun printed for a configuration
    error.

    A lock shared by the workers: pass multiprocessing.Manager().Lock() in args as with xmp.spawn (the workers
    get this process's multiprocessing authkey with the pickled arguments, so its proxy connects), or
    tpurun.Lock(), a file lock that needs no manager process. Both work for the workers of one host."""
    if _wire.importing_main:
        raise RuntimeError("tpurun.spawn() was called while a worker imported the caller's main module (as "
                           "__mp_main__, as multiprocessing does): the script calls spawn() at import time. Guard "
                           "its entry point with `if __name__ == \"__main__\":`, or every worker would start the "
                           "whole run again")
    if unknown:
        _refuse_unknown("spawn", unknown, _SPAWN_KEYWORDS)
    if start_method not in START_METHODS:
        raise ValueError("spawn: start_method=%r: cannot find context for %r; use one of %s"
                         % (start_method, start_method, ", ".join(START_METHODS)))
    if not join:
        warnings.warn("tpurun.spawn: join=False has no effect (as in xmp.spawn under PJRT): spawn waits for the "
                      "workers and returns their results; call it from a thread to go on meanwhile",
                      RuntimeWarning, stacklevel=2)
    if daemon:
        warnings.warn("tpurun.spawn: daemon=True has no effect: tpurun stops every worker when the run ends, and "
                      "when this process dies", RuntimeWarning, stacklevel=2)
    target, problem = _target(fn)
    fn_pickle = _by_value(fn, problem) if problem else None
    if nprocs is not None:
        try:
            nprocs = operator.index(nprocs)
        except TypeError:
            raise TypeError("spawn: nprocs must be an int or None, got %s" % type(nprocs).__name__) from None
    try:
        args = tuple(args)
    except TypeError:
        raise TypeError("spawn: args must be a tuple (or another sequence) of arguments, got %s"
                        % type(args).__name__) from None
    run_env = dict(os.environ if env is None else env)
    run_env.pop(ENV_FN_ARGS_FILE, None)
    run_env.pop(ENV_FN_AUTHKEY_FILE, None)
    run_env.pop(ENV_FN_MAIN, None)
    run_env.pop(ENV_FN_FUNCTION_FILE, None)
    main = main_reference()
    if main:
        run_env[ENV_FN_MAIN] = main
    argv = []
    if nprocs is not None:
        argv += ["--nprocs", str(nprocs)]
    argv += list(extra_args)
    if start_method == "fork":
        preload = _fork_preload(main, target)
        if preload:
            argv += ["--preload", ",".join(preload)]
    argv += ["--fn", target]
    args_json = None
    if json_exact(list(args)):
        args_json = json.dumps(list(args), allow_nan=False)
        if len(args_json) > MAX_ARGS_JSON:
            args_json = None
    tmpdir = None
    try:
        if fn_pickle is not None:
            tmpdir = tempfile.mkdtemp(prefix="tpurun-args-")  # mode 0700: only this user can reach the file
            path = os.path.join(tmpdir, "function.pickle")
            _write_private(path, fn_pickle)
            run_env[ENV_FN_FUNCTION_FILE] = path
        if args_json is not None:
            argv += ["--fn-args-json", args_json]
        else:
            # With the function by value, its arguments too: what it defined beside it (a class) has no name either.
            data = _pickle_args(args, _wire.cloudpickle().dumps if fn_pickle is not None else pickle.dumps)
            tmpdir = tmpdir or tempfile.mkdtemp(prefix="tpurun-args-")
            path = os.path.join(tmpdir, "args.pickle")
            _write_private(path, data)
            run_env[ENV_FN_ARGS_FILE] = path
            # The workers take this process's multiprocessing authkey, as multiprocessing's children do, so that
            # a Manager() proxy among the arguments (xmp.spawn's `args=(Manager().Lock(),)`) can connect.
            import multiprocessing  # here: importing it costs every worker that imports tpurun
            key_path = os.path.join(tmpdir, "authkey")
            _write_private(key_path, bytes(multiprocessing.current_process().authkey))
            run_env[ENV_FN_AUTHKEY_FILE] = key_path
        # Values as frames, unpickled as they come by the thread that reads them; from a module being imported, in
        # the document (base64), decoded here once tpurun has exited (_importing).
        framed = None if _importing() else {}
        doc = _run(argv, tpurun, run_env, timeout, stderr, grace, verbose, framed, own_stdout=stderr is None)
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return decode_results(doc, framed)


def _sink(stderr, default="stderr"):
    """A function that writes bytes where stderr (run's parameter) says, or None to discard them; stderr None: to
    sys.<default> as it is when each piece comes (a notebook replaces it per cell), text streams through one
    incremental decoder, so that a character cut between two reads arrives whole."""
    if stderr == subprocess.DEVNULL:
        return None
    if stderr is None:
        text = codecs.getincrementaldecoder("utf-8")("replace")

        def write(b):
            s = getattr(sys, default)
            if s is None:
                return
            buf = getattr(s, "buffer", None)
            if buf is not None:
                _flush(s)
                buf.write(b)
                _flush(buf)
            else:
                s.write(text.decode(b))
                _flush(s)
        return write
    if isinstance(stderr, int):
        def write(b):
            view = memoryview(b)
            while view:
                view = view[os.write(stderr, view):]
        return write

    def write(b):
        try:
            stderr.write(b)
        except TypeError:
            stderr.write(b.decode("utf-8", "replace"))
        _flush(stderr)
    return write


def _flush(stream):
    """Flushes stream when it can be flushed: a writer that replaced sys.stdout may have write alone."""
    flush = getattr(stream, "flush", None)
    if flush is not None:
        flush()


class _Stderr:
    """Forwards tpurun's stderr as it comes (tpurun's report and, with --json, the workers' output) and keeps the
    last lines tpurun itself printed ("tpurun: ..."), for the SpawnError of a run that failed before its
    document. A stalled destination stalls this reader only: the caller's timeout still fires."""

    def __init__(self, pipe, sink):
        self.pipe = pipe
        self.sink = sink
        self.own = collections.deque(maxlen=_OWN_LINES_KEPT)
        self.partial = b""
        self.sink_error = None

    def run(self):
        fd = self.pipe.fileno()
        try:
            while True:
                b = os.read(fd, 1 << 16)
                if not b:
                    break
                self._scan(b)
                if self.sink is not None and self.sink_error is None:
                    try:
                        self.sink(b)
                    except Exception as e:  # a closed or odd destination: keep reading, stop writing
                        self.sink_error = e
        except OSError:
            pass
        finally:
            self._line(self.partial)
            self.pipe.close()

    def _scan(self, b):
        lines = (self.partial + b).split(b"\n")
        self.partial = lines.pop()[:4096]  # the start of a line is all the match needs
        for line in lines:
            self._line(line)

    def _line(self, line):
        if _OWN_LINE.match(line):
            self.own.append(line.rstrip(b"\r").decode("utf-8", "replace"))


def _forward(pipe, sink):
    """Copies pipe (a raw or buffered reader) to sink as it comes, until its end, and closes it: tpurun's stdout when
    the document comes on a pipe of its own (spawn's default). A failed sink stops the writing, not the reading, so
    that tpurun never blocks on a pipe nobody reads."""
    fd = pipe.fileno()
    try:
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            if sink is not None:
                try:
                    sink(b)
                except Exception:  # whatever the caller's stream raises: keep reading, so tpurun never blocks
                    sink = None
    except OSError:
        pass
    finally:
        pipe.close()


def _read_all(pipe, out):
    """Reads pipe (a buffered reader) to its end into out, a bytearray, and closes it: out grows in place (realloc,
    no copy of what it holds), so a document of hundreds of MiB is in memory once, not as chunks and then joined."""
    try:
        while True:
            b = pipe.read1(1 << 16)  # what the reader holds (after the frames), then one read of the pipe
            if not b:
                break
            out += b
    except OSError:
        pass
    finally:
        pipe.close()


def _positive(name, v, default=None):
    if v is None:
        return default
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise TypeError("run: %s must be a number of seconds, got %r" % (name, v)) from None
    if not v >= 0:
        raise ValueError("run: %s=%r must be at least 0 seconds" % (name, v))
    return v


def _stop(proc, grace):
    """SIGTERM, up to grace seconds for tpurun to stop its workers and exit, then SIGKILL (its workers die with
    it: tpurun starts them with a parent-death signal). Returns whether SIGKILL was needed."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace)
        return False
    except subprocess.TimeoutExpired:
        pass
    finally:  # also when a second Ctrl-C lands in the grace period: it propagates once tpurun is gone
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return True


def run(argv, tpurun=None, env=None, timeout=None, stderr=None, grace=None, verbose=False):
    """Run `tpurun --json --exit-with-parent --quiet ARGV...` as a subprocess and return its results document (a dict).

    For orchestrators such as a Ray actor on each host: no TTY, no stdin, callable from any thread, nothing that
    depends on being a session leader. stdout carries only the document; tpurun's report and the workers' output
    go to stderr, forwarded as they come to this process's sys.stderr, or to stderr= (a file object, a file
    descriptor, or subprocess.DEVNULL). --exit-with-parent makes tpurun stop its workers if this process dies.
    The workers run this interpreter (sys.executable, passed as $TPURUN_CALLER_PYTHON) unless --python or
    $PYTHON_EXEC names another. --quiet keeps tpurun's own lines for a failure (its warnings and errors, the
    summary of an attempt that did not end well): a run that succeeds prints only what the workers print, as under
    xmp.spawn; verbose=True drops it.

    timeout (seconds) bounds the whole run: past it tpurun gets SIGTERM (it stops its workers within its --grace),
    then SIGKILL after grace seconds (default 15, more than tpurun's own 10 s), and SpawnTimeout is raised with
    whatever document tpurun printed. An exception in this thread while it waits (KeyboardInterrupt) stops tpurun
    the same way before it propagates, so nothing is left running.

    On a non-zero exit, or a document that is not ok, it raises SpawnError with the root cause, the exit code, the
    document and tpurun's own messages: a configuration error (exit 2) is a SpawnConfigError, a ValueError too,
    carrying the reason tpurun printed."""
    return _run(argv, tpurun, env, timeout, stderr, grace, verbose, None)


def _run(argv, tpurun, env, timeout, stderr, grace, verbose, framed, own_stdout=False):
    """run; with framed (a dict), as tpurun --json-frames: each pickled value comes before the document as a frame,
    unpickled from the pipe into framed[replica] as it comes (what spawn does: no base64 in JSON to decode). With
    own_stdout, the document (and the frames) come on a pipe of their own (tpurun --json-fd) and tpurun's stdout,
    the workers' stdout, is forwarded to sys.stdout."""
    timeout = _positive("timeout", timeout)
    grace = _positive("grace", grace, DEFAULT_GRACE)
    json_flag = "--json" if framed is None else "--json-frames"
    env = dict(os.environ if env is None else env)
    if sys.executable:  # the workers' interpreter, unless --python or $PYTHON_EXEC names one (as xmp.spawn's children)
        env[ENV_CALLER_PYTHON] = sys.executable
    flags = [json_flag, "--exit-with-parent"] + ([] if verbose else ["--quiet"])
    doc_r = doc_w = None
    if own_stdout:
        doc_r, w = os.pipe()
        try:
            # from 3 up: with this process's stdin or stdout closed the pipe takes 0 or 1, which tpurun's own
            # standard streams would cover
            doc_w = fcntl.fcntl(w, fcntl.F_DUPFD_CLOEXEC, 3)
        except BaseException:
            os.close(doc_r)
            raise
        finally:
            os.close(w)
        flags += ["--json-fd", str(doc_w)]
    cmd = [find_binary(tpurun)] + flags + list(argv)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                pass_fds=() if doc_w is None else (doc_w,))
    except BaseException:
        if doc_r is not None:
            os.close(doc_r)
        raise
    finally:
        if doc_w is not None:
            os.close(doc_w)  # tpurun holds it now: the end of file comes when tpurun exits
    out = bytearray()
    err = _Stderr(proc.stderr, _sink(stderr))
    doc_pipe = proc.stdout if doc_r is None else open(doc_r, "rb")
    read = (_read_all, (doc_pipe, out)) if framed is None else (_read_framed, (doc_pipe, framed, out))
    readers = [threading.Thread(target=read[0], args=read[1], name="tpurun-document", daemon=True),
               threading.Thread(target=err.run, name="tpurun-stderr", daemon=True)]
    if doc_r is not None:
        readers.append(threading.Thread(target=_forward, args=(proc.stdout, _sink(None, "stdout")),
                                        name="tpurun-stdout", daemon=True))
    for t in readers:
        t.start()
    timed_out = killed = False
    started = time.monotonic()
    try:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            killed = _stop(proc, grace)
    except BaseException:
        _stop(proc, grace)
        raise
    elapsed = time.monotonic() - started
    deadline = time.monotonic() + DRAIN_SECONDS
    for t in readers:
        t.join(max(0.0, deadline - time.monotonic()))
    doc = load_document(out)
    code = proc.returncode
    messages = list(err.own)
    results = {}
    if doc is not None and (timed_out or code != 0 or not doc.get("ok", False)):  # a success decodes them once: spawn
        results = _decode_some(doc, framed)
    if timed_out:
        how = ("it did not exit within grace=%gs of SIGTERM, so it was killed with SIGKILL" % grace if killed
               else "it stopped on SIGTERM and exited with code %d" % code)
        msg = "%s (pid %d) ran past timeout=%gs and was stopped: %s" % (cmd[0], proc.pid, timeout, how)
        if doc is not None:
            msg += "; %d result(s) had arrived" % len(results)
        raise SpawnTimeout(msg, timeout=timeout, grace=grace, killed=killed, document=doc, exit_code=code,
                           results=results, messages=messages)
    if doc is None:
        if code == 2:
            msg = ("%s refused the run with exit code 2 (a usage or configuration error) and printed no results "
                   "document" % cmd[0])
        else:
            msg = "%s exited with code %d after %.1fs and printed no results document %s" % (
                cmd[0], code, elapsed, "on stdout" if doc_r is None else "on its results pipe (--json-fd)")
        if messages:
            msg += ": " + " | ".join(messages)
        else:
            msg += "; its stderr says why"
        raise (SpawnConfigError if code == 2 else SpawnError)(msg, exit_code=code, messages=messages)
    if code != 0 or not doc.get("ok", False):
        msg, first = root_cause(doc, code)
        unusable = code == 2 and first is not None and first.get("type") == TARGET_ERROR
        raise (SpawnConfigError if unusable else SpawnError)(msg, document=doc, exit_code=code, results=results,
                                                             error=first, messages=messages)
    return doc
