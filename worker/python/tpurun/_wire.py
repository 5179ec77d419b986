"""The tpurun result channel: frame encoding and the process's channel (see worker/PROTOCOL.md)."""

import fcntl
import json
import math
import os
import pickle
import stat
import struct
import threading
import traceback as _tb

MAGIC = b"TPRF"
VERSION = 1
KIND_RESULT, KIND_ERROR, KIND_HELLO = 1, 2, 3
ENC_JSON, ENC_PICKLE = 1, 2
HEADER = struct.Struct(">4sBBBBII")
MAX_PAYLOAD = (1 << 32) - 1

ENV_FD = "TPURUN_RESULT_FD"
ENV_REPLICAS = "TPURUN_REPLICAS"
ENV_RUN_ID = "TPURUN_RUN_ID"  # the run's id, the same in every worker of a run
ENV_ID = "TPURUN_RESULT_ID"  # "<st_dev>:<st_ino>" of the pipe tpurun gave this worker as its channel

# Function mode (fn.py, spawn()): spawn() sets these for tpurun, which passes them on to every worker.
ENV_FN_ARGS_JSON = "TPURUN_FN_ARGS_JSON"  # the JSON list of arguments, when --args-json is not given
ENV_FN_ARGS_FILE = "TPURUN_FN_ARGS_FILE"  # a private file holding the pickled tuple of arguments
ENV_FN_MAIN = "TPURUN_FN_MAIN"  # the caller's main module, imported as __mp_main__: a file's path or a module name
ENV_FN_AUTHKEY_FILE = "TPURUN_FN_AUTHKEY_FILE"  # a private file holding the caller's multiprocessing authkey
ENV_FN_FUNCTION_FILE = "TPURUN_FN_FUNCTION_FILE"  # a private file holding the function itself, pickled by value


# The error type function mode reports for a target it cannot use, found before anything was called.
TARGET_ERROR = "tpurun.TargetError"

# True while python3 -m tpurun.fn imports the caller's main module: a spawn() then is the main module's own call,
# run again in a worker because the script does not guard it with `if __name__ == "__main__":`.
importing_main = False

# ((kind, ref), module) of the caller's main module when a preloaded interpreter (tpurun --preload __main__) already
# imported it as __mp_main__: the function runner of a worker forked from it reuses it instead of running it again.
preloaded_main = None


class ChannelError(RuntimeError):
    """The result channel is missing, misconfigured or refused a frame."""


def encode(kind, encoding, replica, payload, size=None):
    """Return the wire form of one frame: the header for a payload of size bytes (by default len(payload)), then
    payload (Channel.send passes b"" and writes the payload's pieces after the header)."""
    if size is None:
        size = len(payload)
    if not 0 <= replica <= (1 << 31) - 1:
        raise ValueError("replica %r: must be between 0 and 2^31-1" % (replica,))
    if size > MAX_PAYLOAD:
        raise ValueError("payload of %d bytes for replica %d: the wire format carries at most %d"
                         % (size, replica, MAX_PAYLOAD))
    return HEADER.pack(MAGIC, VERSION, kind, encoding, 0, replica, size) + payload


# The most pieces one os.writev takes (Linux's UIO_MAXIOV).
IOV_MAX = 1024


class _Pieces(list):
    """A pickle as the pieces its pickler wrote, each a flat memoryview: with a file, protocol 4 and later write each
    frame (about 64 KiB, a copy) and pass a large bytes, bytearray or PickleBuffer (a NumPy array's memory) apart as
    the object itself, so a 32 MiB value is sent from its own memory, not copied once by pickle.dumps and again by
    the frame's header."""

    def write(self, b):
        m = pickle.PickleBuffer(b).raw()  # one dimension of bytes, whatever the buffer's shape and format
        self.append(m)
        return m.nbytes


def pickled(value, pickler=pickle.Pickler):
    """value pickled with the highest protocol, as a list of the pieces the pickler wrote (memoryviews)."""
    out = _Pieces()
    pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out


# Integers of more than MAX_JSON_INT_DIGITS decimal digits are not carried as JSON: Python's json refuses to read
# (or write) them by default since 3.11 (sys.get_int_max_str_digits), and the launcher refuses them in JSON results
# (worker/PROTOCOL.md). They are pickled.
MAX_JSON_INT_DIGITS = 4300
MAX_JSON_INT = 10 ** MAX_JSON_INT_DIGITS


