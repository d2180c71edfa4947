"""Elementwise fusion: chains/trees of table ops become one generated kernel (one memory pass).

A group grows backwards from a root node through producers that are fusable elementwise
kernels of the same dtype, whose result has exactly one consumer and is not a program output,
and that carry no control edges. At run time each input gets a read pattern
(the host device's "fusion" library: plan); a broadcast no pattern covers runs the original
ops unfused. A device without that library gets no fused nodes.
"""
import numpy as np

from shape_fns import Unsupported

from kernels.elementwise_table import TABLE

from ... import devices, executor
from ..ir import Node

MAX_GROUP = 48


def _dtype(n):
    return n.attrs.get("T")


def _fusable(n, fusion):
    return (n.kind == "kernel" and n.op in TABLE and not n.ctrl and _dtype(n) is not None
            and fusion.fusable(n.op, _dtype(n)))


def run(prog):
    fusion = devices.library("fusion")
    if fusion is None:
        return prog
    consumers = prog.consumers()
    ctrl_preds = {id(c) for n in prog.nodes for c in n.ctrl}
    producer = prog.producers()
    absorbed = set()
    groups = []
    for root in reversed(prog.nodes):
        if id(root) in absorbed or not _fusable(root, fusion):
            continue
        dt = _dtype(root)
        members = []

        def grow(n):
            members.append(n)
            for s in n.inputs:
                p = producer.get(s)
                if (p is not None and id(p) not in absorbed and p is not root
                        and _fusable(p, fusion)
                        and _dtype(p) == dt and consumers.get(s) == 1 and id(p) not in ctrl_preds
                        and len(members) < MAX_GROUP):
                    absorbed.add(id(p))
                    grow(p)

        grow(root)
        if len(members) >= 2:
            absorbed.add(id(root))
            groups.append((root, members))
    if not groups:
        return prog
    replace = {}
    for root, members in groups:
        replace[id(root)] = _fused_node(prog, root, members, fusion)
    kept = []
    for n in prog.nodes:
        if id(n) in replace:
            kept.append(replace[id(n)])
        elif id(n) not in absorbed:
            kept.append(n)
    prog.nodes = kept
    prog.fusions += len(groups)
    prog.notes.append(f"fuse_elementwise: {len(groups)} groups, "
                      f"{sum(len(m) for _, m in groups)} ops fused")
    return prog


def _fused_node(prog, root, members, fusion):
    order = sorted(members, key=lambda n: n.id)        # producers before consumers
    made = {}                                          # slot -> ("t", j)
    ext = []                                           # external input slots
    steps = []
    for j, n in enumerate(order):
        operands = []
        for s in n.inputs:
            if s in made:
                operands.append(made[s])
            else:
                if s not in ext:
                    ext.append(s)
                operands.append(("in", ext.index(s)))
        params = [n.attrs[p] for p in TABLE[n.op].params]
        steps.append((n.op, operands, params))
        made[n.outputs[0]] = ("t", j)
    dt = _dtype(root)
    node = Node(root.name, "Fused", "fused", ext, list(root.outputs), where=root.where)
    node.fused_ops = tuple(n.op for n in order)
    node.heavy = root.heavy
    node.out_specs = root.out_specs
    node.fn = _runner(fusion, dt, len(ext), steps, order, ext, root)
    node.spec = (dt, len(ext), steps)   # the fusion spec (fuse_reduce builds on it)
    return node


def _runner(fusion, dt, n_in, steps, order, ext, root):
    built = {}   # input shapes -> (kernels, patterns)

    def run_fused(arrays, out_specs, out=None):
        # out: a buffer to write into (in place: usually one of the inputs), or None
        alias = None if out is None else fusion.alias_of(arrays, out)
        key = (tuple(a.shape for a in arrays), alias)
        got = built.get(key)
        if got is None:
            shapes = key[0]
            shape = (tuple(out_specs[0].shape) if out_specs is not None
                     else np.broadcast_shapes(*shapes))
            p = fusion.plan(shapes, shape)
            if p is None:
                got = (None, shape, 0, 0, None)
            else:
                if alias is not None and (shapes[alias] != shape or p[0][alias] != "f"):
                    alias = None
                got = (fusion.build(dt, n_in, steps, p[0], alias), shape, p[1], p[2], alias)
            if len(built) < 64:
                built[key] = got
        kern, shape, rows, cols, alias = got
        if kern is None:
            return _unfused(arrays)
        if out is None or out.shape != shape or (alias is None and key[1] is not None):
            out = executor.alloc.empty(shape, dt)
        try:
            fusion.run(kern, arrays, out, rows, cols, len(steps), alias)
        except Unsupported as u:   # its loop compiles in the background (deferred.py)
            if not getattr(u, "deferred", False):
                raise
            return _on_tensorflow(arrays, u)
        return [out]

    def _one_by_one(arrays, run):
        """The group's ops in turn, each by `run(node, inputs)`; the root's value."""
        vals = dict(zip(ext, arrays))
        for n in order:
            vals[n.outputs[0]] = run(n, [vals[s] for s in n.inputs])
        return vals[root.outputs[0]]

    def _on_tensorflow(arrays, why):
        """The group's ops on TensorFlow's kernels, for this call; a writable array out, as our
        loop's would be."""
        def stock(n, ins):
            executor.ledger.fallback(n.op, f"runtime:{why}")
            return executor._stock(n, ins)[0]
        return [np.array(executor.as_numpy(_one_by_one(arrays, stock)))]

    def _unfused(arrays):
        try:
            return [_one_by_one(arrays, lambda n, ins: executor.run_kernel(
                n.kdef, n.shape_fn, ins, n.attrs)[0])]
        except Unsupported as u:   # an op's compile runs in the background (the node declines)
            if not getattr(u, "deferred", False):
                raise
            return _on_tensorflow(arrays, u)

    run_fused.declines = True   # a compile in the background: its ops on TensorFlow
    return run_fused
