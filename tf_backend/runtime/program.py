"""A loaded program: slots, nodes and kernels of one device, run serially in program order.

Constants are shared, read-only device buffers; each call gets its own value slots, so one
LoadedProgram serves many threads at once. TensorFlow-free.

Buffers are the device's (numpy arrays on the CPU, CuPy arrays on a GPU, opaque handles on the
strict test device); the runtime never looks inside one. What it knows about a buffer it records
itself, at load, per slot: whether this call's run allocated it (owned: an elementwise node may
write its result into it, and the caller may be handed it without a copy) or borrows it (a
constant, the caller's input, a view of another slot). Inputs an op reads on the host
(kernels.HOST_INPUTS: shapes, axes, paddings) reach its kernel as host numpy arrays on a device
without host memory; nothing else leaves the device until the outputs are copied out.
"""
import threading

import numpy as np

import kernels
import shape_fns
from shape_fns import BackendError, Spec, Unsupported

from .. import devices
from ..program.ir import Node, Program
from . import format as fmt
from .errors import ProgramFileError, ProgramInputError, ProgramRunError

# Ops whose output is the input's data in a new shape (a zero-copy view where the device allows)
VIEW_OPS = frozenset({"Reshape", "Squeeze", "ExpandDims"})


def _spec(dtype, shape):
    return Spec(None if shape is None else tuple(shape), np.dtype(dtype))


def build(header, blobs, device, path="<program>"):
    """An ir.Program for `device` from a file's header and weights."""
    try:
        prog = Program(header["name"])
        prog.n_slots = int(header["n_slots"])
        for slot, dtype, shape in header["slot_specs"]:
            prog.slot_specs[slot] = _spec(dtype, shape)
        for slot, blob in header["consts"]:
            a = blobs[blob]
            spec = prog.slot_specs.get(slot)
            if spec is not None and a.dtype != spec.dtype and a.dtype.kind == "f":
                a = a.astype(spec.dtype)     # stored narrower (format version 2, weights_dtype)
                a.flags.writeable = False
            prog.consts[slot] = a
        place_consts(prog, device)
        prog.inputs = [int(i["slot"]) for i in header["inputs"]]
        prog.outputs = [int(o["slot"]) for o in header["outputs"]]
        raw_nodes = header["nodes"]
    except (KeyError, TypeError, ValueError) as e:
        raise ProgramFileError(path, f"malformed header ({type(e).__name__}: {e})") from None
    shape_fns.load_all()
    nodes, missing = [], {}
    for i, r in enumerate(raw_nodes):
        try:
            kind = r["kind"]
            if kind not in fmt.KINDS:
                raise ValueError(f"unknown node kind {kind!r}")
            n = Node(r["name"], r["op"], kind, r["inputs"], r["outputs"],
                     ctrl=[nodes[c] for c in r.get("ctrl", ())],
                     attrs={k: fmt.decode_attr(v) for k, v in r.get("attrs", {}).items()},
                     where=r.get("where", ""))
            if r.get("out_specs") is not None:
                n.out_specs = [_spec(d, s) for d, s in r["out_specs"]]
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ProgramFileError(path, f"malformed node #{i} ({type(e).__name__}: {e})") from None
        if kind == "kernel":
            n.kdef, reason = device.lookup(n.op, n.attrs)
            n.shape_fn = shape_fns.get(n.op)
            n.value_free = n.op in shape_fns.VALUE_FREE
            if n.kdef is None or (n.shape_fn is None and n.out_specs is None):
                missing.setdefault(n.op, reason or "no shape fn")
        nodes.append(n)
    _check_slots(prog, nodes, path)
    if missing:
        ops = ", ".join(f"{op} ({why})" for op, why in sorted(missing.items()))
        raise devices.DeviceError(f"device {device.name!r} cannot run {path}: no kernel for {ops}")
    for n in nodes:
        prog.add(n)
    prog.finalize()
    prog = device.prepare(prog)
    return prog.finalize()


def _check_slots(prog, nodes, path):
    """Every slot in range, and written (input, constant or an earlier node) before it is read."""
    written = set(prog.inputs) | set(prog.consts)
    every = list(written) + list(prog.outputs) + [s for n in nodes for s in n.inputs + n.outputs]
    bad = [s for s in every if not (isinstance(s, int) and 0 <= s < prog.n_slots)]
    if bad:
        raise ProgramFileError(path, f"malformed header (slot {bad[0]!r} out of range)")
    for n in nodes:
        for s in n.inputs:
            if s not in written:
                raise ProgramFileError(path, f"malformed header (node '{n.name}' reads slot {s} "
                                             f"before it is written)")
        written.update(n.outputs)
    for s in prog.outputs:
        if s not in written:
            raise ProgramFileError(path, f"malformed header (output slot {s} is never written)")


