"""Derived forms of weights kept between calls: Winograd-transformed filters (winograd.py) and
transposed weight matrices for the small-batch product (gemm.py).

A weight qualifies when the caller says it is a variable read by a program that writes no
variables (an inference function: tf_backend's batch_reads pass marks such Conv2D and MatMul
nodes) and it is read-only memory owned outside numpy (a view of a TensorFlow tensor).
TensorFlow does not write a buffer that something else still references (an assignment or
optimizer update to a shared buffer copies to a new one), and an entry holds the view, so the
same address, shape and strides mean the same values. Everything else (eager calls, training
functions, whose weights change every step and whose held buffers would make each update a
copy, and our own arrays) is derived on every call or not at all.

One budget for all kinds (TF_BACKEND_WEIGHT_CACHE_MB, default 256); the least recently used
entries go first. A form larger than a quarter of the budget is never kept: inserting it would
evict everything else, and the next call's other weights would evict it in turn, so every call
would recompute every form (VGG16's fc1, 411 MB transposed, re-transposed per call: 12x
slower). Its caller takes the path that reads the weight as it is (gemm's `_nn` for few rows),
one pass over the weights per call.
"""
import collections
import os
import threading

import numpy as np

CACHE_BYTES = None   # None: TF_BACKEND_WEIGHT_CACHE_MB (default 256 MiB); tests set a number
DEFAULT_MB = 256     # ResNet-50 at batch 1 keeps about 100 MiB (README)


def _env_budget():
    v = os.environ.get("TF_BACKEND_WEIGHT_CACHE_MB")
    try:
        return int(float(v) * (1 << 20)) if v else DEFAULT_MB << 20
    except ValueError:
        return DEFAULT_MB << 20


_ENV_BUDGET = _env_budget()   # read once, as the process starts: get() runs per product
_cache = collections.OrderedDict()   # (kind, address, shape, strides) -> (weight view, derived)
_lock = threading.Lock()
_size = [0]
_stats = collections.Counter()   # hits, kept, evicted, oversized (per kind: "kind:event")


def budget():
    return _ENV_BUDGET if CACHE_BYTES is None else CACHE_BYTES


def fits(nbytes):
    """Whether a derived form of `nbytes` may be kept (at most a quarter of the budget)."""
    return nbytes <= budget() // 4


def cacheable(w):
    return not w.flags.writeable and _foreign_owner(w)


def _foreign_owner(a):
    """True when the memory under `a` (through any chain of views) belongs to an object that is
    not a numpy array: a TensorFlow tensor's buffer. Our own arrays and views of them never
    qualify."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.base is not None


def get(w, kind, make, nbytes=None):
    """make(w) (a new array, made read-only here) for a cacheable `w`, from the cache when it
    is there; None when `w` is not cacheable or its form (`nbytes`, default w's size) is too
    large to keep (the caller then works from `w` itself)."""
    if not cacheable(w):
        return None
    if not fits(w.nbytes if nbytes is None else nbytes):
        with _lock:
            _stats[f"{kind}:oversized"] += 1
        return None
    key = (kind, w.__array_interface__["data"][0], w.shape, w.strides)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            _stats[f"{kind}:hits"] += 1
            return hit[1]
    d = make(w)
    d.flags.writeable = False
    limit = budget()
    with _lock:
        if key not in _cache:
            _cache[key] = (w, d)
            _size[0] += d.nbytes
            _stats[f"{kind}:kept"] += 1
            while _size[0] > limit and len(_cache) > 1:
                (k, *_), (_, old) = _cache.popitem(last=False)
                _size[0] -= old.nbytes
                _stats[f"{k}:evicted"] += 1
    return d


def stats():
    """{"bytes", "budget", "entries", "events": {"kind:hits|kept|evicted|oversized": n}}."""
    with _lock:
        return {"bytes": _size[0], "budget": budget(), "entries": len(_cache),
                "events": dict(_stats)}


def entries(kind=None):
    """How many entries (of one kind) the cache holds."""
    with _lock:
        return sum(1 for k in _cache if kind is None or k[0] == kind)


def nbytes():
    with _lock:
        return _size[0]


def clear():
    with _lock:
        _cache.clear()
        _size[0] = 0
        _stats.clear()
