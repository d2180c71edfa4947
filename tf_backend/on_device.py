"""tf.function programs on a device other than the host CPU path (`tf_backend.enable(device=...)`).

A function is lowered as for the CPU, optimised by the device-independent passes
(passes.PORTABLE), placed on the device (constants copied in, the device's own passes) and bound
to the runtime's executor core (runtime/program.py: Bound). Values live on the device; inputs are
copied in and outputs out at the function's boundary. A slot is on the device when its dtype is
one the device takes; anything else (resource handles, variants, strings) stays a TensorFlow
value on the host and only TensorFlow's nodes read it. TensorFlow's own nodes (variables,
iterators, random ops, ops the device has no kernel for, kernels that decline their inputs at
run time) copy their device inputs out, run on TensorFlow, and copy their outputs in: the only
places where values cross, besides the boundary and the predicates of control flow.
"""
from . import executor, ledger
from . import tf_adapter as tfa
from .program import lower, passes
from .runtime.program import Bound, place_consts


def compile_program(graph, name, device):
    """A Bound program of `graph` on `device`; raises lower.Unlowerable for what cannot run."""
    prog = lower.lower(graph, name)
    passes.optimize(prog, passes.PORTABLE)
    _place(prog, device)
    return Bound(prog, device, TensorFlowNodes(device))


def _on_device(prog, device):
    ok = device.capabilities.dtypes
    return {s for s, spec in prog.slot_specs.items() if spec.dtype in ok}


def _place(prog, device):
    """Kernels looked up on the device (a node it has no kernel for, or with a value it cannot
    hold, becomes a TensorFlow node with the reason); constants copied in; the device's passes."""
    on = _on_device(prog, device)
    for n in prog.nodes:
        for sub in n.subs:
            _place(sub, device)
        if n.kind != "kernel":
            continue
        kdef, why = device.lookup(n.op, n.attrs)
        if kdef is not None and not all(s in on for s in n.inputs + n.outputs):
            kdef, why = None, "dtype"
        if kdef is None:
            if not n.raw_attrs:
                raise lower.Unlowerable(f"device:{device.name}:{n.op}:{why}")
            n.kind, n.kdef, n.reason = "stock", None, f"device:{device.name}:{why}"
        else:
            n.kdef = kdef
    prog.on_device = on
    place_consts(prog, device)
    prog.finalize()
    device.prepare(prog)
    prog.finalize()


class TensorFlowNodes:
    """Runs TensorFlow's nodes of a bound program: device inputs copied out, TensorFlow's
    kernel (executor._stock: stateful kernels, XLA calls) or its variable reads, outputs the
    device takes copied in."""

    def __init__(self, device):
        self.device = device
        self.dtypes = device.capabilities.dtypes

    def step(self, node, bound):
        prog = bound.program
        host = self._host_inputs(node, prog)
        into = self._into_device
        if node.kind == "reads":
            raw = node.raw_attrs
            return lambda args: into(tfa.read_variables(host(args), raw))
        stock = executor._stock
        return lambda args: into(stock(node, host(args)))

    def _host_inputs(self, node, prog):
        """fn(args) -> host values: constants from the host copy, device buffers copied out,
        TensorFlow values as they are."""
        copy_out, on = self.device.copy_out, prog.on_device
        consts = prog.host_consts
        plan = [(i, consts.get(s)) for i, s in enumerate(node.inputs) if s in on]

        def host(args):
            args = list(args)
            for i, c in plan:
                args[i] = c if c is not None else copy_out(args[i])
            return args
        return host

    def _into_device(self, outs):
        """TensorFlow's outputs as this device's buffers where it takes their dtype, in fresh
        buffers the run owns (the runtime records TensorFlow's outputs as borrowed)."""
        device, ok = self.device, self.dtypes
        res = []
        for t in outs:
            dt = tfa.ENUM_TO_DTYPE.get(t._datatype_enum())
            res.append(device.copy_in(tfa.to_numpy(t)) if dt in ok else t)
        return res

    def declined(self, node, bound, args, reason):
        """A kernel declined these inputs (Unsupported): TensorFlow's kernel runs them, counted
        with the reason; the outputs go into fresh device buffers (the node's slots are owned)."""
        host = self._host_inputs(node, bound.program)(args)
        outs = []
        for t in executor.declined(node, host, reason):
            a = tfa.to_numpy(t)
            buf = self.device.allocate(a.shape, a.dtype)
            self.device.copy_into(buf, a)
            outs.append(buf)
        return outs

    @staticmethod
    def count(prog, runs):
        ledger.program_ops(prog.op_counts, runs)


def run(bound, args):
    """The function's outputs (TensorFlow values) for its arguments (TensorFlow values)."""
    prog, device = bound.program, bound.device
    on = prog.on_device
    vals = list(bound.base)
    for s, a in zip(prog.inputs, args):
        vals[s] = device.copy_in(tfa.to_numpy(a)) if s in on else a
    bound.run(vals)
    device.synchronize()
    ledger.program_ops(prog.op_counts)
    owned, seen, result = bound.owned, set(), []
    for s in prog.outputs:
        v = vals[s]
        if s in on:
            mine = owned[s] and id(v) not in seen
            seen.add(id(v))
            v = tfa.make_tensor_any(device.copy_out(v, owned=mine))
        result.append(v)
    return result
