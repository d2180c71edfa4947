"""Lower a FuncGraph (and the library functions it calls) to a Program.

Function calls are inlined; If/While/Case become control-flow nodes over sub-programs. Each op
becomes a `kernel` node when we own it with these attrs, else a `stock` node (TensorFlow's
kernel, run in program order). Identity-like ops become `alias` nodes for the identity pass.
Ops are visited in a topological order (data and control inputs), with the graph's own op order
as the tie-break: get_operations() is creation order, which is not a dependency order once
while_v2's gradient has added accumulator inputs (created later) to the forward While op.
"""
import heapq
import threading

import numpy as np

from shape_fns import Spec, Unsupported

from .. import dispatch, tf_adapter as tfa
from .ir import Node, Program

CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
IF_OPS = {"If", "StatelessIf"}
WHILE_OPS = {"While", "StatelessWhile"}
CASE_OPS = {"Case", "StatelessCase"}
ALIAS_OPS = {"Identity", "StopGradient", "Snapshot", "PreventGradient", "EnsureShape_disabled"}
NOOP_OPS = {"NoOp"}
MAX_INLINE_DEPTH = 32
# Ops that only work inside TensorFlow's graph executor: run op by op they would wait forever
# for their peers (send/recv pairs, NCCL). Their functions run whole on TensorFlow.
WHOLE_FUNCTION_OPS = {"Send", "Recv", "_Send", "_Recv", "_HostSend", "_HostRecv"}
WHOLE_FUNCTION_PREFIXES = ("Nccl", "_Nccl")
# Collectives (CollectiveReduceV2, CollectiveGatherV2, ...) are TensorFlow nodes in program
# order, the rest of the step on our kernels, when all of a function's collectives belong to one
# replica (one device: MultiWorkerMirroredStrategy's worker). Several replicas of one process in
# one function (MirroredStrategy over local devices) would wait for each other in our serial
# order: those functions run whole on TensorFlow.
COLLECTIVE_PREFIX = "Collective"
_collectives = threading.local()
XLA_CLUSTER_OPS = {"XlaClusterOutput", "XlaLaunch", "_XlaCompile", "_XlaRun", "_XlaMerge"}
# Logical CPU devices of this process (tf.config.set_logical_device_configuration, e.g. the
# replicas of MirroredStrategy(["/cpu:0", "/cpu:1"])) share the host's memory: our kernels can
# run their ops (tf_adapter.device_is_local_cpu); TensorFlow copies our CPU:0 outputs where a
# CPU:1 consumer needs them.


def _device_kind_index(name):
    """"CPU:1" for "/job:localhost/replica:0/task:0/device:CPU:1" (or "/cpu:1"); "" unplaced."""
    last = name.rsplit("/", 1)[-1]
    if last.lower().startswith("device:"):
        last = last[len("device:"):]
    return last.upper()


