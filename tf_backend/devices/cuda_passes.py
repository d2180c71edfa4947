"""The CUDA device's load-time passes over a program (data in, data out). TensorFlow-free.

fold_affine: a product with a constant filter (Conv2D, MatMul) followed by per-channel Mul/AddV2
by constants (inference batch norm after canonicalize, a bias) becomes the product with the
scale folded into the filter and one AddV2 of the folded shift.
fuse_elementwise: a chain of table elementwise ops whose intermediates have one reader becomes
one `fused` node running one generated kernel (kernels/gpu/elementwise.fused); node.spec holds
the chain as data.
"""
import numpy as np

from kernels.elementwise_table import TABLE

from shape_fns import Spec

from ..program.ir import Node

PRODUCTS = ("Conv2D", "MatMul")


def _host_const(prog, s):
    return prog.host_consts.get(s) if hasattr(prog, "host_consts") else None


def fold_affine(prog, device):
    consumers = prog.consumers()
    readers = {}
    for n in prog.nodes:
        for s in n.inputs:
            readers.setdefault(s, []).append(n)
    dead, folded = set(), 0
    for p in list(prog.nodes):
        if p.kind != "kernel" or p.op not in PRODUCTS or id(p) in dead:
            continue
        if p.op == "MatMul" and (p.attrs.get("transpose_b") or p.attrs.get("transpose_a")):
            continue
        w = _host_const(prog, p.inputs[1])
        if w is None or w.dtype.kind != "f" or consumers.get(p.inputs[1]) != 1:
            continue
        k = w.shape[-1]
        scale = np.ones(k, np.float64)
        shift = np.zeros(k, np.float64)
        chain, s = [], p.outputs[0]
        while consumers.get(s) == 1:
            (c,) = readers[s]
            if c.kind != "kernel" or c.op not in ("Mul", "AddV2") or len(c.inputs) != 2:
                break
            other = c.inputs[1] if c.inputs[0] == s else c.inputs[0]
            v = _host_const(prog, other)
            out = prog.slot_specs.get(c.outputs[0])
            here = prog.slot_specs.get(s)
            if v is None or v.size != k or (v.ndim and v.shape[-1] != k) or out is None \
                    or here is None or out.shape != here.shape or out.dtype != here.dtype:
                break
            v = v.reshape(-1).astype(np.float64)
            if c.op == "Mul":
                scale, shift = scale * v, shift * v
            else:
                shift = shift + v
            chain.append(c)
            s = c.outputs[0]
        if not chain:
            continue
        if not np.all(scale == 1):
            w2 = (w.astype(np.float64) * scale).astype(w.dtype)
            slot = prog.new_slot(f"{p.name}/folded_filter")
            prog.slot_specs[slot] = prog.slot_specs[p.inputs[1]]
            prog.host_consts[slot] = w2
            prog.consts[slot] = device.copy_in(w2)
            p.inputs[1] = slot
        last = chain[-1]
        b = shift.astype(prog.slot_specs[last.outputs[0]].dtype)
        bslot = prog.new_slot(f"{p.name}/folded_shift")
        prog.slot_specs[bslot] = Spec((k,), b.dtype)
        prog.host_consts[bslot] = b
        prog.consts[bslot] = device.copy_in(b)
        # the last node of the chain becomes `product + shift`; the others go
        last.op, last.inputs = "AddV2", [p.outputs[0], bslot]
        last.kdef, _ = device.lookup("AddV2", last.attrs)
        for c in chain[:-1]:
            dead.add(id(c))
        folded += 1
    prog.nodes = [n for n in prog.nodes if id(n) not in dead]
    if folded:
        prog.notes.append(f"cuda fold_affine: {folded} per-channel affines folded into products")


def fuse_elementwise(prog, device):
    from kernels.gpu import elementwise as ew
    consumers = prog.consumers()
    producer = prog.producers()

    def fusable(n):
        if n.kind != "kernel" or n.op not in TABLE or len(n.outputs) != 1:
            return False
        spec = prog.slot_specs.get(n.outputs[0])
        if spec is None or spec.shape is None or spec.dtype.kind != "f":
            return False
        try:
            ew.translate(n.op, {"x": "x", "y": "y"}, n.attrs, spec.dtype)
        except ew.Untranslatable:
            return False
        return n.kdef is not None

    groups, member = [], {}
    for n in prog.nodes:
        if not fusable(n):
            continue
        # extend the group of the producer of one input when that value is read only here
        for s in n.inputs:
            p = producer.get(s)
            if p is not None and id(p) in member and consumers.get(s) == 1 \
                    and prog.slot_specs.get(s) is not None \
                    and prog.slot_specs[s].dtype == prog.slot_specs[n.outputs[0]].dtype:
                g = member[id(p)]
                if g[-1] is p:
                    g.append(n)
                    member[id(n)] = g
                    break
        else:
            g = [n]
            groups.append(g)
            member[id(n)] = g
    replace, fused = {}, 0
    for g in groups:
        if len(g) < 2 or len({s for m in g for s in m.inputs}) > ew.MAX_INPUTS:
            continue
        internal = {m.outputs[0] for m in g[:-1]}
        ins, steps = [], []
        for j, m in enumerate(g):
            refs = []
            for s in m.inputs:
                if s in internal:
                    refs.append(("step", next(i for i, q in enumerate(g) if q.outputs[0] == s)))
                else:
                    if s not in ins:
                        ins.append(s)
                    refs.append(("in", ins.index(s)))
            steps.append((m.op, dict(m.attrs), refs))
        last = g[-1]
        out_spec = prog.slot_specs[last.outputs[0]]
        node = Node(f"fused/{last.name}", "+".join(m.op for m in g), "fused", ins,
                    list(last.outputs), where=last.where)
        node.spec = (out_spec.dtype, ins, steps)
        node.out_specs = [out_spec]
        node.fused_ops = tuple(m.op for m in g)
        node.fn = _fused_fn(ew.fused(steps, len(ins), out_spec.dtype), out_spec, device)
        replace[id(last)] = node
        for m in g[:-1]:
            replace[id(m)] = None
        fused += 1
    out = []
    for n in prog.nodes:
        r = replace.get(id(n), n)
        if r is not None:
            out.append(r)
    prog.nodes = out
    if fused:
        prog.notes.append(f"cuda fuse_elementwise: {fused} chains, one kernel each")


def _fused_fn(kernel, spec, device):
    shape, dtype, allocate = spec.shape, spec.dtype, device.allocate
    static = spec.fully_defined

    def run(ins, specs, out=None):
        if out is None:
            out = allocate(shape if static else np.broadcast_shapes(*(a.shape for a in ins)),
                           dtype)
        kernel(*ins, out)
        return [out]
    return run
