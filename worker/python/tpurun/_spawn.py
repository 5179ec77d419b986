"""spawn(): run the tpurun binary in function mode and return {ordinal: result}, like xmp.spawn but with results."""

import base64
import json
import os
import pickle
import shutil
import subprocess
import sys

from ._wire import qualname_problem


class SpawnError(RuntimeError):
    """A tpurun run failed. root_cause is the explanation, document the results document (None when tpurun printed
    none), exit_code tpurun's exit code, results the results that did arrive, error the first worker error
    ({type, message, traceback}) or None."""

    def __init__(self, root_cause, document=None, exit_code=None, results=None, error=None):
        super().__init__(root_cause)
        self.root_cause = root_cause
        self.document = document
        self.exit_code = exit_code
        self.results = results or {}
        self.error = error


def target_of(fn):
    """The 'module:qualname' of fn; raises ValueError for lambdas and nested functions, before anything runs."""
    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise TypeError("spawn(fn): fn must be a function or a 'module:function' string, got %s" % type(fn).__name__)
    qual = getattr(fn, "__qualname__", None)
    mod = getattr(fn, "__module__", None)
    if not qual or not mod:
        raise ValueError("spawn(fn): %r has no __module__/__qualname__; pass a top-level function" % (fn,))
    problem = qualname_problem(qual)
    if problem:
        raise ValueError("spawn(fn): %s.%s %s" % (mod, qual, problem))
    if mod == "__main__":
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        if spec is not None and spec.name and spec.name != "__main__":
            mod = spec.name
        elif getattr(main, "__file__", None):
            mod = os.path.abspath(main.__file__)
        else:
            raise ValueError("spawn(fn): %s is defined in an interactive __main__; put it in a module file" % qual)
    return mod + ":" + qual


def load_document(out):
    """The results document tpurun printed as the last thing on stdout, or None."""
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    text = out.rstrip()
    dec = json.JSONDecoder()
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    for s in reversed(starts):
        j = s
        while j < len(text) and text[j] in " \t\r":
            j += 1
        if j >= len(text) or text[j] != "{":
            continue
        try:
            doc, end = dec.raw_decode(text, j)
        except ValueError:
            continue
        if (text[end:].strip() == "" and isinstance(doc, dict) and isinstance(doc.get("results"), list)
                and "ok" in doc):
            return doc
    return None


def decode_results(doc):
    """{replica: value} of the successful results of a document, unpickling values marked as pickle."""
    out = {}
    for r in doc.get("results") or []:
        if not r.get("ok"):
            continue
        if r.get("encoding") == "pickle":
            out[r["replica"]] = pickle.loads(base64.b64decode(r["value_b64"]))
        else:
            out[r["replica"]] = r.get("value")
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


def find_binary(tpurun=None):
    path = tpurun or os.environ.get("TPURUN") or shutil.which("tpurun")
    if not path:
        raise FileNotFoundError("spawn: the tpurun binary was not found: pass tpurun=PATH, set TPURUN, or put it "
                                "on PATH")
    return path


def spawn(fn, args=(), nprocs=None, tpurun=None, extra_args=(), env=None, timeout=None, **kwargs):
    """Run fn(index, *args) in one process per device under tpurun; return {ordinal: result}.

    A drop-in for torch_xla's xmp.spawn (start_method and join are accepted and ignored) that returns the results.
    fn must be a top-level function (found by import path) or a 'module:function' string; args must be
    JSON-serialisable. On failure it raises SpawnError carrying the root cause from the results document."""
    target = target_of(fn)
    try:
        args_json = json.dumps(list(args))
    except (TypeError, ValueError) as e:
        raise TypeError("spawn: args must be JSON-serialisable (they are passed with --fn-args-json): %s" % e) from None
    argv = ["--json"]
    if nprocs is not None:
        argv += ["--nprocs", str(int(nprocs))]
    argv += list(extra_args)
    argv += ["--fn", target, "--fn-args-json", args_json]
    run_env = dict(os.environ if env is None else env)
    run_env.setdefault("PYTHON_EXEC", sys.executable or "python3")
    return decode_results(run(argv, tpurun=tpurun, env=run_env, timeout=timeout))


def run(argv, tpurun=None, env=None, timeout=None, stderr=None):
    """Run `tpurun --json ARGV...` as a subprocess and return its results document (a dict).

    For orchestrators such as a Ray actor on each host: no TTY, no stdin, callable from any thread, nothing that
    depends on being a session leader. The worker output and tpurun's report go to stderr (inherited unless
    stderr= says otherwise); stdout carries only the document. On a non-zero exit, or a document that is not ok,
    it raises SpawnError with the root cause, the exit code and the document."""
    argv = list(argv)
    if "--json" not in argv:
        argv.insert(0, "--json")
    cmd = [find_binary(tpurun)] + argv
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                          env=dict(os.environ) if env is None else env, timeout=timeout)
    doc = load_document(proc.stdout)
    if doc is None:
        raise SpawnError("%s exited with code %d and printed no results document on stdout; its stderr says why"
                         % (cmd[0], proc.returncode), exit_code=proc.returncode)
    if proc.returncode != 0 or not doc.get("ok", False):
        msg, err = root_cause(doc, proc.returncode)
        raise SpawnError(msg, document=doc, exit_code=proc.returncode, results=decode_results(doc), error=err)
    return doc