class LoadedProgram:
    """`program(inputs)` -> list of numpy arrays. inputs: a list/tuple of arrays, or one array.

    On a device that can record a run and replay it (`capabilities.graphs`, e.g. a CUDA graph),
    the second call with an input signature records the run into fixed buffers and later calls
    with that signature replay it: inputs copied into the recorded buffers, one launch, outputs
    copied out. Pass `replay=False` to `load` to run node by node always.
    """

    def __init__(self, header, blobs, device, path, replay=True):
        self.path, self.device = str(path), device
        self.header = header
        self.program = build(header, blobs, device, self.path)
        self.name = self.program.name
        self.input_specs = [_spec(i["dtype"], i["shape"]) for i in header["inputs"]]
        self.input_names = [i.get("name", "") for i in header["inputs"]]
        self.output_names = [o.get("name", "") for o in header["outputs"]]
        self.bound = Bound(self.program, device)
        self._base, self.owned, self._steps = self.bound.base, self.bound.owned, self.bound.steps
        self._replay = {} if replay and getattr(device.capabilities, "graphs", False) else None
        self._lock = threading.Lock()

    def __repr__(self):
        ins = ", ".join(f"{s.dtype.name}{list(s.shape) if s.shape is not None else '[?]'}"
                        for s in self.input_specs)
        return (f"<LoadedProgram {self.name} ({ins}) on {self.device.name}, "
                f"{len(self._steps)} nodes>")

    def _check_inputs(self, inputs):
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        if len(inputs) != len(self.input_specs):
            raise ProgramInputError(f"{self.name} takes {len(self.input_specs)} inputs, "
                                    f"got {len(inputs)}")
        out = []
        for k, (x, spec) in enumerate(zip(inputs, self.input_specs)):
            a = x if isinstance(x, np.ndarray) else np.asarray(x, dtype=spec.dtype)
            bad = a.dtype != spec.dtype
            if spec.shape is not None:
                bad = bad or a.ndim != len(spec.shape) or any(
                    d is not None and d != n for d, n in zip(spec.shape, a.shape))
            if bad:
                want = "?" if spec.shape is None else ",".join(
                    "?" if d is None else str(d) for d in spec.shape)
                raise ProgramInputError(
                    f"{self.name} input {k} ({self.input_names[k]}): expected "
                    f"{spec.dtype.name}[{want}], got {a.dtype.name}{list(a.shape)}")
            out.append(a)
        return out

    def _run(self, vals):
        try:
            return self.bound.run(vals)
        except NodeError as e:
            raise _run_error(self, e.node, e.args_, e.exc) from e.exc

    def __call__(self, inputs):
        arrays = self._check_inputs(inputs)
        if self._replay is not None:
            out = self._replayed(arrays)
            if out is not None:
                return out
        device = self.device
        vals = list(self._base)
        for s, a in zip(self.program.inputs, arrays):
            vals[s] = device.copy_in(a)
        self._run(vals)
        device.synchronize()
        owned = self.owned
        result, seen = [], set()
        for s in self.program.outputs:
            v = vals[s]
            if owned[s] and id(v) not in seen:
                seen.add(id(v))
                result.append(device.copy_out(v, owned=True))
            else:
                result.append(device.copy_out(v))
        return result

    run = __call__

    def _replayed(self, arrays):
        """The outputs through a recorded run of this signature, or None (not recorded yet)."""
        key = tuple((a.dtype.str, a.shape) for a in arrays)
        rec = self._replay.get(key)
        if rec is None:
            self._replay[key] = 1          # the first call runs (and compiles) node by node
            return None
        with self._lock:
            if rec == 1:
                rec = self._replay[key] = _Recording(self, arrays)
            return rec.replay(arrays)

    def dump(self):
        return self.program.dump()


class _Recording:
    """One recorded run: device input buffers, the recorded launch, the slots it leaves."""

    def __init__(self, lp, arrays):
        device = lp.device
        self.device, self.outputs = device, lp.program.outputs
        vals = list(lp._base)
        self.inputs = []
        for s, a in zip(lp.program.inputs, arrays):
            buf = device.allocate(a.shape, a.dtype)
            device.copy_into(buf, a)
            vals[s] = buf
            self.inputs.append(buf)
        self.vals = vals
        self.graph = device.record(lambda: lp._run(vals))

    def replay(self, arrays):
        device = self.device
        for buf, a in zip(self.inputs, arrays):
            device.copy_into(buf, a)
        self.graph.replay()
        return [device.copy_out(self.vals[s]) for s in self.outputs]