class Unlowerable(Exception):
    """The whole function must run on TensorFlow; `reason` goes into the ledger."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def lower(graph, name):
    outer = getattr(_collectives, "devices", None)
    if outer is None:       # the outermost function: sub-programs add to its set
        _collectives.devices = set()
    try:
        prog = _lower(graph, name)
        devices = _collectives.devices
        if outer is None and len(devices) > 1:
            raise Unlowerable(f"collective:{len(devices)} replicas in one function")
        return prog
    finally:
        if outer is None:
            _collectives.devices = None


def _lower(graph, name):
    dispatch.ensure_loaded()
    prog = Program(name)
    env = {}
    for t in graph.inputs:
        s = prog.new_slot(t.name)
        env[t.ref()] = s
        prog.inputs.append(s)
        prog.slot_specs[s] = _spec(t)
    _lower_ops(prog, graph, env, ctrl_prefix=(), depth=0)
    for t in graph.outputs:
        prog.outputs.append(env[t.ref()])
    return prog.finalize()


# Ops that fetch a function's data: a Keras fit/evaluate/predict step reads its batch from an
# iterator inside the function, so every shape after it has an unknown batch dimension and the
# program cannot be specialised on the function's own inputs (an iterator handle). Such a node
# is hoisted out of the program (Program.prologue): it runs first (functions.on_call), its
# outputs become extra program inputs, and a batch of concrete shape selects a program
# specialised for it, as a function input of that shape does.
PROLOGUE_OPS = ("IteratorGetNext",)


def hoist_prologue(prog):
    """Move the top-level PROLOGUE_OPS nodes that read only program inputs, wait on nothing,
    are read by no earlier node's inputs (the same iterator) and have outputs of unknown shape
    into prog.prologue; their outputs are appended to prog.inputs, in order."""
    ins, used, keep = set(prog.inputs), set(), []
    for n in prog.nodes:
        if (n.kind == "stock" and n.op in PROLOGUE_OPS and not n.ctrl and n.inputs
                and all(s in ins and s not in used for s in n.inputs)
                and any(not prog.slot_specs[s].fully_defined for s in n.outputs)):
            prog.prologue.append(n)
            prog.inputs.extend(n.outputs)
            continue
        used.update(n.inputs)
        keep.append(n)
    if prog.prologue:
        prog.nodes = keep
        prog.notes.append("prologue: " + ", ".join(f"{n.op} [{n.name}]" for n in prog.prologue)
                          + " runs before the program; its outputs are inputs")
        prog.finalize()
    return prog


def _spec(t):
    shape = None if t.shape.rank is None else tuple(t.shape.as_list())
    dt = t.dtype.as_numpy_dtype if t.dtype.is_numpy_compatible else np.object_
    try:
        return Spec(shape, dt)
    except TypeError:
        return Spec(shape, np.object_)


def _lower_ops(prog, graph, env, ctrl_prefix, depth):
    """Append nodes for graph's ops; env maps graph tensors (refs) to slots.

    ctrl_prefix: node ids every root node here must wait for (the control inputs of an inlined
    call). Returns the nodes added, so a caller can order after them.
    """
    op_node = {}        # graph op name -> Node (for control edges)
    added = []
    inputs = {t.ref() for t in graph.inputs}
    for op in topological_order(graph):
        if op.type == "Placeholder" and all(o.ref() in inputs for o in op.outputs):
            continue
        if op.type in WHOLE_FUNCTION_OPS or op.type.startswith(WHOLE_FUNCTION_PREFIXES):
            raise Unlowerable(f"collective:{op.type}")
        if op.type.startswith(COLLECTIVE_PREFIX):
            _collectives.devices.add(_device_kind_index(op.device))
        if op.type in XLA_CLUSTER_OPS:
            # tf.xla.experimental.compile: the cluster's ops only mean something to TensorFlow's
            # own graph rewriting (EncapsulateXlaComputationsPass), so the function runs there
            raise Unlowerable(f"xla_cluster:{op.type}")
        if op.device and not tfa.device_is_local_cpu(op.device):
            raise Unlowerable(f"device_placement:{op.device}")
        ins = []
        for t in op.inputs:
            if t.ref() not in env:
                raise Unlowerable(f"unbound_input:{t.name}")
            ins.append(env[t.ref()])
        ctrl = [op_node[c.name] for c in op.control_inputs if c.name in op_node]
        ctrl += list(ctrl_prefix) if not op.inputs and not op.control_inputs else []
        where = tfa.OpWhere(op)
        if op.type in CALL_OPS and not tfa.call_must_compile(op):
            nodes = _inline_call(prog, graph, op, ins, ctrl, env, depth)
            added.extend(nodes)
            if nodes:
                op_node[op.name] = _barrier(prog, op, nodes, added)
            continue
        outs = [prog.new_slot(o.name) for o in op.outputs]
        for o, s in zip(op.outputs, outs):
            env[o.ref()] = s
            prog.slot_specs[s] = _spec(o)
        node = _make_node(prog, graph, op, ins, outs, ctrl, where, depth)
        if node is None:  # a constant: its value lives in prog.consts
            continue
        prog.add(node)
        op_node[op.name] = node
        added.append(node)
    return added


def topological_order(graph):
    """graph's ops so that each comes after the producers of its data and control inputs.

    Kahn's algorithm; among ready ops the one earliest in get_operations() goes first, so an
    already ordered graph keeps its order exactly and stateful ops keep program order wherever
    the dependencies allow. A cycle raises Unlowerable (the function runs whole on TensorFlow).
    """
    ops = graph.get_operations()
    index = {op.name: i for i, op in enumerate(ops)}
    waiting = [0] * len(ops)
    users = [[] for _ in ops]
    for i, op in enumerate(ops):
        deps = {index.get(t.op.name) for t in op.inputs}
        deps.update(index.get(c.name) for c in op.control_inputs)
        deps.discard(None)   # not an op of this graph: left for the unbound-input check
        deps.discard(i)
        waiting[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(ops[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(ops):
        stuck = min(i for i, n in enumerate(waiting) if n > 0)
        raise Unlowerable(f"cycle:{ops[stuck].name}")
    return order


def _barrier(prog, op, nodes, added):
    """A noop standing for an inlined call, so control edges on the call still order things."""
    n = prog.add(Node(op.name, "NoOp", "noop", [], [], ctrl=list(nodes)))
    added.append(n)
    return n


def _inline_call(prog, graph, op, ins, ctrl, env, depth):
    if depth >= MAX_INLINE_DEPTH:
        raise Unlowerable("call_depth")
    fname = op.get_attr("f").name
    callee = tfa.function_graph(fname, graph)
    sub_env = {}
    for t, s in zip(callee.inputs, ins):
        sub_env[t.ref()] = s
    if ctrl:
        gate = prog.add(Node(op.name + "/ctrl", "NoOp", "noop", [], [], ctrl=list(ctrl)))
        prefix = (gate,)
    else:
        gate, prefix = None, ()
    nodes = _lower_ops(prog, callee, sub_env, prefix, depth + 1)
    for o, t in zip(op.outputs, callee.outputs):
        env[o.ref()] = sub_env[t.ref()]
    return ([gate] if gate else []) + nodes


def _make_node(prog, graph, op, ins, outs, ctrl, where, depth):
    t = op.type
    if t == "Const":
        prog.consts[outs[0]] = tfa.const_value(op)
        return None
    if t in ALIAS_OPS or t == "IdentityN":
        return Node(op.name, t, "alias", ins, outs, ctrl=ctrl, where=where)
    if t in NOOP_OPS:
        return Node(op.name, t, "noop", [], [], ctrl=ctrl, where=where)
    if t in IF_OPS or t in WHILE_OPS or t in CASE_OPS:
        return _control_flow(graph, op, ins, outs, ctrl, where, depth)
    if t in CALL_OPS:   # a call XLA must compile (tfa.call_must_compile; others are inlined)
        return _xla_call(op, ins, outs, ctrl, where)
    node = Node(op.name, t, "stock", ins, outs, ctrl=ctrl, where=where)
    node.raw_attrs = tfa.raw_attrs(op)
    layout = _data_format(node.raw_attrs)
    info = dispatch.info_for(t)
    node.stateful = bool(tfa.graph_op_def(op).is_stateful)
    if t in tfa.KERNEL_STATE_OPS:
        node.state_key = (graph.name, op.name)
    if info is None:
        node.reason = "not_an_op"
        return _stock_checked(node, layout)
    if info.reason is not None:
        node.reason = info.reason
        return _stock_checked(node, layout)
    attrs = tfa.graph_op_attrs(op)
    if any(v is None for k, v in attrs.items() if k in info.type_attrs):
        node.reason = "dtype:unsupported"
        return _stock_checked(node, layout)
    kdef, reason = dispatch.HOST.lookup(t, attrs)
    if kdef is None:
        node.reason = reason
        return _stock_checked(node, layout)
    if layout and layout.startswith("NC") and _declines(prog, info, ins, attrs):
        node.reason = f"layout:{layout}"      # our kernel declines it: as a TensorFlow node
        return _stock_checked(node, layout)
    node.kind, node.kdef, node.attrs = "kernel", kdef, attrs
    node.shape_fn, node.value_free = info.shape_fn, info.value_free
    return node


def _declines(prog, info, ins, attrs):
    """Does the op's shape fn send these static inputs back to TensorFlow (Unsupported)?"""
    specs = []
    for s in ins:
        sp = prog.slot_specs.get(s)
        if sp is None:
            return False
        specs.append(Spec(sp.shape, sp.dtype, prog.consts.get(s)))
    try:
        info.shape_fn(specs, attrs)
    except Unsupported:
        return True
    except Exception:  # noqa: BLE001 - an error here is the node's to raise at run time
        return False
    return False


