"""Function mode: ``python3 -m tpurun.fn [--args-json JSON] module:function [ARG...]``.

This is what ``tpurun --fn module:function`` runs in every worker. For each replica the worker owns
(TPURUN_REPLICAS, in order) it calls ``function(index, *args)`` with index the replica's global ordinal (as
xmp.spawn passes it), and reports the return value on the result channel: JSON when JSON gives it back
unchanged (same values and types all the way down), otherwise pickled (and marked so).

``args`` is the JSON list given by ``--args-json`` (or, when absent, the TPURUN_FN_ARGS_JSON environment
variable), followed by the remaining command-line ARGs as strings.

Exit codes:
  0  every owned replica reported its value
  1  the function raised: an error frame (type, message, traceback) for that replica; later replicas are not run
  2  the target is unusable, found BEFORE anything is called: a missing module or attribute, an import that
     raises, a nested function (``<locals>`` in __qualname__), a lambda, something not callable, or bad
     arguments. Each owned replica gets an error frame of type ``tpurun.TargetError``.
"""

import importlib
import importlib.util
import json
import os
import sys
import traceback

from . import _wire

ENV_ARGS = "TPURUN_FN_ARGS_JSON"
TARGET_ERROR = "tpurun.TargetError"
USAGE = "usage: python3 -m tpurun.fn [--args-json JSON] module:function [ARG...]"


class TargetError(Exception):
    """The function cannot be used; raised before anything is called."""

    def __init__(self, message, tb=""):
        super().__init__(message)
        self.tb = tb


def _load_module(mod):
    if mod.endswith(".py") or os.sep in mod:
        path = os.path.abspath(mod)
        if not os.path.isfile(path):
            raise TargetError("module file %s does not exist" % path)
        sys.path.insert(0, os.path.dirname(path))
        spec = importlib.util.spec_from_file_location("__mp_main__", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["__mp_main__"] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise TargetError("importing %s raised %s: %s" % (path, type(e).__name__, e),
                              traceback.format_exc()) from None
        return module
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
    return target, args + extra


def _send_target_error(ch, replicas, err):
    info = {"type": TARGET_ERROR, "message": str(err), "traceback": err.tb}
    payload = json.dumps(info).encode("utf-8")
    for r in replicas:
        ch.send(_wire.KIND_ERROR, _wire.ENC_JSON, r, payload)


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
        target, args = parse_args(argv, environ)
        fn = resolve(target)
    except TargetError as e:
        print("tpurun.fn: %s" % e, file=sys.stderr)
        _send_target_error(ch, replicas, e)
        return 2
    for r in replicas:
        try:
            value = fn(r, *args)
        except Exception as e:
            traceback.print_exc()
            ch.fail(r, e)
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
