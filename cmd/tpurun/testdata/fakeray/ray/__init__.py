"""A stand-in for the few Ray calls examples/ray_actor.py makes, for tests on a machine without Ray (no PyPI).

Not Ray: no scheduler, no object store. The cluster is FAKE_RAY_HOSTS, a JSON list of hosts, each
{"resources": {...}, "env": {...}}. A task or an actor goes to the first host, in that order, whose free
resources cover what it asks for (none free: an error, where Ray would wait), and runs in a forked process whose
environment is the host's env over the driver's, as a Ray worker process on that host would see it. Calls are
sent at .remote() and answered at ray.get(), so the actors of one ray.get run at the same time.
"""
import json
import multiprocessing
import os

from . import util  # noqa: F401  (ray.util.tpu, ray.util.accelerators.tpu)

_fork = multiprocessing.get_context("fork")
_hosts = None


class RayTaskError(Exception):
    pass


def init(*args, **kwargs):
    global _hosts
    _hosts = []
    for h in json.loads(os.environ["FAKE_RAY_HOSTS"]):
        _hosts.append({"env": h.get("env", {}), "free": dict(h["resources"])})


def _place(resources):
    for h in _hosts:
        if all(h["free"].get(k, 0) >= v for k, v in resources.items()):
            for k, v in resources.items():
                h["free"][k] -= v
            return h
    raise RayTaskError("fake ray: no host has %r free (Ray would wait for one)" % (resources,))


def _release(host, resources):
    for k, v in resources.items():
        host["free"][k] += v


def _on_host(env, conn, make, calls):
    os.environ.update(env)
    try:
        obj = make()
        for name, args, kwargs in calls(conn):
            conn.send((True, getattr(obj, name)(*args, **kwargs) if name else obj(*args, **kwargs)))
    except BaseException as e:  # noqa: B902  (reported to the caller, as Ray does)
        conn.send((False, "%s: %s" % (type(e).__name__, e)))


class ObjectRef:
    def __init__(self, fetch):
        self._fetch = fetch


def get(refs):
    if isinstance(refs, list):
        return [r._fetch() for r in refs]
    return refs._fetch()


def _answer(conn, done=None):
    def fetch():
        ok, value = conn.recv()
        if done:
            done()
        if not ok:
            raise RayTaskError(value)
        return value
    return ObjectRef(fetch)


class _RemoteFunction:
    def __init__(self, fn, opts):
        self._fn, self._opts = fn, opts

    def options(self, **opts):
        return _RemoteFunction(self._fn, {**self._opts, **opts})

    def remote(self, *args, **kwargs):
        res = self._opts.get("resources", {})
        host = _place(res)
        parent, child = _fork.Pipe()
        p = _fork.Process(target=_on_host, args=(host["env"], child, lambda: self._fn,
                                                lambda conn: [(None, args, kwargs)]))
        p.start()

        def done():
            p.join()
            _release(host, res)
        return _answer(parent, done)


class _ActorMethod:
    def __init__(self, conn, name):
        self._conn, self._name = conn, name

    def remote(self, *args, **kwargs):
        self._conn.send((self._name, args, kwargs))
        return _answer(self._conn)


class _ActorHandle:
    def __init__(self, conn, proc):
        self._conn, self._proc = conn, proc

    def __getattr__(self, name):
        return _ActorMethod(self._conn, name)


def _serve(conn):
    while True:
        try:
            yield conn.recv()
        except EOFError:  # the driver is gone
            return


class _ActorClass:
    def __init__(self, cls, opts):
        self._cls, self._opts = cls, opts

    def options(self, **opts):
        return _ActorClass(self._cls, {**self._opts, **opts})

    def remote(self, *args, **kwargs):
        host = _place(self._opts.get("resources", {}))
        parent, child = _fork.Pipe()
        p = _fork.Process(target=_on_host, args=(host["env"], child, lambda: self._cls(*args, **kwargs), _serve),
                          daemon=True)
        p.start()
        return _ActorHandle(parent, p)


def remote(*args, **opts):
    if len(args) == 1 and callable(args[0]) and not opts:
        return _wrap(args[0], {})
    return lambda f: _wrap(f, opts)


def _wrap(f, opts):
    return _ActorClass(f, opts) if isinstance(f, type) else _RemoteFunction(f, opts)