def json_exact(value):
    """Whether JSON carries value unchanged: json.loads(json.dumps(value)) == value with the same types all the way
    down. Tuples (which come back as lists), dicts with keys other than str (an int key comes back as a str),
    subclasses (an IntEnum comes back as an int), NaN and infinities, and integers of more than 4300 digits (which
    Python's json refuses to read) are not: they are pickled."""
    t = type(value)
    if t is int:
        return -MAX_JSON_INT < value < MAX_JSON_INT
    if value is None or t is bool or t is str:
        return True
    if t is float:
        return math.isfinite(value)
    if t is list:
        return all(json_exact(v) for v in value)
    if t is dict:
        return all(type(k) is str and json_exact(v) for k, v in value.items())
    return False


def encode_value(value):
    """(encoding, payload) of a return value: JSON when JSON gives it back unchanged (json_exact), else pickle, so
    the caller gets back what the function returned, as from xmp.spawn."""
    try:
        if json_exact(value):
            return ENC_JSON, json.dumps(value, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError, OverflowError, RecursionError):
        pass
    try:
        return ENC_PICKLE, pickled(value)
    except Exception:
        cp = cloudpickle()
        if cp is None:
            raise
    # What pickle cannot name (a class, a lambda of a function sent by value): by value, as it came. The caller
    # unpickles it with pickle, which needs cloudpickle there too: it sent the function that way.
    return ENC_PICKLE, pickled(value, cp.Pickler)


def cloudpickle():
    """The cloudpickle module when it is importable, else None: the only module tpurun uses beyond the stdlib, to
    send functions the workers cannot import by name (a notebook's, a lambda, a nested function) by value."""
    try:
        import cloudpickle as cp
    except ImportError:
        return None
    return cp


def error_info(exc):
    """The JSON payload of an error frame for an exception: type, message, traceback."""
    t = type(exc)
    name = t.__qualname__ if t.__module__ in ("builtins", "__main__") else t.__module__ + "." + t.__qualname__
    tb = "".join(_tb.format_exception(t, exc, exc.__traceback__))
    return {"type": name, "message": str(exc), "traceback": tb}


def parse_replicas(value, var=ENV_REPLICAS):
    out = []
    for i, part in enumerate(value.split(",")):
        part = part.strip()
        if not part.isdigit() or not part.isascii():
            raise ChannelError("%s=%r: entry %d (%r) is not a replica ordinal" % (var, value, i, part))
        r = int(part)
        if r in out:
            raise ChannelError("%s=%r: replica %d is listed twice" % (var, value, r))
        out.append(r)
    return out


def replicas_from_env(environ=None):
    """The replicas this worker owns, from TPURUN_REPLICAS. RANK is no fallback: rank r owns 2r and 2r+1 on a host
    with two devices per process."""
    env = os.environ if environ is None else environ
    v = env.get(ENV_REPLICAS, "")
    if v.strip():
        return parse_replicas(v)
    fd = env.get(ENV_FD, "")
    if fd.strip():
        raise ChannelError("%s is not set, but %s=%r is: whatever started this process passed a result channel "
                           "without the replicas this worker owns; tpurun sets both, a wrapper that passes %s on "
                           "must pass %s too" % (ENV_REPLICAS, ENV_FD, fd, ENV_FD, ENV_REPLICAS))
    raise ChannelError("%s is not set: run this program under tpurun" % ENV_REPLICAS)


class Channel:
    """A result channel on a writable file descriptor. Frames are written whole under a lock. After a failed write
    (perhaps part-way through a frame) nothing more is sent: the launcher would read it as the rest of the cut
    frame."""

    def __init__(self, fd, replicas):
        self.fd = fd
        self.replicas = list(replicas) if replicas is not None else None
        self._lock = threading.Lock()
        self._broken = None

    def send(self, kind, encoding, replica, payload):
        """Writes one frame: its header and payload (bytes-like, or a list of bytes-like pieces: pickled's) in one
        os.writev, more when the pipe takes part of it."""
        if kind != KIND_HELLO and self.replicas is not None and replica not in self.replicas:
            raise ChannelError("replica %d is not owned by this worker: it owns %s (%s)"
                               % (replica, ",".join(map(str, self.replicas)), ENV_REPLICAS))
        pieces = payload if isinstance(payload, list) else [pickle.PickleBuffer(payload).raw()]
        size = sum(p.nbytes for p in pieces)
        data = [memoryview(encode(kind, encoding, replica, b"", size))] + pieces
        with self._lock:
            if self._broken is not None:
                raise ChannelError("frame for replica %d not sent: %s" % (replica, self._broken))
            total = left = HEADER.size + size
            data.reverse()  # taken from the end as they are written
            try:
                while data:
                    n = os.writev(self.fd, data[:-IOV_MAX - 1:-1])
                    left -= n
                    while data and n >= data[-1].nbytes:
                        n -= data.pop().nbytes
                    if n:
                        data[-1] = data[-1][n:]
            except OSError as e:
                self._broken = ("the result channel broke when a write failed after %d of %d bytes (%s)"
                                % (total - left, total, e))
                raise ChannelError("frame for replica %d: %s; nothing more is sent on it"
                                   % (replica, self._broken)) from e

    def report(self, replica, value):
        enc, payload = encode_value(value)
        self.send(KIND_RESULT, enc, replica, payload)
        return enc

    def fail(self, replica, exc):
        payload = json.dumps(error_info(exc)).encode("utf-8")
        self.send(KIND_ERROR, ENC_JSON, replica, payload)