def _data_format(raw_attrs):
    d = dict(zip(raw_attrs[::2], raw_attrs[1::2])).get("data_format")
    return d.decode() if isinstance(d, bytes) else d


def _xla_call(op, ins, outs, ctrl, where):
    """A call to a `jit_compile=True` function (Keras' grouped convolutions): one TensorFlow
    node that executes the function by name, so eager's runtime compiles it with XLA as stock's
    does (inlined, or as the PartitionedCall op itself, it would run without XLA: CPU TensorFlow
    has no grouped convolution kernel). The rest of the enclosing function stays ours."""
    node = Node(op.name, op.type, "stock", ins, outs, ctrl=ctrl, where=where,
                attrs={"xla_function": op.get_attr("f").name})
    node.stateful = bool(tfa.graph_op_def(op).is_stateful)
    node.reason = "xla_must_compile"
    return node


def _stock_checked(node, layout):
    """A channels-first op left to TensorFlow is only valid after Grappler's layout rewrite
    (e.g. CPU Conv3D has no NCDHW kernel): op by op it would fail, so the function runs whole."""
    if layout and layout.startswith("NC"):
        raise Unlowerable(f"layout:{node.op}:{layout}")
    return node


def _control_flow(graph, op, ins, outs, ctrl, where, depth):
    t = op.type
    if t in IF_OPS:
        names = [op.get_attr("then_branch").name, op.get_attr("else_branch").name]
        kind = "if"
    elif t in WHILE_OPS:
        names = [op.get_attr("cond").name, op.get_attr("body").name]
        kind = "while"
    else:
        names = [f.name for f in op.get_attr("branches")]
        kind = "case"
    subs = []
    for n in names:
        g = tfa.function_graph(n, graph)
        subs.append(lower(g, n))
    node = Node(op.name, t, kind, ins, outs, ctrl=ctrl, where=where)
    node.subs = tuple(subs)
    node.stateful = bool(tfa.graph_op_def(op).is_stateful)
    return node
