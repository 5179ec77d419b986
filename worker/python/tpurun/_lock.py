"""Lock: a lock shared by the workers of a run on one host, on a file lock (flock), without a server process.

    lock = tpurun.Lock()                     # in the program that calls spawn: pass it to the workers
    tpurun.spawn(fn, args=(lock,))           # (it pickles as the path of its lock file)
    def fn(index, lock):
        with lock:                           # one worker at a time, on this host
            ...

In a worker, ``tpurun.Lock("name")`` is the lock of that name of this run (TPURUN_RUN_ID) on this host: every
worker of the run that makes one with the same name gets the same lock, with no argument passed around. It works
in ``tpurun --fn`` runs, which have no calling Python program, and costs no process (a Manager().Lock() costs
one; it works too: spawn() hands the workers the caller's multiprocessing authkey). Its files stay under
<tmp>/tpurun-<uid>/locks/<run id>/ (empty files, one per name).

Processes on other hosts do not share it: a lock across hosts needs a server all of them reach (a
multiprocessing manager listening on a network address, or the job's own store).
"""

import errno
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import time
import weakref

from . import _wire

# How often a blocked acquire with a timeout tries again.
_POLL = 0.005


def _run_dir(run_id):
    """The directory of this run's named locks, <tmp>/tpurun-<uid>/locks/<run id>, each level a directory of
    this user that only it can write."""
    path = tempfile.gettempdir()
    for part in ("tpurun-%d" % os.getuid(), "locks", run_id):
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise PermissionError(errno.EPERM, "tpurun.Lock: %s is not a directory of this user (uid %d) that only "
                                  "it can write (mode %o, uid %d); remove it"
                                  % (path, os.getuid(), st.st_mode, st.st_uid))
    return path


def _check_name(name):
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError("tpurun.Lock(name=%r): want a non-empty name without '/'" % (name,))


class Lock:
    """A lock shared by processes of one host, on a file lock: made in the program that calls spawn() and passed
    in args (it pickles as its file's path), or made by name in the workers of a run. acquire(blocking=True,
    timeout=-1) and release() behave as threading.Lock's, and it is a context manager."""

    def __init__(self, name=None, *, path=None):
        if path is None and name is None:
            # A lock of its own: a private directory, removed when this object goes away in this process.
            owner_dir = tempfile.mkdtemp(prefix="tpurun-lock-")
            path = os.path.join(owner_dir, "lock")
            weakref.finalize(self, shutil.rmtree, owner_dir, True)
        elif path is None:
            _check_name(name)
            run_id = os.environ.get(_wire.ENV_RUN_ID, "").strip()
            if not run_id:
                raise RuntimeError("tpurun.Lock(%r): a named lock is shared by the workers of a run, and %s is not "
                                   "set: make it in a worker, or make tpurun.Lock() here and pass it in args"
                                   % (name, _wire.ENV_RUN_ID))
            _check_name(run_id)
            path = os.path.join(_run_dir(run_id), name + ".lock")
        self.path = path
        self._fd = None
        self._pid = None
        self._thread_lock = threading.Lock()
        self._file_lock = threading.Lock()  # guards opening the file

    def __reduce__(self):
        return (_rebuild, (self.path,))

    def __repr__(self):
        return "<tpurun.Lock %s>" % self.path

    def _file(self):
        with self._file_lock:
            if self._fd is None or self._pid != os.getpid():  # a forked child opens its own description
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                                   0o600)
                self._pid = os.getpid()
            return self._fd

    def acquire(self, blocking=True, timeout=-1):
        """Take the lock; with blocking=False or a timeout (seconds) give up and return False, as
        threading.Lock.acquire does."""
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        if deadline is None and blocking:
            self._thread_lock.acquire()
        elif not self._thread_lock.acquire(blocking, -1 if deadline is None else timeout):
            return False
        try:
            if self._flock(blocking, deadline):
                return True
        except BaseException:
            self._thread_lock.release()
            raise
        self._thread_lock.release()
        return False

    def _flock(self, blocking, deadline):
        fd = self._file()
        if blocking and deadline is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if not blocking or time.monotonic() >= deadline:
                    return False
            time.sleep(min(_POLL, max(0.0, deadline - time.monotonic())))

    def release(self):
        """Release the lock; RuntimeError when it is not held by this process."""
        if not self._thread_lock.locked():
            raise RuntimeError("release unlocked lock")
        fcntl.flock(self._file(), fcntl.LOCK_UN)
        self._thread_lock.release()

    def locked(self):
        """Whether this process holds the lock."""
        return self._thread_lock.locked()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def _rebuild(path):
    return Lock(path=path)
