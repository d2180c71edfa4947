"""Canonicalisation: rewrite ops into forms the fusion passes understand.

- BiasAdd (NHWC) -> AddV2: the same arithmetic, a bias broadcast over the last dim.
- FusedBatchNormV3 in inference (is_training=False, NHWC, only `y` used) ->
  y = (x - mean) * (rsqrt(variance + epsilon) * scale) + offset, TensorFlow's own formula, as
  elementwise ops on channel vectors, so the affine fuses into its neighbours.
- Transpose(Transpose(x, p1), p2) with p1 then p2 the identity -> x (Keras' recurrent layers
  stacked: one layer's output goes back to time-major, the next layer's input to batch-major).
- MatMul(Transpose(x, [1, 0]), y) -> MatMul(x, y, transpose_a=True), either operand, and
  BatchMatMul's adjoint flags for a transpose of the last two axes (real dtypes), as Grappler's
  FoldTransposeIntoMatMul does for stock's tf.function; the transpose goes when nothing else
  reads it. Not in loop bodies, whose products compile_loops splits by their flags.
"""
import numpy as np

import kernels
import shape_fns
from shape_fns import Spec

from ..ir import Node


def kernel_node(name, op, inputs, outputs, dtype, where=""):
    """A kernel node for an elementwise op, or None when no kernel takes this dtype."""
    attrs = {"T": np.dtype(dtype)}
    kdef, _ = kernels.lookup(op, "cpu", attrs)
    fn = shape_fns.get(op)
    if kdef is None or fn is None:
        return None
    n = Node(name, op, "kernel", inputs, outputs, attrs=attrs, where=where)
    n.kdef, n.shape_fn, n.value_free = kdef, fn, op in shape_fns.VALUE_FREE
    return n


def run(prog):
    consumers = prog.consumers()
    out, bias, bn = [], 0, 0
    for n in prog.nodes:
        if n.op == "BiasAdd" and n.kind == "kernel" and n.attrs.get("data_format", "NHWC") == "NHWC":
            m = kernel_node(n.name, "AddV2", n.inputs, n.outputs, n.attrs["T"], n.where)
            if m is not None:
                m.ctrl, m.out_specs = n.ctrl, n.out_specs
                out.append(m)
                bias += 1
                continue
        if n.op == "FusedBatchNormV3" and _bn_inference(n, consumers):
            new = _bn_affine(prog, n)
            if new:
                out.extend(new)
                bn += 1
                continue
        out.append(n)
    prog.nodes = out
    if bias or bn:
        prog.notes.append(f"canonicalize: {bias} BiasAdd -> AddV2, {bn} FusedBatchNormV3 -> affine")
    _transpose_pairs(prog)
    if not getattr(prog, "nested", False):
        _transpose_into_products(prog)
    return prog


# product op -> its flags for the first and second operand
_FLAGS = {"MatMul": ("transpose_a", "transpose_b"), "BatchMatMul": ("adj_x", "adj_y"),
          "BatchMatMulV2": ("adj_x", "adj_y"), "BatchMatMulV3": ("adj_x", "adj_y")}


def _links(prog):
    """(slot -> the node making it, ids of nodes another node waits for by a control edge)."""
    return ({o: n for n in prog.nodes for o in n.outputs},
            {id(c) for n in prog.nodes for c in n.ctrl})


def _transpose_into_products(prog):
    producer, waited = _links(prog)
    folded = 0
    for n in prog.nodes:
        flags = _FLAGS.get(n.op)
        if flags is None or n.kind != "kernel" or any(f not in n.attrs for f in flags):
            continue
        for k, flag in enumerate(flags):
            t = producer.get(n.inputs[k])
            if t is None or t.op != "Transpose" or t.kind != "kernel" or t.ctrl or id(t) in waited:
                continue
            perm, spec = _perm(prog, t.inputs[1]), prog.slot_specs.get(t.inputs[0])
            # (the input's static rank must be the perm's: a mismatch is Transpose's error to
            # raise; a perm of fewer than two axes never equals the swap of the last two)
            if (perm is None or spec is None or spec.shape is None or len(perm) != len(spec.shape)
                    or getattr(spec.dtype, "kind", None) != "f"
                    or (n.op == "MatMul" and len(perm) != 2)
                    or perm != list(range(len(perm) - 2)) + [len(perm) - 1, len(perm) - 2]):
                continue
            n.inputs[k] = t.inputs[0]
            n.attrs = dict(n.attrs, **{flag: not n.attrs[flag]})
            raw = list(n.raw_attrs)
            for i in range(0, len(raw) - 1, 2):
                if raw[i] == flag:
                    raw[i + 1] = n.attrs[flag]
            n.raw_attrs = tuple(raw)
            folded += 1
    if folded:
        prog.notes.append(f"canonicalize: {folded} transposes folded into products' flags")


