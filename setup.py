"""The platform wheel's build (make wheel; pyproject.toml has the metadata): setuptools, plus two things it cannot
say in pyproject.toml.

1. The tpurun binaries are the wheel's scripts (tpurun-VERSION.data/scripts/tpurun and tpurun-etcd: pip installs
   them in the environment's bin/, as ruff's and uv's wheels carry theirs): tpurun, and tpurun-etcd, the same
   command built with -tags etcd, which tpurun runs in its place for the etcd rendezvous. build_scripts builds them,
   CGO_ENABLED=0 as `make build` does, for the GOOS/GOARCH of the build (`go env`: set GOARCH=arm64 for another
   machine), instead of copying a Python script (distutils would read the binary as text).
2. The tag: py3-none-PLATFORM. The Python half is pure (any Python 3), the binary is static: it needs no C library
   and runs on any Linux kernel Go supports, glibc or musl. So one wheel per architecture carries the tags of both
   kinds of Linux pip knows, manylinux_2_17 (= manylinux2014, the oldest glibc floor today's pip and PyPI take) and
   musllinux_1_1 (Alpine): tpurun-0.2.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64.whl.
   A linux_x86_64 tag would install here too, but PyPI refuses it; manylinux alone would leave out Alpine.

The version is tpurun.__version__ (worker/python/tpurun/__init__.py, pyproject.toml's dynamic version), the one
place it is written: the binary's --version prints it (launcher.Version), which the build checks when it can run
the binary it built.
"""

import os
import re
import subprocess

from setuptools import setup  # first: it provides distutils
from distutils.command.build_scripts import build_scripts  # setuptools provides distutils (Python 3.12 too)
from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
GO = os.environ.get("GO", "go")

# GOARCH -> the machine in a Linux platform tag.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "ppc64le": "ppc64le", "s390x": "s390x"}


def go_env(*names):
    out = subprocess.run([GO, "env"] + list(names), cwd=ROOT, check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    return out.split("\n")[:len(names)]


def target():
    """(GOOS, GOARCH) of the build: Linux on an architecture with a manylinux tag, or SystemExit saying so."""
    goos, goarch = go_env("GOOS", "GOARCH")
    if goos != "linux":
        raise SystemExit("make wheel: GOOS=%s: tpurun runs on Linux only; build with GOOS=linux" % goos)
    if goarch not in MACHINES:
        raise SystemExit("make wheel: GOARCH=%s has no manylinux tag; use one of %s" % (goarch, ", ".join(MACHINES)))
    return goos, goarch


def platform_tag(goarch):
    m = MACHINES[goarch]
    return "manylinux_2_17_%s.manylinux2014_%s.musllinux_1_1_%s" % (m, m, m)


def version():
    with open(os.path.join(ROOT, "worker", "python", "tpurun", "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)


# The binaries of the wheel: name -> the go build flags of ./cmd/tpurun (make build builds the same two).
BINARIES = {"tpurun": [], "tpurun-etcd": ["-tags", "etcd"]}


class BuildBinary(build_scripts):
    """Builds the tpurun binaries (BINARIES) into the scripts' build directory (the wheel's .data/scripts)."""

    def run(self):
        goos, goarch = target()
        self.mkpath(self.build_dir)
        env = dict(os.environ, CGO_ENABLED="0", GOOS=goos, GOARCH=goarch)
        native = [goos, goarch] == go_env("GOHOSTOS", "GOHOSTARCH")
        for name, flags in BINARIES.items():
            out = os.path.abspath(os.path.join(self.build_dir, name))
            subprocess.run([GO, "build"] + flags + ["-o", out, "./cmd/tpurun"], cwd=ROOT, env=env, check=True)
            if native:  # the binary runs here: it must say the same version
                said = subprocess.run([out, "--version"], check=True, stdout=subprocess.PIPE,
                                      universal_newlines=True).stdout
                if not said.startswith("tpurun %s " % version()):
                    raise SystemExit("make wheel: %s --version says %r, the wheel's version is %s" % (out, said, version()))


class PlatformWheel(bdist_wheel):
    """py3-none-<manylinux and musllinux of GOARCH>: a pure Python package beside a static binary."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False  # the binary: the wheel is for one platform (Root-Is-Purelib: false)

    def get_tag(self):
        return "py3", "none", platform_tag(target()[1])


# scripts names the Go package of the scripts, which BuildBinary builds (setuptools runs build_scripts and
# install_scripts only when there are scripts). The egg-info goes under build/ too, not into worker/python.
os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
setup(scripts=["cmd/tpurun"], cmdclass={"build_scripts": BuildBinary, "bdist_wheel": PlatformWheel},
      options={"egg_info": {"egg_base": "build"}})
