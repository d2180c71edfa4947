"""Reads of a variable the program has just updated, answered by the program itself.

An optimizer step updates a slot and reads it back (Keras' Adam: `m.assign_add(...)`, then `m`
in the update of the weight; metrics: `total.assign_add(...)`, then `total / count`). Each
read-back is a TensorFlow call (20-50 us on the AVX2 EPYC VM). Where the program read the
variable before the update, the value after `AssignAdd(h, d)` / `AssignSub(h, d)` is that value
plus or minus `d`, the float operation TensorFlow's kernel does: the read becomes an alias of a
value we compute (an AddV2/Sub kernel node before the assignment). The assignment itself still
runs on TensorFlow, so the variable ends as in stock. (A read after AssignVariableOp stays a
read: TensorFlow may keep the assigned buffer as the variable's.)

Program order is the order of each variable's effects (TensorFlow's automatic control
dependencies chain every op on a resource; lowering keeps them in order). What is known of a
handle is forgotten at any other node that takes it (a call, control flow, any other op), and
nothing is forwarded unless both operands have the variable's full static shape and dtype (a
mismatched assignment then fails on TensorFlow, with its error, as in stock), and only for
small variables (MAX_ELEMENTS: counters, learning rates, metric totals, biases' slots).
"""
import math

from .canonicalize import kernel_node

UPDATES = {"AssignAddVariableOp": "AddV2", "AssignSubVariableOp": "Sub"}   # op -> its float op


def is_read(n, handles):
    """A TensorFlow ReadVariableOp of one of the program's handles."""
    return (n.kind == "stock" and n.op == "ReadVariableOp" and len(n.inputs) == 1
            and len(n.outputs) == 1 and n.inputs[0] in handles)


def is_write(n, handles):
    """A TensorFlow assignment (AssignVariableOp, or an UPDATES op) to one of the handles."""
    return (n.kind == "stock" and (n.op in UPDATES or n.op == "AssignVariableOp")
            and len(n.inputs) == 2 and not n.outputs and n.inputs[0] in handles)


def static_spec(prog, s):
    """The slot's spec when its shape is fully known, else None."""
    spec = prog.slot_specs.get(s)
    return spec if spec is not None and spec.fully_defined else None


# Variables of at most this many elements: a read costs a TensorFlow call either way (zero-copy),
# the add a pass over the data, so for large ones the read is cheaper (Keras Adam on an MLP:
# forwarding the 784x256 slots too made the step 6.7 -> 8.7 ms)
MAX_ELEMENTS = 4096


def _same(prog, a, b):
    sa, sb = static_spec(prog, a), static_spec(prog, b)
    return (sa is not None and sb is not None and sa.shape == sb.shape and sa.dtype == sb.dtype
            and math.prod(sa.shape) <= MAX_ELEMENTS)


def run(prog):
    handles = set(prog.inputs)
    value = {}       # handle slot -> the slot holding the variable's current value
    made = {}        # output slot -> the AddV2/Sub node this pass made
    nodes, forwarded = [], 0
    for n in prog.nodes:
        h = n.inputs[0] if n.inputs else None
        if is_read(n, handles):
            v = value.get(h)
            if v is not None and _same(prog, v, n.outputs[0]):
                n.kind, n.op, n.inputs, n.reason, n.raw_attrs = "alias", "Identity", [v], None, ()
                n.ctrl = []   # it reads our value, not the variable: no wait for the update
                forwarded += 1
            else:
                value[h] = n.outputs[0]
            nodes.append(n)
            continue
        if is_write(n, handles):
            cur, d = value.pop(h, None), n.inputs[1]
            # after AssignVariableOp the value is forgotten: TensorFlow may keep the assigned
            # buffer as the variable's, which an alias of it would let our kernels write into
            if n.op != "AssignVariableOp" and cur is not None and _same(prog, cur, d):
                out = prog.new_slot(f"{n.name}/forwarded")
                spec = prog.slot_specs[cur]
                m = kernel_node(f"{n.name}/forwarded", UPDATES[n.op], [cur, d], [out],
                                spec.dtype, n.where)
                if m is not None:
                    prog.slot_specs[out] = spec
                    m.out_specs = [spec]
                    nodes.append(m)
                    made[out] = m
                    value[h] = out
            nodes.append(n)
            continue
        for s in n.inputs:   # any other use of a handle: its value is no longer ours to know
            value.pop(s, None)
        nodes.append(n)
    if not forwarded:
        return prog
    # values computed here that no forwarded read came to use
    while True:
        used = {s for n in nodes for s in n.inputs} | set(prog.outputs)
        dead = {id(m) for s, m in made.items() if s not in used}
        if not dead:
            break
        nodes = [n for n in nodes if id(n) not in dead]
        made = {s: m for s, m in made.items() if id(m) not in dead}
    prog.nodes = nodes
    prog.notes.append(f"forward_writes: {forwarded} variable reads after an update answered "
                      f"by the program ({len(made)} values computed)")
    return prog
