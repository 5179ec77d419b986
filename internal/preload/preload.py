"""The preloaded interpreter of ``tpurun --preload MODULES`` (a zygote): import the modules once, prove that it is
safe to fork, then fork one worker per request, each becoming exactly the program tpurun would have exec'd.

tpurun (package internal/preload, which embeds this file) runs it as ``PYTHON [the program's interpreter flags]
<private directory>/preload.py`` with its control socket on descriptor 3, in the environment that every local worker
shares. It is self-contained (stdlib only, nothing of tpurun is imported but, in function mode, the module tpurun on
the workers' PYTHONPATH): with -I or -P its directory is not on sys.path; its sibling pools.py is run by path.

The control socket carries messages of a 4-byte big-endian length and a JSON object; byte strings that must
arrive unchanged (environment, arguments, paths) travel base64-encoded:

    tpurun -> zygote   {"preload": [names], "path0": b64, "env": [b64 of KEY=value], "dev_root": "/dev",
                        "device_nodes": [globs below dev_root], "lockfile": PATH}: the device nodes and libtpu's
                        lockfile that make it unsafe to fork are tpurun's to say (each device kind names its own)
    zygote -> tpurun   {"kind": "ready", "pid": N, "python": "3.11.2", "seconds": S}
                    or {"kind": "refused", "module": NAME, "problem": "...", "hint": "..."}, and it exits 2
    tpurun -> zygote   {"op": "fork", "mode": "file"|"module", "target": b64, "argv": [b64], "orig_argv": [b64],
                        "env": [b64 of KEY=value], "dir": b64}, with descriptors (SCM_RIGHTS): the worker's
                        stdin, stdout, stderr, its inherited files from 3 on (the result channel), and last the
                        read end of its go pipe
    zygote -> tpurun   {"kind": "forked", "pid": N} | {"kind": "error", "message": M} | {"kind": "refused", ...,
                        "pid": N}: unsafe now (a thread after the imports); N, when not 0, was forked already and is
                        killed by tpurun before it runs anything; the zygote exits 2

A worker is forked through an intermediate process that exits at once, so the worker is re-parented to tpurun
(its child subreaper) and supervised like an exec'd worker. It leads its own process group, holds exactly the
descriptors it is given at 0, 1, 2, 3..., and waits on its go pipe until tpurun has adopted it; then it sets its
parent-death signal (SIGKILL when tpurun dies), checks that tpurun is still its parent, sets the per-rank
environment, sys.argv, sys.orig_argv, sys.path[0], the working directory and a fresh __main__, and runs the
program as ``python3 FILE`` or ``python3 -m MODULE`` would. It ends as a multiprocessing fork child does (see
_finish). End of file on the socket ends the zygote.
"""

import array
import base64
import ctypes
import fnmatch
import gc
import glob
import json
import os
import signal
import socket
import struct
import sys
import time
from importlib.machinery import BuiltinImporter, SourceFileLoader

CTL_FD = 3
MAX_FDS = 64
PR_SET_PDEATHSIG = 1
EXIT_REFUSED = 2
HINT_TAIL = "(the preload list is --preload or TPURUN_PRELOAD; tpurun.spawn: start_method='spawn')"

def _b(s):
    return base64.b64decode(s)


def _s(s):
    return os.fsdecode(base64.b64decode(s))


class Control:
    """The control socket: length-prefixed JSON messages, descriptors attached to requests."""

    def __init__(self, fd):
        self.sock = socket.socket(fileno=fd)
        self.fd = fd

    def send(self, obj):
        data = json.dumps(obj).encode("utf-8")
        self.sock.sendall(struct.pack(">I", len(data)) + data)

    def _read(self, n, fds):
        buf = b""
        flags = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
        while len(buf) < n:
            data, anc, mflags, _ = self.sock.recvmsg(n - len(buf), socket.CMSG_SPACE(MAX_FDS * 4), flags)
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    a = array.array("i")
                    a.frombytes(cdata[:len(cdata) - len(cdata) % a.itemsize])
                    fds.extend(a)
            if mflags & socket.MSG_CTRUNC:
                raise RuntimeError("more than %d descriptors came with a request" % MAX_FDS)
            if not data:
                return None
            buf += data
        return buf

    def recv(self):
        """(message, descriptors), or (None, []) at end of file."""
        fds = []
        head = self._read(4, fds)
        if head is None:
            return None, fds
        body = self._read(struct.unpack(">I", head)[0], fds)
        if body is None:
            return None, fds
        return json.loads(body), fds

    def detach(self):
        """Close the socket in a forked worker without touching the zygote's end (the fd only)."""
        self.sock.detach()
        os.close(self.fd)


