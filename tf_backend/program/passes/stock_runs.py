"""Runs of TensorFlow's variable ops as one TensorFlow call.

group_stock gathers a program's TensorFlow nodes into runs and read_runs merges the reads among
them; a training step still makes one eager call per assignment (a Keras Adam step: three per
variable, at the end of the step, 50-270 us each on the AVX2 EPYC VM against ~10-20 us back to
back in a loop). Here each run of MIN_OPS or more consecutive variable ops (tf_adapter.GROUP_OPS
nodes and `reads` nodes, on the program's own handles) becomes one `stock` node that
TensorFlow runs as a graph function (tf_adapter.execute_group), its ops chained by control
edges in the run's order, so each variable sees the same sequence of reads and writes as
before. Aliases between the members (forwarded reads) move after the group; a member reading
an alias's value reads its source.
"""
import math

from ... import tf_adapter as tfa
from ..ir import Node
from .batch_reads import redirect_ctrl

# One group call costs ~75 us plus ~2 us an op; the same ops back to back as eager calls ~40 us
# for the first and ~10 us for each next (AVX2 EPYC, /tmp-style microbenchmark of N
# AssignAddVariableOps after a 16 MB pass: N=2 48 vs 80 us grouped, 4: 66 vs 81, 8: 103 vs 89,
# 16: 182 vs 105): runs shorter than this stay separate calls
MIN_OPS = 6
# An op over this many elements stays its own eager call: TensorFlow's Eigen kernels split such
# an update over the intra-op pool, and inside a graph function its executor also hands the
# op to another thread and waits for it (AMD EPYC Zen 5, one AssignSubVariableOp: 64K elements
# 28 us in a function vs 8 eager; 128K: 90 vs 32; an MLP step's six updates with a 784x256
# weight 143-177 us as a group vs 109-120 as eager calls)
GROUP_MAX_ELEMENTS = 1 << 17


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _big(prog, slot):
    sp = prog.slot_specs.get(slot)   # (a resource handle is a scalar)
    return sp is not None and sp.fully_defined and math.prod(sp.shape) >= GROUP_MAX_ELEMENTS


def _ops(n, handles, prog):
    """[(op, input slots, flat attrs)] of a node that can join a group, else None."""
    if n.attrs.get("loop_invariant") or n.subs:
        return None
    if n.kind == "reads":
        if not all(s in handles for s in n.inputs):
            return None
        return [("ReadVariableOp", [s], ("dtype", d)) for s, d in zip(n.inputs, n.raw_attrs)]
    if (n.kind != "stock" or n.op not in tfa.GROUP_OPS or n.attrs.get("xla_function")
            or not n.inputs or any(_big(prog, s) for s in n.inputs)):
        return None
    flat = _freeze(tuple(n.raw_attrs))
    for k, s in enumerate(n.inputs):
        t = tfa.group_input_type(n.op, k, flat)
        if t is None or (t == "resource" and s not in handles):
            return None
    return [(n.op, list(n.inputs), flat)]


def _group(run, aliases, later_uses, prog_outputs):
    """The `stock` node for a run of member nodes (each with its ops)."""
    source = {a.outputs[0]: a.inputs[0] for a in aliases}
    made, in_slots, in_types, members = {}, [], [], []
    for n, ops in run:
        outs = iter(n.outputs)
        for op, ins, flat in ops:
            refs = []
            for k, s in enumerate(ins):
                while s in source:
                    s = source[s]
                if s in made:
                    refs.append(("o",) + made[s])
                    continue
                if s not in in_slots:
                    in_slots.append(s)
                    in_types.append(tfa.group_input_type(op, k, flat))
                refs.append(("i", in_slots.index(s)))
            j = len(members)
            for m in range(tfa.GROUP_OUTPUTS.get(op, 0)):
                made[next(outs)] = (j, m)
            members.append((op, tuple(refs), flat, n.name))
    exported = [s for s in made if s in later_uses or s in prog_outputs]
    desc = (tuple(in_types), tuple(members), tuple(made[s] for s in exported))
    nodes = [n for n, _ in run]
    # (control edges to the moved aliases are dropped: an alias only renames a value)
    ids = {id(n) for n in nodes} | {id(a) for a in aliases}
    g = Node(f"{nodes[0].name}+{len(members) - 1}", tfa.GROUP_NODE_OP, "stock", in_slots,
             exported, ctrl=[c for n in nodes for c in n.ctrl if id(c) not in ids],
             attrs={"group": desc, "nodes": nodes}, where=nodes[0].where)
    g.reason = nodes[0].reason
    g.stateful = True
    return g


def run(prog):
    if getattr(prog, "nested", False):   # loop bodies: compile_loops hoists their reads
        return prog
    handles = set(prog.inputs)
    uses = {}
    for i, n in enumerate(prog.nodes):
        for s in n.inputs:
            uses.setdefault(s, []).append(i)
    prog_outputs = set(prog.outputs)
    out, seq, members, aliases, replaced = [], [], [], [], {}
    groups = ops_in = 0

    def flush(end):
        nonlocal groups, ops_in
        n_ops = sum(len(o) for _, o in members)
        if n_ops < MIN_OPS or len(members) < 2 and members[0][0].kind == "reads":
            out.extend(seq)
        else:
            ids = {id(n) for n, _ in members}
            # values used outside the run: by a later node or one of the moved aliases
            later = {s for n, _ in members for s in n.outputs
                     if any(i >= end for i in uses.get(s, ()))}
            later |= {a.inputs[0] for a in aliases}
            g = _group(members, aliases, later, prog_outputs)
            out.append(g)
            out.extend(aliases)
            for n, _ in members:
                replaced[id(n)] = g
            for a in aliases:
                a.ctrl = [c for c in a.ctrl if id(c) not in ids] + [g]
            groups += 1
            ops_in += n_ops
        seq.clear()
        members.clear()
        aliases.clear()

    for i, n in enumerate(prog.nodes):
        ops = _ops(n, handles, prog)
        if ops is not None:
            seq.append(n)
            members.append((n, ops))
            continue
        if members and n.kind == "alias" and len(n.inputs) == 1:
            seq.append(n)
            aliases.append(n)
            continue
        if members:
            flush(i)
        else:
            out.extend(seq)
            seq.clear()
            aliases.clear()
        out.append(n)
    if members:
        flush(len(prog.nodes))
    else:
        out.extend(seq)
    if not groups:
        return prog
    redirect_ctrl(out, replaced)
    prog.nodes = out
    prog.notes.append(f"stock_runs: {ops_in} variable ops in runs -> {groups} TensorFlow calls")
    return prog
