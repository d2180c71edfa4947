"""Kernel choice by measurement (issue 16): for each heavy kernel node of a program, our kernel
against TensorFlow's own kernel for the same op and attrs, timed inside the program's first
runs (alternately ours and TensorFlow's, RUNS each after one warm-up: in place, so the other
nodes' threads and caches count as they will); the faster runs from then on. As cuDNN's
autotuner picks an algorithm and TorchInductor's max-autotune picks between its kernels and
extern library kernels. (Timing each side back to back outside the program mispredicted: on 2
cores TensorFlow's backprops won alone and lost in place, the fit 15% slower.)

TF_BACKEND_AUTOTUNE: "off" (default: always ours), "cache" (a recorded choice is reused, a new
one measured and recorded), "measure" (measure again, record). Off by default: on 2 EPYC cores
the MNIST-shaped training script's epochs ranged 1.5-2.6 s both ways, with TensorFlow's conv
backprops chosen (2.4x faster in place) yet no clear end-to-end gain: per-node timing misses what
one pool's spinning threads cost the next node on the other runtime. Choices live in
`<cache dir>/autotune.json`, keyed by op, attrs, input shapes and dtypes, and the CPU model, so
another CPU measures again. The ledger's `autotune` lists each choice and by how much it won.
Whatever runs meets the numerics contract: TensorFlow's kernel is the oracle itself.
"""
import json
import os
import threading

import numpy as np

import kernels

from . import ledger

# ops whose kernels are worth timing against TensorFlow's (products, convolutions and their
# backprops, pooling gradients, batch-norm training), alone or as an epilogue node's producer
OPS = {"MatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "Conv2DBackpropInput",
       "Conv2DBackpropFilter", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
       "DepthwiseConv2dNativeBackpropFilter", "MaxPoolGrad", "AvgPoolGrad", "FusedBatchNormV3",
       "FusedBatchNormGradV3"}
TABLE = "autotune.json"   # in kernels.cache_dir()
RUNS = 3          # timed runs per side, after one warm-up run each
MARGIN = 1.05     # TensorFlow's kernel must win by more than this to be chosen (noise)

_lock = threading.Lock()
_table = kernels.CacheTable(TABLE)
_chosen = {}      # key -> {"choice", "ours_ms", "stock_ms"} measured or loaded this process


def mode():
    v = os.environ.get("TF_BACKEND_AUTOTUNE", "off").strip().lower()
    return v if v in ("off", "cache", "measure") else "off"


def _load():
    return _table.value()


def _save():
    _table.save()


def key(node, arrays):
    m = producer(node)
    attrs = {k: (v.name if isinstance(v, np.dtype) else v) for k, v in sorted(m.attrs.items())
             if not k.startswith("_")}
    ins = [f"{a.dtype.name}{list(a.shape)}" for a in arrays]
    from shape_fns.host import cpu_key
    return json.dumps([node.op if m is node else node.fused_ops, attrs, ins, cpu_key()],
                      default=str)


def producer(node):
    """The node whose kernel is chosen: the node itself, or an epilogue node's GEMM/conv
    (passes/epilogue.py), whose TensorFlow alternative is TensorFlow's producer followed by our
    epilogue."""
    spec = getattr(node, "spec", None)
    if type(spec) is tuple and spec and spec[0] == "epilogue":
        return spec[1]
    return node


def candidate(node):
    m = producer(node)
    return m.op in OPS and (node.kind == "kernel" or m is not node)


def cached(k):
    """The recorded choice for key `k` (mode "cache"), else None: measure."""
    if mode() != "cache":
        return _chosen.get(k)
    with _lock:
        got = _chosen.get(k)
        if got is None:
            got = _load().get(k)
            if got is not None:
                _chosen[k] = got
    return got


def record(k, ours_s, stock_s):
    """Decide from in-program timings (seconds, first sample of each side dropped as warm-up)
    and record the choice; returns it ({"choice", "ours_ms", "stock_ms"})."""
    def med(ts):
        ts = sorted(ts[1:] or ts)
        return ts[len(ts) // 2] * 1e3
    ours, stock = med(ours_s), med(stock_s)
    got = {"choice": "stock" if stock * MARGIN < ours else "ours",
           "ours_ms": round(ours, 4), "stock_ms": round(stock, 4)}
    with _lock:
        _chosen[k] = got
        _load()[k] = got
        try:
            _save()
        except OSError:
            pass
    return got


def describe(got):
    faster = max(got["ours_ms"], got["stock_ms"]) / max(1e-9, min(got["ours_ms"], got["stock_ms"]))
    who = "stock kernel" if got["choice"] == "stock" else "our kernel"
    return f"{who}, chosen: {faster:.2f}x faster"


def clear():
    with _lock:
        _chosen.clear()
        _table.forget()
