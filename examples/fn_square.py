"""An xmp.spawn-style function module for tpurun's function mode.

    tpurun --nprocs 4 --json --fn examples/fn_square.py:square --fn-args-json '[10]'

runs square(index, 10) in each of 4 workers and prints {"results": [{"replica": 0, "value": {...}}, ...]}.
From Python: tpurun.spawn("examples/fn_square.py:square", args=(10,), nprocs=4) returns {0: {...}, 1: ...}.
"""
import os


def square(index, offset=0, *rest):
    """Return index**2 (+ offset) and who computed it: what xmp.spawn's function would return, collected."""
    return {"index": index, "square": index * index + int(offset), "rank": int(os.environ["RANK"]), "rest": list(rest)}


class Point:
    """A value that is not JSON: tpurun pickles it (encoding "pickle" in the document)."""

    def __init__(self, x):
        self.x = x

    def __repr__(self):
        return "Point(%d)" % self.x


def point(index):
    return Point(index)


def boom(index):
    if index == 1:
        raise ValueError("replica %d diverged" % index)
    return index


def make_nested():
    def nested(index):
        return index
    return nested


nested = make_nested()
