from .. import tpu  # noqa: F401  (older Ray's ray.util.accelerators.tpu)
