"""ray.util.tpu's slice queries, answered from the host's environment (Ray asks the TPU env or the metadata)."""
import os


def get_current_pod_name():
    return os.environ.get("TPU_NAME") or None


def get_current_pod_worker_count():
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES")
    return len(hosts.split(",")) if hosts else None


def get_num_tpu_chips_on_node():
    return int(os.environ.get("FAKE_RAY_TPU_CHIPS", "0"))
