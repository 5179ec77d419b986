"""jax_initialize(): jax.distributed.initialize with the arguments tpurun's environment implies.

JAX (0.4 to 0.11) reads only JAX_COORDINATOR_ADDRESS and JAX_LOCAL_DEVICE_IDS from the environment and detects
the rest for its own cluster kinds (cloud TPU, SLURM, Open MPI, Kubernetes); under tpurun on CPU or GPU it finds
none ("coordinator_address should be defined"), and on a TPU host running a process per chip its TPU detection
takes TPU_WORKER_ID, one id per host, for the process id. tpurun's workers carry torchrun's variables, which
say it all: RANK is the process id, WORLD_SIZE the number of processes, MASTER_ADDR:MASTER_PORT a free port on
node 0 for the coordinator.
"""

import inspect
import os

ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_LOCAL_DEVICE_IDS = "JAX_LOCAL_DEVICE_IDS"


def _int_env(env, name):
    v = env.get(name, "")
    if not v.strip():
        raise RuntimeError("tpurun.jax_initialize: %s is not set: run this program under tpurun (or torchrun), "
                           "or pass the value yourself" % name)
    try:
        n = int(v)
    except ValueError:
        raise RuntimeError("tpurun.jax_initialize: %s=%r is not an integer" % (name, v)) from None
    if n < 0:
        raise RuntimeError("tpurun.jax_initialize: %s=%r is negative" % (name, v))
    return n


def _host_port(host, port):
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host  # an IPv6 address
    return "%s:%s" % (host, port)


def _local_device_ids(env):
    """The GPU (by index among the visible ones) this process should drive, or None for every visible device.

    Only CUDA uses it (JAX turns it into jax_cuda_visible_devices); TPU processes get their chip from
    TPU_VISIBLE_CHIPS, CPU processes their device count from the launcher. With several processes on a host that
    all see every GPU (torchrun's way, CUDA_VISIBLE_DEVICES untouched), process LOCAL_RANK takes GPU LOCAL_RANK,
    as `torch.cuda.set_device(LOCAL_RANK)` does; a process that sees exactly one GPU takes it."""
    if env.get(ENV_LOCAL_DEVICE_IDS, "").strip():
        return None  # JAX reads it itself
    if env.get("PJRT_DEVICE", "").strip().upper() not in ("CUDA", "GPU"):
        return None
    local_world = _int_env(env, "LOCAL_WORLD_SIZE") if env.get("LOCAL_WORLD_SIZE", "").strip() else 1
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and len([v for v in visible.split(",") if v.strip()]) == 1:
        return [0]
    if local_world <= 1:
        return None
    return [_int_env(env, "LOCAL_RANK")]


def jax_arguments(environ=None):
    """The keyword arguments jax_initialize passes to jax.distributed.initialize (before overrides), from the
    environment: coordinator_address (JAX_COORDINATOR_ADDRESS, else MASTER_ADDR:MASTER_PORT), num_processes
    (WORLD_SIZE), process_id (RANK) and, for GPU workers, local_device_ids."""
    env = os.environ if environ is None else environ
    coordinator = env.get(ENV_COORDINATOR, "").strip()
    if not coordinator:
        addr = env.get("MASTER_ADDR", "").strip()
        if not addr:
            raise RuntimeError("tpurun.jax_initialize: neither %s nor MASTER_ADDR is set: run this program under "
                               "tpurun (or torchrun), or pass coordinator_address=" % ENV_COORDINATOR)
        coordinator = _host_port(addr, _int_env(env, "MASTER_PORT"))
    kw = {"coordinator_address": coordinator, "num_processes": _int_env(env, "WORLD_SIZE"),
          "process_id": _int_env(env, "RANK")}
    if kw["process_id"] >= kw["num_processes"]:
        raise RuntimeError("tpurun.jax_initialize: RANK=%d is not below WORLD_SIZE=%d"
                           % (kw["process_id"], kw["num_processes"]))
    ids = _local_device_ids(env)
    if ids is not None:
        kw["local_device_ids"] = ids
    return kw


def jax_initialize(**overrides):
    """Call jax.distributed.initialize with the arguments tpurun's environment implies; keywords override them
    (or add others, e.g. initialization_timeout=600). One line at the start of a JAX program run by tpurun:

        import tpurun; tpurun.jax_initialize()

    coordinator_address is JAX_COORDINATOR_ADDRESS when set, else MASTER_ADDR:MASTER_PORT (node 0 and the free
    port tpurun chose: a program that also calls torch.distributed.init_process_group must set
    JAX_COORDINATOR_ADDRESS to another port); num_processes is WORLD_SIZE and process_id RANK, so every process
    of a host running one per chip or GPU gets its own id; a GPU worker sharing its host's GPUs gets
    local_device_ids=[LOCAL_RANK]. JAX's own cluster detection is switched off (cluster_detection_method=
    'deactivate', where this JAX has it), so it neither queries a metadata server nor takes a per-host id.
    Returns what jax.distributed.initialize returns."""
    import jax.distributed  # noqa: the caller has JAX; tpurun does not depend on it

    init = jax.distributed.initialize
    kw = jax_arguments()
    try:
        params = inspect.signature(init).parameters
    except (TypeError, ValueError):
        params = {}
    if "cluster_detection_method" in params:
        kw["cluster_detection_method"] = "deactivate"
    kw.update(overrides)
    return init(**kw)