def place_consts(prog, device):
    """Copy a program's constants (and its sub-programs') onto the device: prog.consts become
    device buffers, prog.host_consts keeps the host arrays (host inputs read them directly)."""
    if getattr(prog, "host_consts", None) is None:
        prog.host_consts = dict(prog.consts)
        prog.consts = {s: device.copy_in(a) for s, a in prog.consts.items()}
    for n in prog.nodes:
        for sub in n.subs:
            place_consts(sub, device)
    return prog


class NodeError(Exception):
    """A node of a bound program raised: the node, its argument buffers, the exception."""

    def __init__(self, node, args, exc):
        super().__init__(node.name)
        self.node, self.args_, self.exc = node, args, exc


class Bound:
    """The executor core: one program bound to one device, run serially in program order.

    Built once per (program, device): constant buffers in a base slot list, per-slot ownership
    (`_ownership`), one step per node: fn(argument buffers) -> output buffers. Kernel, fused and
    alias nodes run on the device; If/Case/While run bound sub-programs, reading only their
    predicate on the host. TensorFlow's own nodes (kinds stock/reads) and kernels that decline
    their inputs at run time need `tensorflow`, the host's runner of them (an object with
    `step(node, bound) -> fn`, `declined(node, bound, args, reason) -> buffers` and
    `count(program, runs)`); without it (the TensorFlow-free runtime) a program holding such a
    node does not bind, and a declined kernel is an error.
    """

    def __init__(self, prog, device, tensorflow=None):
        self.program, self.device, self.tensorflow = prog, device, tensorflow
        stuck = [n for n in prog.nodes if n.kind in ("stock", "reads")]
        if stuck and tensorflow is None:
            raise devices.DeviceError(f"{prog.name}: node '{stuck[0].name}' ({stuck[0].op}) is "
                                      f"TensorFlow's and TensorFlow is not available here")
        base = [None] * prog.n_slots
        for s, v in prog.consts.items():
            base[s] = v
        self.base = base
        self.owned = _ownership(prog, device)
        self.steps = [(self._step(n), n.inputs, n.outputs, n)
                      for n in prog.nodes if n.kind != "noop"]

    def _step(self, node):
        kind = node.kind
        if kind in ("stock", "reads"):
            return self.tensorflow.step(node, self)
        if kind in ("if", "case", "while"):
            return _control_step(node, [Bound(sub, self.device, self.tensorflow)
                                        for sub in node.subs], self)
        fn = _step_fn(node, self.device, self.program, self.owned)
        if self.tensorflow is None or kind != "kernel":
            return fn
        declined, bound = self.tensorflow.declined, self

        def or_tensorflow(args):
            try:
                return fn(args)
            except Unsupported as u:
                return declined(node, bound, args, u.reason)
        return or_tensorflow

    def run(self, vals):
        """Every step over `vals` (the slots, from `base` plus the inputs); returns vals."""
        for fn, ins, outs, node in self.steps:
            args = [vals[s] for s in ins]
            try:
                res = fn(args)
            except NodeError:
                raise
            except Exception as e:  # noqa: BLE001
                raise NodeError(node, args, e) from e
            for s, v in zip(outs, res):
                vals[s] = v
        return vals

    def call(self, args):
        """The program's outputs for these input buffers (sub-programs: If/Case/While)."""
        vals = list(self.base)
        for s, a in zip(self.program.inputs, args):
            vals[s] = a
        self.run(vals)
        return [vals[s] for s in self.program.outputs]


def _truth(read, buf):
    """TensorFlow's If/While condition rule on a predicate read on the host: scalars by value,
    other tensors by non-emptiness."""
    a = read(buf)
    return bool(a) if a.ndim == 0 else a.size > 0


def _reader(bound, slot):
    """How a control-flow node reads its predicate or branch index on the host: through the
    device, or as it is where the slot holds a host value (a dtype the device does not take,
    program.on_device)."""
    on = getattr(bound.program, "on_device", None)
    return bound.device.copy_out if on is None or slot in on else np.asarray


