"""A Ray TPU job: one actor per host of a TPU slice, each running tpurun for its host; the hosts are one job.

    python3 examples/ray_actor.py --tpu v4-16 -- python3 train.py --lr 3e-4
    python3 examples/ray_actor.py --tpu v5litepod-16 --max-restarts 2 -- python3 train.py

Everything between `--tpu TYPE` and `--` is passed to tpurun on every host.

The shape is Ray's own for TPU pods: Ray gives worker 0 of every slice a `TPU-<type>-head` resource and every
host of a slice a resource named after the slice. The driver claims the head once to learn the slice's name,
its host count and its chips per host, then places one actor on each of the slice's hosts
(`resources={<slice>: 1, "TPU": <chips per host>}`), so the job holds the whole slice and nothing else.

Each actor runs `tpurun --rdzv-backend static`: the slice itself (TPU_WORKER_ID and TPU_WORKER_HOSTNAMES, or the
GCE metadata server, asked once with a bounded timeout) says which host is which, so ranks follow the chips'
physical order whatever order Ray placed the actors in, and host 0 of the slice hosts the rendezvous. tpurun
hands every worker its complete topology, so nothing in the actors or the workers queries the metadata server.
A worker failing on any host stops every host's workers; each actor returns that failure (it does not raise), and
the driver prints it and exits 1. If the driver or an actor is killed (`ray.kill`), tpurun (started with
--exit-with-parent by tpurun.run) stops its workers: nothing is left on the hosts.

Needs `ray` on the driver and the hosts (not part of tpurun's tests). cmd/tpurun/ray_test.go runs this file
unchanged against a stand-in for the few Ray calls it makes (a two-host v4-16 slice on loopback, the hosts
listed in the opposite order) and checks the world against `tpurun plan`.
"""
import argparse
import sys
import uuid

import ray  # only this example needs Ray

try:  # Ray >= 2.40
    from ray.util import tpu as ray_tpu
except ImportError:  # older Ray
    from ray.util.accelerators import tpu as ray_tpu

import tpurun


@ray.remote
def describe_slice():
    """Runs on worker 0 of a slice (it holds the slice's head resource): the slice's name, hosts and chips."""
    return ray_tpu.get_current_pod_name(), ray_tpu.get_current_pod_worker_count(), ray_tpu.get_num_tpu_chips_on_node()


@ray.remote
class Host:
    """One host of the slice: runs tpurun for it and returns its results document, or the failure."""

    def run(self, tpurun_args, program):
        argv = ["--rdzv-backend", "static"] + tpurun_args + ["--"] + program
        try:
            return {"ok": True, "document": tpurun.run(argv)}
        except tpurun.SpawnError as e:  # the root cause, the exit code and whatever results arrived
            return {"ok": False, "error": str(e), "exit_code": e.exit_code, "document": e.document}


def parse(argv):
    if "--" not in argv:
        raise SystemExit("usage: ray_actor.py --tpu TYPE [TPURUN FLAGS...] -- PROGRAM [ARGS...]")
    i = argv.index("--")
    p = argparse.ArgumentParser(prog="ray_actor.py")
    p.add_argument("--tpu", required=True, help="the slice's accelerator type, e.g. v4-16 or v5litepod-16")
    opts, tpurun_args = p.parse_known_args(argv[:i])
    return opts.tpu, tpurun_args, argv[i + 1:]


def main(argv):
    tpu, tpurun_args, program = parse(argv)
    if not program:
        raise SystemExit("ray_actor.py: no PROGRAM after --")
    ray.init()
    head = "TPU-%s-head" % tpu
    name, hosts, chips = ray.get(describe_slice.options(resources={head: 1}).remote())
    if not name or not hosts:
        raise SystemExit("ray_actor.py: the node holding %s is not part of a TPU slice" % head)
    run_id = "ray-" + uuid.uuid4().hex[:12]  # one id for the whole slice: every host's tpurun joins this run
    actors = [Host.options(resources={name: 1, "TPU": chips}).remote() for _ in range(hosts)]
    outcomes = ray.get([a.run.remote(["--rdzv-id", run_id] + tpurun_args, program) for a in actors])
    for o in outcomes:
        doc = o["document"] or {}
        what = "ok" if o["ok"] else "failed (exit %s): %s" % (o["exit_code"], o["error"].splitlines()[0])
        print("%s host: %d result(s), world of %s rank(s): %s" % (name, len(doc.get("results", [])),
                                                                   doc.get("world", {}).get("size", "?"), what))
    return 0 if all(o["ok"] for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
