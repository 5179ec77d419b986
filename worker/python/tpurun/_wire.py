"""The tpurun result channel: frame encoding and the process's channel (see worker/PROTOCOL.md)."""

import json
import os
import pickle
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


class ChannelError(RuntimeError):
    """The result channel is missing, misconfigured or refused a frame."""


def encode(kind, encoding, replica, payload):
    """Return the wire form of one frame."""
    if not 0 <= replica <= (1 << 31) - 1:
        raise ValueError("replica %r: must be between 0 and 2^31-1" % (replica,))
    if len(payload) > MAX_PAYLOAD:
        raise ValueError("payload of %d bytes for replica %d: the wire format carries at most %d"
                         % (len(payload), replica, MAX_PAYLOAD))
    return HEADER.pack(MAGIC, VERSION, kind, encoding, 0, replica, len(payload)) + payload


def encode_value(value):
    """(encoding, payload) of a return value: JSON when it is JSON-serialisable, else pickle."""
    try:
        return ENC_JSON, json.dumps(value, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError, OverflowError, RecursionError):
        return ENC_PICKLE, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


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
    env = os.environ if environ is None else environ
    v = env.get(ENV_REPLICAS, "")
    if v.strip():
        return parse_replicas(v)
    rank = env.get("RANK", "")
    if rank.strip().isdigit():
        return [int(rank)]
    raise ChannelError("%s is not set (nor RANK): run this program under tpurun" % ENV_REPLICAS)


class Channel:
    """A result channel on a writable file descriptor. Frames are written whole under a lock."""

    def __init__(self, fd, replicas):
        self.fd = fd
        self.replicas = list(replicas) if replicas is not None else None
        self._lock = threading.Lock()

    def send(self, kind, encoding, replica, payload):
        if kind != KIND_HELLO and self.replicas is not None and replica not in self.replicas:
            raise ChannelError("replica %d is not owned by this worker: it owns %s (%s)"
                               % (replica, ",".join(map(str, self.replicas)), ENV_REPLICAS))
        data = memoryview(encode(kind, encoding, replica, payload))
        with self._lock:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]

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
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


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
            try:
                os.fstat(fd)
            except OSError as e:
                raise ChannelError("%s=%s: descriptor %d is not open in this process (%s); it must be "
                                   "inherited from tpurun" % (ENV_FD, v, fd, e)) from None
            os.set_inheritable(fd, False)
            _channel = Channel(fd, replicas_from_env())
        return _channel