def _control_step(node, subs, bound):
    count = bound.tensorflow.count if bound.tensorflow is not None else None
    if node.kind in ("if", "case"):
        read = _reader(bound, node.inputs[0])
        if node.kind == "if":
            then, other = subs

            def pick(v):
                return then if _truth(read, v) else other
        else:
            def pick(v):
                i = int(read(v))
                return subs[i] if 0 <= i < len(subs) else subs[-1]

        def run_branch(ins):
            sub = pick(ins[0])
            out = sub.call(ins[1:])
            if count:
                count(sub.program, 1)
            return out
        return run_branch
    cond, body = subs
    read = _reader(cond, cond.program.outputs[0])

    def run_while(ins):
        loop, conds, bodies = list(ins), 0, 0
        try:
            while True:
                conds += 1
                if not _truth(read, cond.call(loop)[0]):
                    return loop
                bodies += 1
                loop = body.call(loop)
        finally:        # every iteration counted, once per loop run
            if count:
                count(cond.program, conds)
                count(body.program, bodies)
    return run_while


def _ownership(prog, device):
    """Per slot: does this call's run allocate the buffer (True) or borrow it (constants,
    inputs, aliases, views, what TensorFlow's nodes and control flow hand back)? Decided once
    here, so in-place reuse and the hand-over of outputs never ask a buffer what it is."""
    owned = [False] * prog.n_slots
    views = device.capabilities.views
    for n in prog.nodes:
        if n.kind not in ("kernel", "fused"):
            continue
        if n.kind == "kernel" and n.op in VIEW_OPS and views:
            continue
        k = n.inplace
        mine = owned[n.inputs[k]] if k is not None else True
        for s in n.outputs:
            owned[s] = mine
    return owned


def _run_error(lp, node, args, e):
    shapes = ", ".join(f"{getattr(a.dtype, 'name', a.dtype)}{list(a.shape)}" for a in args)
    if isinstance(e, Unsupported):
        what = f"the kernel declined these inputs ({e.reason}); TensorFlow is not available here"
    elif isinstance(e, BackendError):
        what = e.message
    else:
        what = f"{type(e).__name__}: {e}"
    return ProgramRunError(f"{lp.name} ({lp.path}) on {lp.device.name}: node '{node.name}' "
                           f"(op {node.op}; inputs: {shapes}) failed: {what}", node.name, node.op)


def _host_args(node, device, prog, pos):
    """fn(args) -> args with the host inputs (positions `pos`) as host numpy arrays, or None
    when the node reads nothing on the host."""
    if not pos or node.kind != "kernel":
        return None
    fixed = {i: prog.host_consts[node.inputs[i]] for i in pos
             if node.inputs[i] in prog.host_consts}
    moving = [i for i in pos if i not in fixed]
    copy_out = device.copy_out

    def host(args):
        args = list(args)
        for i, a in fixed.items():
            args[i] = a
        for i in moving:
            args[i] = copy_out(args[i])
        return args
    return host


def _step_fn(node, device, prog, owned):
    """fn(input buffers) -> output buffers for one node."""
    # the inputs read on the host: all of them on a host-memory device (None), else declared
    pos = None if device.capabilities.host_memory else frozenset(
        kernels.host_inputs(node.op, len(node.inputs)))
    fn = _device_step(node, device, owned, pos)
    host = _host_args(node, device, prog, pos)
    if host is None:
        return fn
    return lambda ins: fn(host(ins))


def _device_step(node, device, owned, pos):
    kind = node.kind
    if kind == "alias":
        return lambda ins: ins
    specs, attrs, shape_fn, k = node.out_specs, node.attrs, node.shape_fn, node.inplace
    in_place = k is not None and owned[node.inputs[k]]
    if kind == "fused":
        run = node.fn
        if in_place:
            return lambda ins: run(ins, specs, out=ins[k])
        return lambda ins: run(ins, specs, out=None)
    fn, allocate = node.kdef.fn, device.allocate
    if pos is None:
        def in_specs(ins):
            return [Spec(a.shape, a.dtype, a) for a in ins]
    else:   # shape fns see the values of host inputs only
        def in_specs(ins):
            return [Spec(a.shape, a.dtype, a if i in pos else None) for i, a in enumerate(ins)]

    def out_specs(ins):
        return specs if specs is not None else shape_fn(in_specs(ins), attrs)

    if node.op in VIEW_OPS and device.capabilities.views:
        view = device.view

        def reshaped(ins):
            return [view(ins[0], out_specs(ins)[0].shape)]
        return reshaped
    if in_place:
        def inplace(ins):
            buf = ins[k]
            fn(ins, [buf], attrs)
            return [buf]
        return inplace
    if specs is not None:
        def static(ins):
            outs = [allocate(s.shape, s.dtype) for s in specs]
            fn(ins, outs, attrs)
            return outs
        return static

    def dynamic(ins):
        outs = [allocate(s.shape, s.dtype) for s in out_specs(ins)]
        fn(ins, outs, attrs)
        return outs
    return dynamic
