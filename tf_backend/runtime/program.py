"""A loaded program: slots, nodes and kernels of one device, run serially in program order.

Constants are shared, read-only device buffers; each call gets its own value slots, so one
LoadedProgram serves many threads at once. TensorFlow-free.
"""
import numpy as np

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
            prog.consts[slot] = device.copy_in(blobs[blob])
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
    """`program(inputs)` -> list of numpy arrays. inputs: a list/tuple of arrays, or one array."""

    def __init__(self, header, blobs, device, path):
        self.path, self.device = str(path), device
        self.header = header
        self.program = build(header, blobs, device, self.path)
        self.name = self.program.name
        self.input_specs = [_spec(i["dtype"], i["shape"]) for i in header["inputs"]]
        self.input_names = [i.get("name", "") for i in header["inputs"]]
        self.output_names = [o.get("name", "") for o in header["outputs"]]
        prog = self.program
        base = [None] * prog.n_slots
        for s, v in prog.consts.items():
            base[s] = v
        self._base = base
        self._steps = [(_step_fn(n, device), n.inputs, n.outputs, n)
                       for n in prog.nodes if n.kind != "noop"]

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

    def __call__(self, inputs):
        arrays = self._check_inputs(inputs)
        device = self.device
        vals = list(self._base)
        for s, a in zip(self.program.inputs, arrays):
            vals[s] = device.copy_in(a)
        for fn, ins, outs, node in self._steps:
            args = [vals[s] for s in ins]
            try:
                res = fn(args)
            except Exception as e:  # noqa: BLE001
                raise _run_error(self, node, args, e) from e
            for s, v in zip(outs, res):
                vals[s] = v
        device.synchronize()
        result, seen = [], set()
        for s in self.program.outputs:
            v = device.copy_out(vals[s])
            if id(v) in seen:
                v = np.array(v)
            seen.add(id(v))
            result.append(v)
        return result

    run = __call__

    def dump(self):
        return self.program.dump()


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


def _step_fn(node, device):
    """fn(input buffers) -> output buffers for one node."""
    kind = node.kind
    if kind == "alias":
        return lambda ins: ins
    specs, attrs, shape_fn, k = node.out_specs, node.attrs, node.shape_fn, node.inplace
    if kind == "fused":
        run = node.fn

        def fused(ins):
            out = ins[k] if k is not None else None
            return run(ins, specs, out=out if out is not None and out.flags.writeable else None)
        return fused
    fn, allocate = node.kdef.fn, device.allocate

    def out_specs(ins):
        return specs if specs is not None else shape_fn(
            [Spec(a.shape, a.dtype, a) for a in ins], attrs)

    if node.op in VIEW_OPS and device.capabilities.views:
        def view(ins):
            a = ins[0]
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a) if a.ndim else a.copy()
            v = a.reshape(out_specs(ins)[0].shape)
            # read-only: the buffer may still be read through its other name, so an in-place
            # consumer of the view must allocate (the inplace pass counts readers per slot)
            v.flags.writeable = False
            return [v]
        return view
    if k is not None:
        def inplace(ins):
            buf = ins[k]
            if buf.flags.writeable:
                fn(ins, [buf], attrs)
                return [buf]
            outs = [allocate(s.shape, s.dtype) for s in out_specs(ins)]
            fn(ins, outs, attrs)
            return outs
        return inplace
    if specs is not None:
        def static(ins):
            outs = [allocate(s.shape, s.dtype) for s in specs]
            fn(ins, outs, attrs)
            return outs
        return static

    def dynamic(ins):
        outs = [allocate(s.shape, s.dtype) for s in shape_fn(
            [Spec(a.shape, a.dtype, a) for a in ins], attrs)]
        fn(ins, outs, attrs)
        return outs
    return dynamic
