"""Function mode: ``python3 -m tpurun.fn [--args-json JSON] module:function [ARG...]``.

This is what ``tpurun --fn module:function`` runs in every worker. For each replica the worker owns
(TPURUN_REPLICAS, in order) it calls ``function(index, *args)`` with index the replica's global ordinal (as
xmp.spawn passes it), and reports the return value on the result channel: JSON when JSON gives it back
unchanged (same values and types all the way down), otherwise pickled (and marked so).

``args`` is the JSON list given by ``--args-json`` (or, when absent, the TPURUN_FN_ARGS_JSON environment
variable), or the pickled tuple in the file TPURUN_FN_ARGS_FILE names (what spawn() passes when JSON would not
carry its arguments unchanged), followed by the remaining command-line ARGs as strings.

TPURUN_FN_MAIN names the caller's main module (spawn() sets it, as multiprocessing's spawn start method passes
it): the absolute path of the script the caller ran, or the name of the module it ran with ``python -m``. It is
imported first, as ``__mp_main__`` (its ``if __name__ == "__main__"`` block does not run), and becomes
``__main__`` too, so functions, classes and pickled arguments defined in the caller's script are found.

TPURUN_FN_FUNCTION_FILE names a private file holding the function itself, pickled by value with cloudpickle
(spawn() writes it for a function the workers cannot import by name: a lambda, a nested function, one defined in
a notebook or a script on stdin); the target is then only the function's name, for messages.

TPURUN_FN_AUTHKEY_FILE names a private file holding the caller's multiprocessing authkey (spawn() writes it
with pickled arguments, as multiprocessing hands its authkey to the children it starts): it becomes this
process's authkey before the arguments are unpickled, so a ``multiprocessing.Manager()`` proxy among them (the
``Manager().Lock()`` of xmp.spawn's examples) connects to the caller's manager. These variables are removed from
the environment before the function runs, so programs it starts never see them.

Exit codes:
  0  every owned replica reported its value
  1  the function raised: an error frame (type, message, traceback) for that replica; later replicas are not run
  2  the target is unusable, found BEFORE anything is called: a missing module or attribute, an import that
     raises, a nested function (``<locals>`` in __qualname__), a lambda, something not callable, or bad
     arguments. Each owned replica gets an error frame of type ``tpurun.TargetError``.
"""

import importlib
import importlib.machinery
import importlib.util
import json
import os
import pickle
import runpy
import stat
import sys
import traceback
import types

from . import _wire

ENV_ARGS = _wire.ENV_FN_ARGS_JSON
ENV_ARGS_FILE = _wire.ENV_FN_ARGS_FILE
ENV_MAIN = _wire.ENV_FN_MAIN
ENV_AUTHKEY_FILE = _wire.ENV_FN_AUTHKEY_FILE
ENV_FUNCTION_FILE = _wire.ENV_FN_FUNCTION_FILE
TARGET_ERROR = _wire.TARGET_ERROR
USAGE = "usage: python3 -m tpurun.fn [--args-json JSON] module:function [ARG...]"
MAIN_NAME = "__mp_main__"


class TargetError(Exception):
    """The function cannot be used; raised before anything is called."""

    def __init__(self, message, tb=""):
        super().__init__(message)
        self.tb = tb


# What load_main imported as __mp_main__: ("path", absolute path) or ("name", module name), or None.
_main_ref = None


