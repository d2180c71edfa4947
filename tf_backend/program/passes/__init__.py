"""Program passes, each a small module: `run(program) -> program` (in place), notes in program.notes.

TF_BACKEND_DISABLE_PASSES=fuse_elementwise,const_fold turns passes off (for A/B and debugging).
"""
import os

from . import (batch_reads, canonicalize, compile_loops, compile_regions, computed_updates,
               const_fold, dce, epilogue, forward_writes, fuse_elementwise, fuse_reduce,
               group_stock, identity, inplace, loop_reads, memo, pool_relu_grad, read_runs,
               schedule, shapes, stock_runs, tensor_lists)

PIPELINE = (tensor_lists, identity, canonicalize, shapes, const_fold, dce, computed_updates,
            batch_reads, pool_relu_grad, fuse_elementwise, fuse_reduce, epilogue, memo, forward_writes,
            group_stock, read_runs, stock_runs, compile_regions, inplace, schedule)
# after the sub-programs are optimised (their reads batched, their aliases gone)
POST_SUBS = (loop_reads, compile_loops)
# device-independent: what program files keep (tf_backend.export) and what a tf.function gets
# before it is placed on a device other than the host CPU path (tf_backend/on_device.py); the
# device's own passes run when the program is placed there (Device.prepare)
PORTABLE = (identity, canonicalize, shapes, const_fold, dce)


SHADOW_OFF = {"tensor_lists", "canonicalize", "fuse_elementwise", "fuse_reduce", "epilogue",
              "pool_relu_grad", "inplace", "batch_reads", "read_runs", "stock_runs",
              "forward_writes", "computed_updates", "memo", "compile_loops", "compile_regions"}


def _disabled():
    off = {p.strip() for p in os.environ.get("TF_BACKEND_DISABLE_PASSES", "").split(",") if p.strip()}
    from ... import dispatch
    if dispatch.mode == "shadow":   # each op stays a node TensorFlow can run for comparison
        off |= SHADOW_OFF
    return off


def enabled_passes():
    off = _disabled()
    return [p for p in PIPELINE if p.__name__.rsplit(".", 1)[-1] not in off]


def optimize(prog, table=None):
    """The host CPU path's pipeline (PIPELINE, then POST_SUBS), or the passes of `table` only,
    on a program and its sub-programs."""
    for p in enabled_passes() if table is None else table:
        p.run(prog)
        prog.finalize()
    for n in prog.nodes:
        for sub in n.subs:
            sub.nested = True   # a branch or loop body (stock_runs leaves their reads alone)
            optimize(sub, table)
    if table is not None:
        return prog
    for p in POST_SUBS:
        if p.__name__.rsplit(".", 1)[-1] not in _disabled():
            p.run(prog)
    return prog
