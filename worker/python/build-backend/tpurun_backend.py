"""A PEP 517 build backend for the tpurun Python module, in the standard library only.

`pip install <checkout>/worker/python` builds with it offline, build isolation included: pyproject.toml
requires nothing, so pip fetches nothing (no setuptools, no wheel). It builds a pure-Python wheel of the
package tpurun/ (its *.py files: the same files the tpurun binary embeds), an sdist, and an editable wheel
(`pip install -e`, PEP 660) that points at this tree.

The version is tpurun.__version__ (read from tpurun/__init__.py without importing it); the description is that
file's docstring. Archives are reproducible: fixed timestamps, sorted entries, fixed modes.
"""

import ast
import base64
import glob
import gzip
import hashlib
import io
import os
import re
import tarfile
import zipfile

NAME = "tpurun"
SUMMARY = "Worker-side module of tpurun: report results, xmp.spawn-style spawn(), run(), jax_initialize()"
REQUIRES_PYTHON = ">=3.8"
TAG = "py3-none-any"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the directory holding pyproject.toml


def _init_source():
    with open(os.path.join(ROOT, NAME, "__init__.py"), encoding="utf-8") as f:
        return f.read()


def version():
    m = re.search(r'^__version__ = "([^"]+)"$', _init_source(), re.M)
    if not m:
        raise RuntimeError("%s/__init__.py has no line __version__ = \"...\"" % os.path.join(ROOT, NAME))
    return m.group(1)


def package_files():
    """The package's files relative to ROOT, sorted: tpurun/*.py (what the binary embeds, nothing else)."""
    files = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, NAME, "*.py")))
    if not files:
        raise RuntimeError("no %s/*.py under %s" % (NAME, ROOT))
    return [f.replace(os.sep, "/") for f in files]


def metadata():
    doc = ast.get_docstring(ast.parse(_init_source())) or SUMMARY
    return ("Metadata-Version: 2.1\n"
            "Name: %s\n"
            "Version: %s\n"
            "Summary: %s\n"
            "Requires-Python: %s\n"
            "Description-Content-Type: text/plain\n"
            "\n%s\n" % (NAME, version(), SUMMARY, REQUIRES_PYTHON, doc))


def _dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def _wheel_file():
    return ("Wheel-Version: 1.0\n"
            "Generator: tpurun_backend\n"
            "Root-Is-Purelib: true\n"
            "Tag: %s\n" % TAG)


def _read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _write_wheel(wheel_directory, entries):
    """Write a wheel of entries [(archive path, bytes)] plus its dist-info; return its file name."""
    di = _dist_info()
    entries = list(entries) + [(di + "/METADATA", metadata().encode("utf-8")),
                               (di + "/WHEEL", _wheel_file().encode("utf-8")),
                               (di + "/top_level.txt", (NAME + "\n").encode("utf-8"))]
    record = "".join("%s,%s,%d\n" % (p, _record_hash(b), len(b)) for p, b in entries) + di + "/RECORD,,\n"
    entries.append((di + "/RECORD", record.encode("utf-8")))
    name = "%s-%s-%s.whl" % (NAME, version(), TAG)
    path = os.path.join(wheel_directory, name)
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for p, b in entries:
            info = zipfile.ZipInfo(p, date_time=ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, b)
    os.replace(tmp, path)
    return name


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = _dist_info()
    os.makedirs(os.path.join(metadata_directory, di), exist_ok=True)
    for fname, text in (("METADATA", metadata()), ("WHEEL", _wheel_file()), ("top_level.txt", NAME + "\n")):
        with open(os.path.join(metadata_directory, di, fname), "w", encoding="utf-8") as f:
            f.write(text)
    return di


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(p, _read(p)) for p in package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel holding only a .pth line with this tree's path, so `import tpurun` loads the files here."""
    pth = ("%s\n" % ROOT).encode("utf-8")
    return _write_wheel(wheel_directory, [("__editable__.%s-%s.pth" % (NAME, version()), pth)])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, version())
    files = ["pyproject.toml", "build-backend/tpurun_backend.py"] + package_files()
    name = base + ".tar.gz"
    path = os.path.join(sdist_directory, name)
    tmp = path + ".tmp"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in [(f, _read(f)) for f in files] + [("PKG-INFO", metadata().encode("utf-8"))]:
            info = tarfile.TarInfo(base + "/" + rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    with open(tmp, "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as gz:
            gz.write(raw.getvalue())
    os.replace(tmp, path)
    return name
