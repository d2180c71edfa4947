"""Variable updates whose new value the program computes: AssignSub/AssignAdd -> AssignVariableOp.

An optimizer step ends with `w.assign_sub(lr * grad)` per weight. TensorFlow's AssignSubVariableOp
reads the variable and the update and writes the variable, on its own threads for big ones
(an MLP step's 784x512 weight: 170 us inside our program against 40-60 us alone, on the AMD
EPYC Zen 5; TensorFlow's intra-op pool competes with numba's team for the cores). Where the
program read the variable earlier and nothing else touched its handle since, the value after
the update is that read minus (plus) the update: an elementwise Sub (AddV2) node here, which
fuse_elementwise and epilogue then fold into the kernel that computes the update (the weight
gradient's product: one pass writing `w - lr * (x^T dy)`, both roundings as TensorFlow's), and
the assignment becomes AssignVariableOp of that value. TensorFlow's AssignVariableOp keeps the
assigned buffer as the variable's (no copy, ~10 us): our array then belongs to the variable (the
program's only use of the new value is the assignment, and the allocation pool reuses a buffer
only once nothing references it).

Same rules as forward_writes: program order is each variable's order of effects; whatever is
known of a handle is forgotten at any other node that takes it; both operands must have the
variable's full static shape and dtype (AssignVariableOp would take any shape: a mismatched
update must fail as in stock, so it stays on TensorFlow). An update whose variable the program
reads again before its next write is left to forward_writes when the variable is small (it
answers that read from the program). Not in loop bodies (compile_loops hoists their reads).
"""
import math

from .canonicalize import kernel_node
from .forward_writes import MAX_ELEMENTS, UPDATES, is_read, is_write, static_spec


def _read_again(nodes, i, h, handles):
    """Is variable `h` read after node i before anything else takes its handle?"""
    for n in nodes[i + 1:]:
        if h in n.inputs:
            return is_read(n, handles)
    return False


def run(prog):
    if getattr(prog, "nested", False):
        return prog
    handles = set(prog.inputs)
    value = {}       # handle slot -> a slot holding the variable's current value (a read)
    nodes, rewritten = [], 0
    for i, n in enumerate(prog.nodes):
        h = n.inputs[0] if n.inputs else None
        if is_read(n, handles):
            value[h] = n.outputs[0]
            nodes.append(n)
            continue
        if n.op in UPDATES and is_write(n, handles):
            cur, d = value.pop(h, None), n.inputs[1]
            sc = static_spec(prog, cur) if cur is not None else None
            sd = static_spec(prog, d)
            m = None
            if (sc is not None and sd is not None and sc.shape == sd.shape
                    and sc.dtype == sd.dtype
                    and not (math.prod(sc.shape) <= MAX_ELEMENTS
                             and _read_again(prog.nodes, i, h, handles))):
                out = prog.new_slot(f"{n.name}/value")
                m = kernel_node(f"{n.name}/value", UPDATES[n.op], [cur, d], [out], sc.dtype,
                                n.where)
            if m is not None:
                prog.slot_specs[out] = sc
                m.out_specs = [sc]
                nodes.append(m)
                n.op, n.inputs = "AssignVariableOp", [h, out]
                n.raw_attrs = tuple(n.raw_attrs) + ("validate_shape", False)
                rewritten += 1
            nodes.append(n)
            continue
        for s in n.inputs:   # any other use of a handle: its value is no longer ours to know
            value.pop(s, None)
        nodes.append(n)
    if rewritten:
        prog.nodes = nodes
        prog.notes.append(f"computed_updates: {rewritten} variable updates computed by the "
                          f"program, assigned by AssignVariableOp")
    return prog