def _threads():
    """{tid: description} of every thread of this process but the main one, from /proc/self/task (native threads
    too), named by threading where Python started them."""
    me = os.getpid()
    out = {}
    for t in os.listdir("/proc/self/task"):
        tid = int(t)
        if tid == me:
            continue
        try:
            with open("/proc/self/task/%d/comm" % tid) as f:
                comm = f.read().strip()
        except OSError:
            continue  # ended while we looked
        out[tid] = "%r (native thread %d)" % (comm, tid)
    th = sys.modules.get("threading")
    if th is not None:
        for t in th.enumerate():
            nid = getattr(t, "native_id", None)
            if nid in out:
                out[nid] = "%r (Python thread %d%s)" % (t.name, nid, ", daemon" if t.daemon else "")
    return out


def _open_files():
    """{fd: target} of this process's open descriptors."""
    out = {}
    for f in os.listdir("/proc/self/fd"):
        try:
            out[int(f)] = os.readlink("/proc/self/fd/" + f)
        except OSError:
            pass  # the descriptor listdir itself used
    return out


def _runtimes():
    """What device runtimes are initialized in this process, where that is cheaply knowable without importing
    anything."""
    out = []
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        if cuda is not None and cuda.is_initialized():
            out.append("initialized CUDA (torch.cuda.is_initialized() is True): a forked worker cannot use it "
                       "(\"Cannot re-initialize CUDA in forked subprocess\")")
    except Exception:
        pass
    xlac = getattr(sys.modules.get("torch_xla"), "_XLAC", None)
    try:
        if xlac is not None and xlac._xla_runtime_is_initialized():
            out.append("initialized the XLA runtime (torch_xla._XLAC._xla_runtime_is_initialized() is True): every "
                       "forked worker would share its devices")
    except Exception:
        pass
    backends = getattr(sys.modules.get("jax._src.xla_bridge"), "_backends", None)
    if backends:
        out.append("initialized JAX backends (%s): every forked worker would share their devices"
                   % ", ".join(sorted(map(str, backends))))
    return out