def load_main(ref):
    """Import the caller's main module as __mp_main__ and make it __main__ too, as multiprocessing's spawn does:
    ref is an absolute file path or a module name (TPURUN_FN_MAIN); empty does nothing."""
    global _main_ref
    ref = ref.strip()
    if not ref:
        return None
    key = ("path", ref) if os.path.isabs(ref) else ("name", ref)
    pre = _wire.preloaded_main
    if pre is not None and pre[0] == key:  # a worker forked from the interpreter that imported it (--preload)
        _main_ref = key
        sys.modules[MAIN_NAME] = sys.modules["__main__"] = pre[1]
        return pre[1]
    _wire.importing_main = True
    try:
        if os.path.isabs(ref):
            if not os.path.isfile(ref):
                raise TargetError("%s=%s: the caller's main script does not exist on this host; run the workers "
                                  "where the script is, at the same path" % (ENV_MAIN, ref))
            module = _exec_file(ref, "the caller's main script %s" % ref)
            _main_ref = ("path", ref)
        else:
            try:
                content = runpy.run_module(ref, run_name=MAIN_NAME, alter_sys=True)
            except ImportError as e:
                raise TargetError("%s=%s: the caller's main module cannot be imported here (%s: %s); make it "
                                  "importable in the workers (run tpurun from the directory that holds it, or set "
                                  "PYTHONPATH)" % (ENV_MAIN, ref, type(e).__name__, e),
                                  traceback.format_exc()) from None
            except Exception as e:
                raise TargetError("importing the caller's main module %s (as %s) raised %s: %s"
                                  % (ref, MAIN_NAME, type(e).__name__, e), traceback.format_exc()) from None
            module = types.ModuleType(MAIN_NAME)
            module.__dict__.update(content)
            _main_ref = ("name", ref)
    finally:
        _wire.importing_main = False
    sys.modules[MAIN_NAME] = sys.modules["__main__"] = module
    return module


def _exec_file(path, what, name=MAIN_NAME):
    """Execute the Python file at path as module name (whatever its suffix) and return it."""
    sys.path.insert(0, os.path.dirname(path))
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except Exception as e:
        raise TargetError("importing %s raised %s: %s" % (what, type(e).__name__, e),
                          traceback.format_exc()) from None
    return module


def _load_module(mod):
    if mod.endswith(".py") or os.sep in mod:
        path = os.path.abspath(mod)
        if _main_ref == ("path", path):
            return sys.modules[MAIN_NAME]
        if not os.path.isfile(path):
            raise TargetError("module file %s does not exist" % path)
        # A file target is __mp_main__, unless the caller's main module already is.
        return _exec_file(path, path, MAIN_NAME if _main_ref is None else "__tpurun_fn_target__")
    if _main_ref == ("name", mod):
        return sys.modules[MAIN_NAME]
    try:
        return importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name and (mod == e.name or mod.startswith(e.name + ".")):
            raise TargetError("no module named %r (sys.path: %s); make it importable in the workers "
                              "(install it or run tpurun from the directory that holds it / set PYTHONPATH)"
                              % (e.name, os.pathsep.join(sys.path)), traceback.format_exc()) from None
        raise TargetError("importing %s raised ModuleNotFoundError: %s" % (mod, e), traceback.format_exc()) from None
    except Exception as e:
        raise TargetError("importing %s raised %s: %s" % (mod, type(e).__name__, e),
                          traceback.format_exc()) from None


def _check_qualname(target, qual):
    problem = _wire.qualname_problem(qual)
    if problem:
        raise TargetError("%s %s" % (target, problem))


def resolve(target):
    """Return the callable named by 'module:qualname', or raise TargetError without calling anything."""
    mod, sep, qual = target.partition(":")
    if not sep or not mod or not qual:
        raise TargetError("target %r: want module:function (e.g. train:main or pkg.mod:Class.method)" % target)
    _check_qualname(target, qual)
    obj = _load_module(mod)
    walked = []
    for part in qual.split("."):
        walked.append(part)
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError("module %s has no attribute %r (looked up %s); check the spelling and that it "
                              "is defined at module level" % (mod, ".".join(walked), target)) from None
    if not callable(obj):
        raise TargetError("%s is a %s, not a function" % (target, type(obj).__name__))
    _check_qualname(target, getattr(obj, "__qualname__", qual))
    return obj


def parse_args(argv, environ):
    """(target, JSON arguments, extra string arguments) from the command line, or TPURUN_FN_ARGS_JSON."""
    raw = None
    rest = list(argv)
    if rest and rest[0] == "--args-json":
        if len(rest) < 2:
            raise TargetError("--args-json needs a value. " + USAGE)
        raw, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith("--args-json="):
        raw, rest = rest[0].split("=", 1)[1], rest[1:]
    if not rest:
        raise TargetError("no target given. " + USAGE)
    target, extra = rest[0], rest[1:]
    source = "--args-json"
    if raw is None:
        raw, source = environ.get(ENV_ARGS, ""), ENV_ARGS
    args = []
    if raw.strip():
        try:
            args = json.loads(raw)
        except ValueError as e:
            raise TargetError("%s=%r is not JSON: %s" % (source, raw[:200], e)) from None
        if not isinstance(args, list):
            raise TargetError("%s must be a JSON list of arguments, got %s" % (source, type(args).__name__))
    return target, args, extra


