"""One Ray actor per TPU host, each running tpurun and returning its results document.

Ray gives each actor a subset of the host's chips in TPU_VISIBLE_CHIPS; tpurun treats that as the chips it may
use and hands each worker its own. tpurun resolves the topology once, in bounded time, so nothing in the actor
or the workers queries the GCE metadata server. Needs `ray` (not part of tpurun's tests); the part that does not
need Ray, tpurun.run(), is tested (cmd/tpurun/ray_test.go).

    python3 examples/ray_actor.py -- python3 train.py --lr 3e-4
"""
import sys

import ray  # noqa: E402  (only this example needs Ray)

import tpurun


@ray.remote(resources={"TPU": 4})
class Host:
    def run(self, argv):
        try:
            return {"ok": True, "document": tpurun.run(argv)}
        except tpurun.SpawnError as e:  # root cause, exit code and whatever results arrived
            return {"ok": False, "error": str(e), "exit_code": e.exit_code, "document": e.document}


def main(argv):
    ray.init()
    hosts = int(ray.cluster_resources().get("TPU", 4) // 4) or 1
    actors = [Host.remote() for _ in range(hosts)]
    outcomes = ray.get([a.run.remote(argv) for a in actors])
    for i, o in enumerate(outcomes):
        print(f"host {i}: " + ("ok" if o["ok"] else f"failed ({o['exit_code']}): {o['error']}"))
    return 0 if all(o["ok"] for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[2:] if sys.argv[1:2] == ["--"] else sys.argv[1:]))