def _load_sibling(name):
    """The names of a module of this file's directory, run by path: with -I or -P the directory is not on sys.path,
    and nothing is imported for it (the workers' sys.modules stay as the exec'd program's)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    ns = {"__name__": "tpurun_preload." + name, "__file__": path}
    with open(path, "rb") as f:
        exec(compile(f.read(), path, "exec", dont_inherit=True), ns)
    return ns


_pools = _load_sibling("pools")


class Zygote:
    def __init__(self, ctl, cfg, gc_enabled):
        self.ctl = ctl
        self.preload = list(cfg.get("preload") or [])
        self.path0 = _s(cfg["path0"]) if cfg.get("path0") else None
        self.dev_root = (cfg.get("dev_root") or "/dev").rstrip("/")
        root = glob.escape(self.dev_root) + "/"
        self.device_nodes = tuple(root + g for g in cfg.get("device_nodes") or ())
        self.lockfile = cfg.get("lockfile") or None
        self.parent = os.getppid()
        self.gc_enabled = gc_enabled
        self.env_in = dict(_b(kv).partition(b"=")[::2] for kv in cfg.get("env") or [])
        self.env_set, self.env_unset = {}, []
        self.safe_path = bool(getattr(sys.flags, "safe_path", False))
        self.blas = []  # every OpenBLAS the imports loaded (see _pools["BLAS_VAR"])

    def problems(self):
        """What makes this process unsafe to fork, as phrases ("started 2 threads: ...")."""
        out = []
        threads = _threads()
        if threads:
            out.append("started %d thread%s besides the main one: %s; a forked worker has only the thread that "
                       "forked it, so a lock any other thread held stays locked forever in it"
                       % (len(threads), "s" if len(threads) > 1 else "", ", ".join(threads[t] for t in sorted(threads))))
        files = _open_files()
        devices = ["%s (fd %d)" % (path, fd) for fd, path in sorted(files.items())
                   if any(fnmatch.fnmatchcase(path, g) for g in self.device_nodes)]
        if devices:
            out.append("opened the device node%s %s: every forked worker would share %s (one device, many "
                       "workers: \"4 results for replica 0\")" % ("s" if len(devices) > 1 else "", ", ".join(devices),
                                                                  "them" if len(devices) > 1 else "it"))
        locks = ["fd %d" % fd for fd, path in sorted(files.items()) if self.lockfile and path == self.lockfile]
        if locks:
            out.append("holds the libtpu lockfile %s (%s): libtpu was initialized in the preloaded interpreter"
                       % (self.lockfile, ", ".join(locks)))
        return out + _runtimes()

    def refuse(self, module, problem, hint, forked=0):
        """Tell tpurun why forking is unsafe (forked: a worker just forked, which tpurun kills) and exit 2."""
        self.ctl.send({"kind": "refused", "module": module, "problem": problem, "hint": hint, "pid": forked})
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_REFUSED)

    def hint(self, module):
        rest = [m for m in self.preload if m != module]
        drop = "--preload %s" % ",".join(rest) if rest else "nothing is left: leave --preload out"
        native = any("native thread" in d for d in _threads().values())
        pools = _pools["pool_vars"]() if native else []
        pool = ("if the thread is a pool's (%s), set %s in tpurun's environment; else " % (
            ", ".join(sorted({lib for lib, _ in pools})), " and ".join(sorted({v for _, v in pools})))) if pools else ""
        return ("%simport %s inside the worker instead: drop it from the preload list (%s) %s"
                % (pool, module, drop, HINT_TAIL))

    def load(self):
        """Import every preloaded module, one at a time, refusing at the first that makes forking unsafe."""
        if not self.safe_path and sys.path:  # sys.path[0] is this script's own directory: the workers' instead
            if self.path0 is None:
                del sys.path[0]
            else:
                sys.path[0] = self.path0
        started = time.monotonic()
        problems = self.problems()
        if problems:  # sitecustomize, a .pth file: before any preloaded module
            self.refuse("", "the interpreter, before importing anything of the preload list, " + "; ".join(problems),
                        "find what starts it at interpreter start (sitecustomize, usercustomize, a .pth file, "
                        "PYTHONSTARTUP) or run without --preload " + HINT_TAIL)
        user_blas = os.environ.get(_pools["BLAS_VAR"])
        os.environ[_pools["BLAS_VAR"]] = "1"
        for name in self.preload:
            try:
                self.import_one(name)
            except BaseException as e:
                import traceback
                traceback.print_exc()
                self.refuse(name, "importing %s raised %s: %s" % (name, type(e).__name__, e),
                            "make %s importable as the workers would (sys.path[0] is %r), or drop it from the "
                            "preload list %s" % (name, sys.path[0] if sys.path else "", HINT_TAIL))
            problems = self.problems()
            if problems:
                self.refuse(name, "importing %s %s" % (name, "; and ".join(problems)), self.hint(name))
        if user_blas is None:
            del os.environ[_pools["BLAS_VAR"]]
        else:
            os.environ[_pools["BLAS_VAR"]] = user_blas
        self.blas = _pools["openblas"]()
        # What the interpreter's wrapper (a pyenv shim) and the imports did to the environment tpurun gave: done again
        # in every worker, where its environment had the same input.
        actual = dict(os.environb)
        self.env_set = {k: v for k, v in actual.items() if self.env_in.get(k) != v}
        self.env_unset = [k for k in self.env_in if k not in actual]
        gc.freeze()  # the workers' collections never touch (and so never copy) what the imports made
        self.ctl.send({"kind": "ready", "pid": os.getpid(), "python": "%d.%d.%d" % sys.version_info[:3],
                       "seconds": time.monotonic() - started})

    def import_one(self, name):
        if name != "__main__":
            __import__(name)
            return
        # the main module of the program that called tpurun.spawn, as the function runner imports it
        ref = os.environ.get("TPURUN_FN_MAIN", "").strip()
        if not ref:
            raise RuntimeError("__main__ in the preload list is the main module of the program that called "
                               "tpurun.spawn (TPURUN_FN_MAIN), and TPURUN_FN_MAIN is not set")
        from tpurun import fn, _wire
        module = fn.load_main(ref)
        _wire.preloaded_main = (fn._main_ref, module)

    def serve(self):
        """Answer requests until end of file (then exit 0). Returns only in a forked worker: (request, fds)."""
        while True:
            req, fds = self.ctl.recv()
            if req is None:
                sys.exit(0)
            if req.get("op") != "fork":
                for fd in fds:
                    os.close(fd)
                self.ctl.send({"kind": "error", "message": "unknown request %r" % req.get("op")})
                continue
            self.recheck(fds)  # a thread or a device may come later than the imports
            job = self.fork(req, fds)
            if isinstance(job, tuple):
                return job
            if job is not None:
                # After the fork too: an os.register_at_fork hook may have started a thread just before it. The
                # worker never gets its go byte then: it exits, and tpurun never runs it.
                self.recheck([], job)
                self.ctl.send({"kind": "forked", "pid": job})

    def recheck(self, fds, forked=0):
        """Refuse (and exit 2) if the interpreter became unsafe to fork since its imports."""
        problems = self.problems()
        if not problems:
            return
        for fd in fds:
            os.close(fd)
        self.refuse("", "the preloaded interpreter, after its imports, " + "; and ".join(problems),
                    "find which preloaded module does it later (a timer, a lazy initialization, an "
                    "os.register_at_fork hook) and import it inside the worker instead " + HINT_TAIL, forked)

    def fork(self, req, fds):
        """Fork the worker through an intermediate process: in the zygote its pid (None when it failed, which is
        answered here), in the worker the job (request, descriptors, the pid pipe to close)."""
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe()
        try:
            mid = os.fork()
        except OSError as e:
            os.close(r)
            os.close(w)
            for fd in fds:
                os.close(fd)
            self.ctl.send({"kind": "error", "message": "fork: %s" % e})
            return None
        if mid == 0:
            os.close(r)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the intermediate dies with the zygote
            try:
                pid = os.fork()
            except BaseException:
                os._exit(1)
            if pid == 0:
                return req, fds, w
            try:
                os.setpgid(pid, pid)  # and the worker does it too: whoever comes first
            except OSError:
                pass
            os.write(w, struct.pack(">q", pid))
            os._exit(0)
        os.close(w)
        data = b""
        while len(data) < 8:
            chunk = os.read(r, 8 - len(data))
            if not chunk:
                break
            data += chunk
        os.close(r)
        os.waitpid(mid, 0)  # once it is reaped, the worker is tpurun's child
        for fd in fds:
            os.close(fd)
        if len(data) < 8:
            self.ctl.send({"kind": "error", "message": "the intermediate process could not fork the worker"})
            return None
        return struct.unpack(">q", data)[0]


_libc = None


def _prctl(option, arg):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.prctl(option, int(arg), 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _place_fds(fds):
    """Put descriptors fds at 0, 1, 2, ... (every target inheritable, as exec'd), closing the originals."""
    high = [os.dup(fd) for fd in fds]  # out of the way of the targets first
    for fd in fds:
        os.close(fd)
    for target, fd in enumerate(high):
        os.dup2(fd, target)
        os.close(fd)


def _worker(z, req, fds, w):
    """Become the worker of req; never returns."""
    os.close(w)
    z.ctl.detach()
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    go = fds[-1]
    _place_fds(fds[:-1])
    ok = b""
    while True:
        try:
            ok = os.read(go, 1)
            break
        except InterruptedError:
            continue
        except OSError:
            break
    os.close(go)
    if ok != b"g":  # tpurun died, or did not adopt this process
        os._exit(1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != z.parent:  # tpurun died before the parent-death signal was set
        os._exit(1)
    if req.get("dir"):
        os.chdir(_b(req["dir"]))
    given = dict(_b(kv).partition(b"=")[::2] for kv in req.get("env") or [])
    given.pop(b"", None)
    for k, v in z.env_set.items():
        if given.get(k) == z.env_in.get(k):
            given[k] = v
    for k in z.env_unset:
        if given.get(k) == z.env_in.get(k):
            del given[k]
    env = os.environb
    env.clear()
    env.update(given)
    _pools["size_openblas"](z.blas, given)
    argv = [_s(a) for a in req.get("argv") or []]
    if getattr(sys, "orig_argv", None):  # the interpreter as exec'd (a shim may have resolved it), the rest as given
        sys.orig_argv = sys.orig_argv[:1] + [_s(a) for a in (req.get("orig_argv") or [])[1:]]
    if z.gc_enabled:
        gc.enable()
    nprandom = sys.modules.get("numpy.random")
    if nprandom is not None:  # its global generator is seeded from the OS at import: each worker its own
        try:
            nprandom.seed()
        except Exception:
            pass
    wire = sys.modules.get("tpurun._wire")
    if wire is not None:  # the module was imported before this worker had a channel: open its own
        wire._channel = None
        wire.protect_fd()
    main = type(sys)("__main__")
    main.__annotations__ = {}
    main.__builtins__ = sys.modules["builtins"]
    main.__loader__ = BuiltinImporter  # as in a fresh interpreter's __main__
    sys.modules["__main__"] = main
    target = _s(req["target"])
    if req.get("mode") == "module":
        return _run_module(z, target, argv)
    return _run_file(z, target, argv, main)


def _set_path0(z, path0):
    if z.safe_path:
        return
    if sys.path and z.path0 is not None and sys.path[0] == z.path0:
        sys.path[0] = path0
    elif z.path0 is not None and z.path0 in sys.path:
        sys.path[sys.path.index(z.path0)] = path0
    else:
        sys.path.insert(0, path0)


def _run_module(z, name, argv):
    """What ``python -m NAME ARGS`` does: sys.path[0] is the working directory, runpy runs it as __main__."""
    _set_path0(z, os.getcwd())
    sys.argv = ["-m"] + argv[1:]
    sys.modules.pop(name, None)  # a fresh interpreter never has it yet; runpy would warn
    import runpy
    _guarded(lambda: runpy._run_module_as_main(name, True))


def _run_file(z, path, argv, main):
    """What ``python FILE ARGS`` does: __file__ absolute, sys.path[0] the directory of the resolved file."""
    sys.argv = argv
    abspath = path if path.startswith("/") else os.getcwd() + "/" + path
    if os.path.isdir(abspath):  # a directory with a __main__.py, as python runs it
        _set_path0(z, abspath)
        import runpy
        _guarded(lambda: runpy._run_module_as_main("__main__", False))
        return
    _set_path0(z, os.path.dirname(os.path.realpath(abspath)))
    main.__file__ = abspath
    main.__cached__ = None
    main.__loader__ = SourceFileLoader("__main__", abspath)
    try:
        with open(abspath, "rb") as f:
            source = f.read()
    except OSError as e:
        prog = sys.orig_argv[0] if getattr(sys, "orig_argv", None) else "python3"
        sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n" % (prog, abspath, e.errno, e.strerror))
        _finish(2)

    def run():
        exec(compile(source, abspath, "exec", dont_inherit=True), main.__dict__)
    _guarded(run)


def _guarded(run):
    """Run the program and end the worker with the status CPython's own main would give it: 0, SystemExit's code
    (a message printed, then 1), 1 after an uncaught exception printed as at the top level (without this file's
    frames), SIGINT after an uncaught KeyboardInterrupt. Never returns."""
    try:
        run()
    except SystemExit as e:
        _finish(_system_exit_code(e))
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        e.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        if hasattr(sys, "last_exc"):
            sys.last_exc = e
        try:
            sys.excepthook(type(e), e, tb)
        except BaseException:
            pass
        _finish(1, sigint=isinstance(e, KeyboardInterrupt))
    _finish(0)


def _system_exit_code(e):
    """The exit status of an uncaught SystemExit, as CPython's handle_system_exit computes it."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code if -(1 << 63) <= code < (1 << 63) else -1
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def _finish(status, sigint=False):
    """End the worker as the interpreter ends, up to its teardown: wait for the non-daemon threads, run the atexit
    callbacks, flush Python's and C's standard streams (a failed flush of stdout is status 120, as in CPython),
    then _exit. What is skipped is what multiprocessing's fork start method skips too: tearing down every module
    and C/C++ exit handlers and static destructors. In a forked process those would write to (and so copy) every
    page shared with the preloaded interpreter, which takes seconds for torch."""
    th = sys.modules.get("threading")
    if th is not None and hasattr(th, "_shutdown"):
        try:
            th._shutdown()
        except BaseException:
            pass
    import atexit
    atexit._run_exitfuncs()
    for s in (sys.stdout, sys.stderr):
        try:
            if s is not None:
                s.flush()
        except Exception:
            status = 120
    _libc.fflush(None)
    if sigint:  # as CPython's main after an uncaught KeyboardInterrupt: 130 to a shell
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


def main():
    ctl_fd = os.dup(CTL_FD)  # non-inheritable, out of the way of the workers' 0..3
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, CTL_FD, inheritable=False)  # keep 3 taken: no received descriptor lands on it
    os.close(null)
    gc_enabled = gc.isenabled()
    gc.disable()
    global _libc
    _libc = ctypes.CDLL(None, use_errno=True)  # loaded once here, not in every forked process
    ctl = Control(ctl_fd)
    cfg, fds = ctl.recv()
    for fd in fds:
        os.close(fd)
    if cfg is None:
        sys.exit(0)
    z = Zygote(ctl, cfg, gc_enabled)
    z.load()
    req, fds, w = z.serve()
    _worker(z, req, fds, w)  # never returns


if __name__ == "__main__":
    main()