def _read_private(path, var, what):
    """The bytes of the file at path (named by variable var), which must be a regular file of this user that
    nobody else can write: what it holds is trusted (unpickled, or a key)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise TargetError("%s=%s: cannot open %s (%s); they are written by spawn() and removed when it returns"
                          % (var, path, what, e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise TargetError("%s=%s: refusing to read %s from it: want a regular file owned by uid %d that only "
                              "its owner can write, found mode %o owned by uid %d"
                              % (var, path, what, os.getuid(), st.st_mode, st.st_uid))
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return b"".join(chunks)


def load_authkey_file(path):
    """Make the caller's multiprocessing authkey, which spawn() wrote to path, this process's, as multiprocessing
    hands it to the children it starts: a multiprocessing.Manager() proxy in the arguments (a Manager().Lock(), as
    in xmp.spawn's examples) then connects to the caller's manager instead of failing with AuthenticationError."""
    key = _read_private(path, ENV_AUTHKEY_FILE, "the caller's multiprocessing authkey")
    if not key:
        raise TargetError("%s=%s is empty; want the caller's multiprocessing authkey" % (ENV_AUTHKEY_FILE, path))
    import multiprocessing
    multiprocessing.current_process().authkey = key


def load_args_file(path):
    """The argument tuple spawn() pickled into path. The file must be a regular file of this user that nobody
    else can write: unpickling runs code, so a file another user could have written is refused."""
    data = _read_private(path, ENV_ARGS_FILE, "the pickled arguments")
    try:
        args = pickle.loads(data)
    except Exception as e:
        hint = ""
        if isinstance(e, (AttributeError, ImportError)):
            hint = ("; every class in the arguments must be importable in the workers: define it in a module "
                    "file, or in the script that calls spawn() (the workers import it as %s), not in an "
                    "interactive session or python -c" % MAIN_NAME)
        elif type(e).__name__ == "AuthenticationError":
            hint = ("; a multiprocessing.Manager() proxy in the arguments connects with the caller's authkey, "
                    "which tpurun.spawn() hands the workers (%s): call spawn() of this tpurun, in the process "
                    "that made the manager, or pass a tpurun.Lock() instead of a Manager().Lock()"
                    % ENV_AUTHKEY_FILE)
        raise TargetError("unpickling the arguments from %s=%s raised %s: %s%s"
                          % (ENV_ARGS_FILE, path, type(e).__name__, e, hint), traceback.format_exc()) from None
    if not isinstance(args, (tuple, list)):
        raise TargetError("%s=%s holds a %s, want the tuple of arguments" % (ENV_ARGS_FILE, path,
                                                                             type(args).__name__))
    return list(args)


def load_function_file(path, target):
    """The function spawn() pickled by value (cloudpickle) into path, for a target the workers cannot import by
    name (a lambda, a nested function, one defined in a notebook or on stdin); the file is checked as the arguments'
    is. Unpickling it needs cloudpickle here too."""
    data = _read_private(path, ENV_FUNCTION_FILE, "the pickled function")
    try:
        fn = pickle.loads(data)
    except Exception as e:
        hint = ""
        if isinstance(e, ImportError) and (getattr(e, "name", None) or "").partition(".")[0] == "cloudpickle":
            hint = ("; the caller sent %s by value with cloudpickle, which this Python (%s) cannot import: `pip "
                    "install cloudpickle` for it" % (target, sys.executable))
        elif isinstance(e, ImportError):
            hint = "; a module the function uses by name must be importable in the workers too"
        raise TargetError("unpickling the function %s from %s=%s raised %s: %s%s"
                          % (target, ENV_FUNCTION_FILE, path, type(e).__name__, e, hint),
                          traceback.format_exc()) from None
    if not callable(fn):
        raise TargetError("%s=%s holds a %s, not a function" % (ENV_FUNCTION_FILE, path, type(fn).__name__))
    return fn


def _send_target_error(ch, replicas, err):
    info = {"type": TARGET_ERROR, "message": str(err), "traceback": err.tb}
    payload = json.dumps(info).encode("utf-8")
    for r in replicas:
        ch.send(_wire.KIND_ERROR, _wire.ENC_JSON, r, payload)


def prepare(argv, environ):
    """(function, arguments) for argv: the caller's main module imported, the arguments decoded, the target
    resolved (or, with TPURUN_FN_FUNCTION_FILE, unpickled: the target is then only its name); raises TargetError
    without calling anything. TPURUN_FN_MAIN, TPURUN_FN_ARGS_FILE, TPURUN_FN_AUTHKEY_FILE and
    TPURUN_FN_FUNCTION_FILE are taken out of environ, so programs the function starts never read them."""
    main_ref = environ.pop(ENV_MAIN, "")
    args_file = environ.pop(ENV_ARGS_FILE, "")
    authkey_file = environ.pop(ENV_AUTHKEY_FILE, "")
    function_file = environ.pop(ENV_FUNCTION_FILE, "")
    target, args, extra = parse_args(argv, environ)
    if authkey_file.strip():
        load_authkey_file(authkey_file)
    load_main(main_ref)
    fn = load_function_file(function_file, target) if function_file.strip() else None
    if args_file.strip():
        if args:
            raise TargetError("both --args-json %s and %s=%s give the arguments; pass one"
                              % (json.dumps(args)[:200], ENV_ARGS_FILE, args_file))
        args = load_args_file(args_file)
    return resolve(target) if fn is None else fn, target, args + extra


def _report_failure(ch, replica, target, exc):
    """Send exc as replica's error frame and say so in one line: its traceback is shown once, by whoever reads
    the frame (tpurun's report, or the SpawnError of tpurun.spawn). Printed whole only when the frame cannot be
    sent."""
    if exc.__traceback__ is not None and exc.__traceback__.tb_next is not None:
        exc = exc.with_traceback(exc.__traceback__.tb_next)  # from the function on: this runner's frame is noise
    try:
        ch.fail(replica, exc)
    except Exception as e:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        print("tpurun.fn: the error of replica %d was not sent: %s: %s" % (replica, type(e).__name__, e),
              file=sys.stderr)
        return
    info = _wire.error_info(exc)
    first = (info["message"].splitlines() or [""])[0][:200]
    print("tpurun.fn: replica %d: %s raised %s: %s (traceback reported to tpurun)"
          % (replica, target, info["type"], first), file=sys.stderr, flush=True)


def main(argv=None, environ=None):
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    try:
        ch = _wire.channel()
    except _wire.ChannelError as e:
        print("tpurun.fn: %s" % e, file=sys.stderr)
        return 2
    replicas = ch.replicas
    try:
        fn, target, args = prepare(argv, environ)
    except TargetError as e:
        print("tpurun.fn: %s" % e, file=sys.stderr)
        _send_target_error(ch, replicas, e)
        return 2
    for r in replicas:
        try:
            value = fn(r, *args)
        except Exception as e:
            _report_failure(ch, r, target, e)
            return 1
        try:
            ch.report(r, value)
        except _wire.ChannelError as e:
            print("tpurun.fn: the result of %s for replica %d was not sent: %s" % (target, r, e), file=sys.stderr)
            return 1
        except Exception as e:
            print("tpurun.fn: the return value of %s for replica %d cannot be sent: %s: %s"
                  % (target, r, type(e).__name__, e), file=sys.stderr)
            info = {"type": "tpurun.ResultNotSerializable",
                    "message": "%s returned a %s for replica %d that is neither JSON-serialisable nor picklable: %s"
                               % (target, type(value).__name__, r, e),
                    "traceback": traceback.format_exc()}
            ch.send(_wire.KIND_ERROR, _wire.ENC_JSON, r, json.dumps(info).encode("utf-8"))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
