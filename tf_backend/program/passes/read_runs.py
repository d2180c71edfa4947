"""Runs of variable reads as one TensorFlow call, in programs that also write variables.

batch_reads gathers every read of a program that only reads (inference). A training step writes,
so its reads must stay where they are relative to the writes; but group_stock leaves them in
runs (a Keras Adam step: 36 ReadVariableOps back to back at its start, then pairs after each
slot update). Each run of two or more consecutive ReadVariableOps of the program's own handles
becomes one `reads` node (tf_adapter.read_variables: TensorFlow's `_ReadVariablesOp`, one eager
op): nothing runs between the reads of a run, so reading them together returns what reading
them one by one would. Measured on the AVX2 EPYC VM: one eager read in a training step costs
20-50 us.
"""
from .batch_reads import _dtype_enum, reads_node, redirect_ctrl


def _read(n, inputs):
    return (n.kind == "stock" and n.op == "ReadVariableOp" and len(n.inputs) == 1
            and n.inputs[0] in inputs and len(n.outputs) == 1
            and not n.attrs.get("loop_invariant") and _dtype_enum(n) is not None)


def run(prog):
    inputs = set(prog.inputs)
    nodes, run_, replaced = [], [], {}
    merged = calls = 0

    def flush():
        nonlocal merged, calls
        if len(run_) < 2:
            nodes.extend(run_)
        else:
            batch = reads_node(f"{run_[0].name}+{len(run_) - 1}", run_)
            for r in run_:
                replaced[id(r)] = batch
            nodes.append(batch)
            merged += len(run_)
            calls += 1
        run_.clear()

    for n in prog.nodes:
        if _read(n, inputs):
            run_.append(n)
            continue
        flush()
        nodes.append(n)
    flush()
    if not merged:
        return prog
    redirect_ctrl(nodes, replaced)   # control edges to a merged read: its run's node
    prog.nodes = nodes
    prog.notes.append(f"read_runs: {merged} ReadVariableOps in runs -> {calls} TensorFlow calls")
    return prog
