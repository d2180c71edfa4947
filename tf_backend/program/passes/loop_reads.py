"""Loop-invariant variable reads: a `reads` node (or a ReadVariableOp) in a While body whose
handles the loop passes through unchanged, in a loop that writes no variable, reads once per
run of the loop (on its first iteration) and hands the same tensors to later iterations.

Keras' LSTM and GRU bodies read their kernels every step: 80 TensorFlow calls per forward of a
two-layer model over 40 steps. Reading on the first iteration, not before the loop, keeps a loop
that runs zero times from reading at all, as in stock. The executor keeps the per-run values
in a frame each While node pushes (executor._frames).
"""

STATEFUL_OK = {"ReadVariableOp"}   # stateful ops a loop may hold and still not write variables


def _writes(prog):
    for n in prog.nodes:
        if n.kind == "stock" and n.stateful and n.op not in STATEFUL_OK:
            return True
        if any(_writes(sub) for sub in n.subs):
            return True
    return False


def run(prog):
    marked = 0
    for n in prog.nodes:
        if n.kind != "while":
            continue
        cond, body = n.subs
        if _writes(cond) or _writes(body):
            continue
        invariant = {s for i, s in enumerate(body.inputs)
                     if i < len(body.outputs) and body.outputs[i] == s}
        for r in body.nodes:
            if ((r.kind == "reads" or (r.kind == "stock" and r.op == "ReadVariableOp"))
                    and not r.ctrl and r.inputs and all(s in invariant for s in r.inputs)):
                r.attrs = dict(r.attrs, loop_invariant=True)
                marked += 1
    if marked:
        prog.notes.append(f"loop_reads: {marked} variable reads once per loop run")
    return prog
