"""Batched variable reads: when the only nodes a program leaves to TensorFlow are
ReadVariableOps of handles the program receives as inputs (an inference function: no
assignments, random ops, iterators or other effects anywhere in it, sub-programs included),
all those reads become one `reads` node that TensorFlow runs as a single function call
(tf_adapter.read_variables). A ResNet-50 call reads 320 variables: one trip through
TFE_Py_Execute instead of 320. With no writes in the program, reading every variable at its
start returns what reading each one in program order would.
"""
from ..ir import Node

MIN_READS = 2


def _only_reads(prog):
    for n in prog.nodes:
        if n.kind == "stock" and n.op != "ReadVariableOp":
            return False
        if any(not _only_reads(sub) for sub in n.subs):
            return False
    return True


def _dtype_enum(node):
    flat = node.raw_attrs
    for i in range(0, len(flat) - 1, 2):
        if flat[i] == "dtype":
            return flat[i + 1]
    return None


def run(prog):
    if not _only_reads(prog):
        return prog
    inputs = set(prog.inputs)
    reads = [n for n in prog.nodes
             if n.kind == "stock" and n.op == "ReadVariableOp" and not n.ctrl
             and len(n.inputs) == 1 and n.inputs[0] in inputs and len(n.outputs) == 1
             and _dtype_enum(n) is not None]
    if len(reads) < MIN_READS:
        return prog
    batch = reads_node("batched_reads", reads)
    gone = {id(n) for n in reads}
    nodes = []
    for n in prog.nodes:
        if n is reads[0]:
            nodes.append(batch)
        if id(n) not in gone:
            nodes.append(n)
    redirect_ctrl(nodes, {i: batch for i in gone})
    prog.nodes = nodes
    prog.notes.append(f"batch_reads: {len(reads)} ReadVariableOps -> one TensorFlow call")
    _mark_variable_filters(prog, set(batch.outputs))
    return prog


def reads_node(name, reads):
    """One `reads` node for ReadVariableOp nodes (tf_adapter.read_variables runs it), with
    their control edges from outside the group."""
    members = {id(r) for r in reads}
    batch = Node(name, "ReadVariableOp", "reads", [r.inputs[0] for r in reads],
                 [r.outputs[0] for r in reads],
                 ctrl=[c for r in reads for c in r.ctrl if id(c) not in members],
                 raw_attrs=tuple(_dtype_enum(r) for r in reads), where=reads[0].where)
    batch.reason = reads[0].reason
    batch.stateful = True
    return batch


def redirect_ctrl(nodes, replaced):
    """Control edges to a replaced node (id -> its replacement) point at the replacement,
    each once."""
    for n in nodes:
        if n.ctrl and any(id(c) in replaced for c in n.ctrl):
            seen, ctrl = set(), []
            for c in n.ctrl:
                c = replaced.get(id(c), c)
                if id(c) not in seen:
                    seen.add(id(c))
                    ctrl.append(c)
            n.ctrl = ctrl


VARIABLE_FILTER_OPS = ("Conv2D", "DepthwiseConv2dNative", "MatMul", "BatchMatMulV2",
                       "BatchMatMulV3")


def _mark_variable_filters(prog, read_slots):
    """Conv2D, DepthwiseConv2dNative and (Batch)MatMul nodes whose filter (second operand) is a
    variable read here, or
    a reshape of one (Keras' attention projections reshape their kernels; programs hand out
    reshapes as views): with no variable writes in the program, the kernels may keep forms of
    it between calls (Winograd transforms, packed panels, transposed weights, tiled depthwise
    filters: kernels/cpu/filter_cache.py;
    training programs and eager calls derive them every call or not at all)."""
    from ...executor import VIEW_OPS, view_source
    weights = set(read_slots)
    for n in prog.nodes:
        if n.kind == "kernel" and n.op in VIEW_OPS and n.inputs and view_source(n) in weights:
            weights.update(n.outputs)
        elif n.kind == "kernel" and n.op in VARIABLE_FILTER_OPS and len(n.inputs) == 2 \
                and n.inputs[1] in weights:
            n.attrs = {**n.attrs, "_filter_is_variable": True}
