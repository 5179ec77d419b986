from . import accelerators, tpu  # noqa: F401
