"""MaxPoolGrad + the ReluGrad that reads it become one node, where the pool's input is the
Relu's output the ReluGrad masks by (a Conv2D-Relu-MaxPool block's gradient): the device's
fused kernel (`fused_kernels.max_pool_grad_relu`) writes the masked gradient in one pass
instead of writing the pool's gradient, reading it back and writing it again. Where that kernel
declines (window geometry, layout), the node runs the two kernels in turn."""
from shape_fns import Unsupported

from ... import alloc, devices, executor
from ..ir import Node


def run(prog):
    fused = devices.library("fused_kernels")
    if fused is None or not hasattr(fused, "max_pool_grad_relu"):
        return prog
    consumers = prog.consumers()
    producer = prog.producers()
    merged, replace = set(), {}
    for r in prog.nodes:
        if r.kind != "kernel" or r.op != "ReluGrad" or r.ctrl or len(r.inputs) != 2:
            continue
        m = producer.get(r.inputs[0])
        if (m is None or m.kind != "kernel" or m.op != "MaxPoolGrad" or m.ctrl
                or id(m) in merged or consumers.get(r.inputs[0]) != 1
                or m.inputs[0] != r.inputs[1]):
            continue
        spec = prog.slot_specs.get(r.outputs[0])
        if spec is None or not spec.fully_defined or spec.dtype.name not in ("float32", "float64"):
            continue
        merged.add(id(m))
        replace[id(r)] = _merge(m, r, fused)
    if not replace:
        return prog
    prog.nodes = [replace.get(id(n), n) for n in prog.nodes if id(n) not in merged]
    prog.fusions += len(replace)
    prog.notes.append(f"pool_relu_grad: {len(replace)} MaxPoolGrad + ReluGrad pairs as one node")
    return prog


def _merge(m, r, fused):
    f = Node(r.name, "MaxPoolGrad+ReluGrad", "fused", list(m.inputs), list(r.outputs),
             where=r.where)
    f.fused_ops = ("MaxPoolGrad", "ReluGrad")
    f.heavy = True
    f.out_specs = r.out_specs

    def run_pool_relu_grad(arrays, out_specs, out=None):
        spec = out_specs[0]
        buf = alloc.empty(spec.shape, spec.dtype)
        ins = [executor.as_numpy(a) for a in arrays]
        try:
            if fused.max_pool_grad_relu(ins, buf, m.attrs):
                return [buf]
        except Unsupported:   # compiling in the background (kernels/cpu/deferred.py)
            pass
        try:   # the two kernels in turn
            g = executor.run_kernel(m.kdef, m.shape_fn, arrays, m.attrs, m.out_specs)[0]
        except Unsupported as u:
            g = executor.declined(m, arrays, u)[0]
        ins = [g, arrays[0]]
        try:
            return executor.run_kernel(r.kdef, r.shape_fn, ins, r.attrs, r.out_specs)
        except Unsupported as u:
            return executor.declined(r, ins, u)

    run_pool_relu_grad.declines = True
    f.fn = run_pool_relu_grad
    f.spec = ("pool_relu_grad", m, r)   # the parts as data
    return f
