"""Constant folding: kernel nodes whose inputs are all constants run once, at compile time.

A kernel whose numba function is not compiled for these inputs yet declines (its compile runs
in a child, kernels/cpu/deferred.py; tf_backend.switch allows it under `run`): TensorFlow's
kernel folds the node instead, as stock's own constant folding would, counted in the ledger
as `runtime:compiling`. Compiling here held a recurrent classifier's cold first fit step for
3.3 s (60 folds of small Adam arithmetic, one numba compile each)."""
import numpy as np

from shape_fns import Unsupported

from ... import executor, ledger

MAX_FOLD_ELEMENTS = 1 << 16


def run(prog):
    folded = 0
    kept = []
    for n in prog.nodes:
        if (n.kind == "kernel" and not n.ctrl and n.inputs
                and all(s in prog.consts and isinstance(prog.consts[s], np.ndarray)
                        for s in n.inputs)):
            try:
                outs = _fold(n, [prog.consts[s] for s in n.inputs])
            except Exception:  # folded at run time instead, where the error belongs to a call
                outs = None
            if outs is not None and sum(o.size for o in outs) <= MAX_FOLD_ELEMENTS:
                for s, o in zip(n.outputs, outs):
                    o.flags.writeable = False
                    prog.consts[s] = o
                folded += 1
                continue
        kept.append(n)
    prog.nodes = kept
    if folded:
        prog.notes.append(f"const_fold: folded {folded} nodes")
    return prog


def _fold(node, arrays):
    try:
        return executor.run_kernel(node.kdef, node.shape_fn, arrays, node.attrs, node.out_specs)
    except Unsupported as u:
        if not getattr(u, "deferred", False):
            raise
    ledger.fallback(node.op, "runtime:compiling")
    return [np.array(executor.as_numpy(o)) for o in executor.stock_outputs(node, arrays)]