def _perm(prog, slot):
    c = prog.consts.get(slot)
    return None if c is None else [int(p) for p in np.asarray(c).reshape(-1)]


def _transpose_pairs(prog):
    """A transpose that undoes the transpose it reads is its input's input (values are
    immutable: a consumer reads the same elements); the first goes when nothing else reads it."""
    producer, waited = _links(prog)
    sub, gone = {}, set()
    for n in prog.nodes:
        if n.op != "Transpose" or n.kind != "kernel" or n.ctrl or id(n) in waited:
            continue
        m = producer.get(n.inputs[0])
        if m is None or m.op != "Transpose" or m.kind != "kernel" or m.ctrl:
            continue
        p1, p2 = _perm(prog, m.inputs[1]), _perm(prog, n.inputs[1])
        if p1 is None or p2 is None or len(p1) != len(p2) or sorted(p1) != list(range(len(p1))):
            continue
        if all(p1[p2[i]] == i for i in range(len(p2))):
            sub[n.outputs[0]] = m.inputs[0]
            gone.add(id(n))
    if not sub:
        return
    def root(s):
        while s in sub:
            s = sub[s]
        return s

    prog.nodes = [n for n in prog.nodes if id(n) not in gone]
    for n in prog.nodes:
        n.inputs = [root(s) for s in n.inputs]
    prog.outputs = [root(s) for s in prog.outputs]
    prog.notes.append(f"canonicalize: {len(sub)} transposes undoing a transpose removed")


def _attr(n, k, default=None):
    if k in n.attrs:
        return n.attrs[k]
    raw = dict(zip(n.raw_attrs[::2], n.raw_attrs[1::2]))
    v = raw.get(k, default)
    return v.decode() if isinstance(v, bytes) else v


def _bn_inference(n, consumers):
    if n.ctrl or _attr(n, "is_training", True) or _attr(n, "data_format", "NHWC") != "NHWC":
        return False
    return all(consumers.get(s, 0) == 0 for s in n.outputs[1:])


def _bn_affine(prog, n):
    x, scale, offset, mean, var = n.inputs
    dt = prog.slot_specs.get(x)
    us = prog.slot_specs.get(scale)
    if dt is None or us is None or dt.dtype != us.dtype or dt.dtype.kind != "f":
        return None
    d = dt.dtype
    eps = prog.new_slot(n.name + "/epsilon")
    prog.consts[eps] = np.asarray(_attr(n, "epsilon", 1e-3), d)
    t = [prog.new_slot(f"{n.name}/affine{i}") for i in range(4)]
    chan = Spec(us.shape, d)
    for s in t[:2]:
        prog.slot_specs[s] = chan
    for s in t[2:]:
        prog.slot_specs[s] = Spec(dt.shape, d)
    y = n.outputs[0]
    steps = [("AddV2", [var, eps], [t[0]]), ("Rsqrt", [t[0]], [t[1]]),
             ("Mul", [t[1], scale], ["factor"]), ("Sub", [x, mean], [t[2]]),
             ("Mul", [t[2], "factor"], [t[3]]), ("AddV2", [t[3], offset], [y])]
    factor = prog.new_slot(n.name + "/factor")
    prog.slot_specs[factor] = chan
    nodes = []
    for op, ins, outs in steps:
        ins = [factor if s == "factor" else s for s in ins]
        outs = [factor if s == "factor" else s for s in outs]
        m = kernel_node(f"{n.name}/{op}", op, ins, outs, d, n.where)
        if m is None:
            return None
        nodes.append(m)
    return nodes