_channel = None
_channel_lock = threading.Lock()


def protect_fd(environ=None):
    """Mark the inherited channel descriptor non-inheritable, so programs this worker starts never get it."""
    env = os.environ if environ is None else environ
    v = env.get(ENV_FD, "").strip()
    if not v.isdigit():
        return None
    fd = int(v)
    try:
        if channel_problem(fd, env) is not None:
            return None  # not this process's channel: leave whatever holds that number alone
        os.set_inheritable(fd, False)
    except (OSError, ChannelError):
        return None
    return fd


def parse_channel_id(value, var=ENV_ID):
    """(st_dev, st_ino) from a TPURUN_RESULT_ID value: "<dev>:<ino>" in decimal."""
    dev, sep, ino = value.strip().partition(":")
    if not (sep and dev.isdigit() and ino.isdigit() and dev.isascii() and ino.isascii()):
        raise ChannelError("%s=%r: want <st_dev>:<st_ino> of the result pipe in decimal, as tpurun sets it"
                           % (var, value))
    return int(dev), int(ino)


def _describe(st):
    for test, name in ((stat.S_ISFIFO, "a pipe"), (stat.S_ISREG, "a regular file"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISDIR, "a directory")):
        if test(st.st_mode):
            return "%s (%d:%d)" % (name, st.st_dev, st.st_ino)
    return "a file of mode %o (%d:%d)" % (st.st_mode, st.st_dev, st.st_ino)


def channel_problem(fd, environ=None):
    """Why descriptor fd is not the result channel tpurun gave this process, or None when it is. The channel is
    open, writable and, when TPURUN_RESULT_ID is set, the very pipe it names: a program started by a worker
    inherits the worker's variables but not its channel, and holds some other file at that number, or none."""
    env = os.environ if environ is None else environ
    try:
        st = os.fstat(fd)
    except OSError as e:
        return "descriptor %d is not open in this process (%s); it must be inherited from tpurun" % (fd, e)
    ident = env.get(ENV_ID, "")
    if ident.strip():
        want = parse_channel_id(ident)
        if not stat.S_ISFIFO(st.st_mode) or (st.st_dev, st.st_ino) != want:
            return ("descriptor %d is %s, not the pipe %s=%s names, so it is not the result channel tpurun gave "
                    "this process. The variables were probably inherited from a tpurun worker that started this "
                    "program: only that worker may report (hand the values back to it), or unset %s"
                    % (fd, _describe(st), ENV_ID, ident.strip(), ENV_FD))
    if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
        return "descriptor %d is %s open read-only; the channel is the write end of a pipe" % (fd, _describe(st))
    return None


def channel():
    """The process's channel, opened from TPURUN_RESULT_FD and TPURUN_REPLICAS on first use."""
    global _channel
    with _channel_lock:
        if _channel is None:
            v = os.environ.get(ENV_FD, "")
            if not v.strip():
                raise ChannelError("%s is not set: run this program under tpurun" % ENV_FD)
            if not v.strip().isdigit():
                raise ChannelError("%s=%r is not a file descriptor number" % (ENV_FD, v))
            fd = int(v)
            problem = channel_problem(fd)
            if problem:
                raise ChannelError("%s=%s: %s" % (ENV_FD, v.strip(), problem))
            os.set_inheritable(fd, False)
            _channel = Channel(fd, replicas_from_env())
        return _channel


def qualname_problem(qual):
    """Why a function with this __qualname__ cannot be found by import path, or None when it can."""
    if "<lambda>" in qual:
        return "is a lambda (__qualname__ %r): tpurun finds the function by import path, so define it with def " \
               "at the top level of a module" % (qual,)
    if "<locals>" in qual:
        return "is a nested function (__qualname__ %r): tpurun finds the function by import path, so define " \
               "it at the top level of its module" % (qual,)
    return None
