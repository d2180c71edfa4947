"""Reduction fusion: a fused elementwise chain whose only consumer is a Sum or Mean over its
trailing axes becomes one node whose generated loop sums each row as it evaluates the chain
(the host device's "fusion" library: build_rows_sum): the chain's values never go to memory,
and one node runs instead of two. The sums are reduction_ops' row sums (blocks of 4096 values,
vectorised, added in order), so the fused node gives the unfused pair's bits. Where the inputs'
broadcast does not fit the rows of the reduction, and while the fused loop compiles in the
background (kernels/cpu/deferred.py; compiling it here held a recurrent classifier's cold first
step 2.4 s), the pair runs unfused, each part declining to TensorFlow while its own compile
runs: the node declines (`declines`), so any compile below it may be deferred.
"""
import math

import numpy as np

from shape_fns import Unsupported

from ... import devices, executor
from ..ir import Node

OPS = ("Sum", "Mean")


def _trailing_axes(prog, r, rank):
    axis = prog.consts.get(r.inputs[1])
    if axis is None or rank is None:
        return None
    axes = sorted({int(a) + rank if int(a) < 0 else int(a)
                   for a in np.asarray(axis).reshape(-1)})
    if not axes or axes != list(range(rank - len(axes), rank)) or axes[0] < 0:
        return None
    return len(axes)


def run(prog):
    fusion = devices.library("fusion")
    if fusion is None:
        return prog
    consumers = prog.consumers()
    producer = prog.producers()
    outputs = set(prog.outputs)
    replace, gone = {}, set()
    for r in prog.nodes:
        if r.kind != "kernel" or r.op not in OPS or r.ctrl or len(r.inputs) != 2:
            continue
        f = producer.get(r.inputs[0])
        spec = prog.slot_specs.get(r.inputs[0])
        if (f is None or f.kind != "fused" or f.op != "Fused" or getattr(f, "spec", None) is None
                or f.ctrl or len(f.outputs) != 1 or consumers.get(r.inputs[0]) != 1
                or r.inputs[0] in outputs or spec is None or spec.shape is None
                or r.attrs.get("T") != f.spec[0] or np.dtype(f.spec[0]).kind != "f"):
            continue
        k = _trailing_axes(prog, r, len(spec.shape))
        if k is None:
            continue
        replace[id(r)] = _node(f, r, k, prog.consts[r.inputs[1]], fusion)
        gone.add(id(f))
    if not replace:
        return prog
    prog.nodes = [replace.get(id(n), n) for n in prog.nodes if id(n) not in gone]
    prog.fusions += len(replace)
    prog.notes.append(f"fuse_reduce: {len(replace)} elementwise chains summed as they run")
    return prog


def _node(f, r, k, axis, fusion):
    n = Node(r.name, "Fused", "fused", list(f.inputs), list(r.outputs), where=r.where)
    n.fused_ops = tuple(f.fused_ops) + (r.op,)
    n.heavy = f.heavy or r.heavy
    n.out_specs = r.out_specs
    n.fn = _runner(f, r, k, axis, fusion)
    return n


def _runner(f, r, k, axis, fusion):
    dt, n_in, steps = f.spec
    mean = r.op == "Mean"
    built = {}   # input shapes -> (kernels, rows, cols, output shape) or None

    def run_fused_reduce(arrays, out_specs, out=None):
        key = tuple(a.shape for a in arrays)
        got = built.get(key, False)
        if got is False:
            got = _plan(key)
            if len(built) < 64:
                built[key] = got
        if got is None:
            return _unfused(arrays)
        kern, rows, cols, shape = got
        res = executor.alloc.empty(shape, dt)
        try:
            fusion.run_rows_sum(kern, arrays, res, rows, cols, len(steps))
        except Unsupported as u:   # its loop compiles in the background (deferred.py)
            if not getattr(u, "deferred", False):
                raise
            return _unfused(arrays)
        if mean:   # as reduction_ops.mean: the sum divided by the count
            np.divide(res, res.dtype.type(cols), out=res)
        return [res]

    def _plan(shapes):
        full = (tuple(f.out_specs[0].shape) if f.out_specs is not None
                else np.broadcast_shapes(*shapes))
        cols = math.prod(full[len(full) - k:])
        rows = math.prod(full[:len(full) - k])
        if cols == 0 or rows == 0:
            return None
        p = fusion.plan(shapes, full)
        if p is None or (p[2] != cols and not all(q in "fs" for q in p[0])):
            return None
        keep = r.attrs.get("keep_dims", False)
        shape = full[:len(full) - k] + ((1,) * k if keep else ())
        return fusion.build_rows_sum(dt, n_in, steps, p[0]), rows, cols, shape

    def _unfused(arrays):
        """The pair one after the other: the chain by its own runner (ours, or TensorFlow's
        kernels while its loop compiles), then our reduction (the fused loop's bits), or
        TensorFlow's while that compiles in the background; a writable array out."""
        y = f.fn(arrays, f.out_specs)[0]
        try:
            return executor.run_kernel(r.kdef, r.shape_fn, [y, axis], r.attrs, r.out_specs)
        except Unsupported as u:
            if not getattr(u, "deferred", False):
                raise
            why = u
        executor.ledger.fallback(r.op, f"runtime:{why}")
        return [np.array(executor.as_numpy(executor.stock_outputs(r, [y, axis])[0]))]

    run_fused_reduce.declines = True   # a compile in the background: the pair on TensorFlow
    return run_fused_reduce
