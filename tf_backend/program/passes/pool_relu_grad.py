"""MaxPoolGrad + the ReluGrad that reads it become one node, where the pool's input is the
Relu's output the ReluGrad masks by (a Conv2D-Relu-MaxPool block's gradient): the device's
fused kernel (`fused_kernels.max_pool_grad_relu`) writes the masked gradient in one pass
instead of writing the pool's gradient, reading it back and writing it again; a BiasAddGrad
of that gradient (the layer's bias) joins as the node's second output, summed in the same
pass. Where that kernel declines (window geometry, layout), the node runs the kernels in
turn."""
from shape_fns import Unsupported

from ... import alloc, devices, executor
from ..ir import Node


def run(prog):
    fused = devices.library("fused_kernels")
    if fused is None or not hasattr(fused, "max_pool_grad_relu"):
        return prog
    consumers = prog.consumers()
    producer = prog.producers()
    users = {}
    for n in prog.nodes:
        for s in n.inputs:
            users.setdefault(s, []).append(n)
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
        if (spec is None or spec.shape is None or len(spec.shape) != 4
                or spec.dtype.name not in ("float32", "float64", "float16", "bfloat16")):
            continue   # (unknown dimensions: a Keras fit step's batch; outputs sized per call)
        b = next((n for n in users.get(r.outputs[0], ()) if n.kind == "kernel"
                  and n.op == "BiasAddGrad" and not n.ctrl
                  and n.attrs.get("data_format", "NHWC") in ("NHWC", b"NHWC")), None)
        merged.add(id(m))
        if b is not None:
            merged.add(id(b))
        replace[id(r)] = _merge(m, r, b, fused, spec.dtype)
    if not replace:
        return prog
    prog.nodes = [replace.get(id(n), n) for n in prog.nodes if id(n) not in merged]
    prog.fusions += len(replace)
    prog.notes.append(f"pool_relu_grad: {len(replace)} MaxPoolGrad + ReluGrad pairs as one node"
                      f" ({len(merged) - len(replace)} with their BiasAddGrad)")
    return prog


def _merge(m, r, b, fused, dtype):
    outs = list(r.outputs) + (list(b.outputs) if b is not None else [])
    f = Node(r.name, "MaxPoolGrad+ReluGrad" + ("+BiasAddGrad" if b is not None else ""),
             "fused", list(m.inputs), outs, where=r.where)
    f.fused_ops = ("MaxPoolGrad", "ReluGrad") + (("BiasAddGrad",) if b is not None else ())
    f.heavy = True
    static = r.out_specs is not None and (b is None or b.out_specs is not None)
    f.out_specs = (list(r.out_specs) + (list(b.out_specs) if b is not None else [])
                   if static else None)

    def run_pool_relu_grad(arrays, out_specs, out=None):
        ins = [executor.as_numpy(a) for a in arrays]
        if out_specs is not None:
            bufs = [alloc.empty(sp.shape, sp.dtype) for sp in out_specs]
        else:   # sized by the pool's input: the gradient's shape, the bias gradient's [C]
            x = ins[0]
            bufs = [alloc.empty(x.shape, dtype)] + (
                [alloc.empty(x.shape[-1:], dtype)] if b is not None else [])
        try:
            if fused.max_pool_grad_relu(ins, bufs[0], m.attrs,
                                        bufs[1] if b is not None else None):
                return bufs
        except Unsupported:   # compiling in the background (kernels/cpu/deferred.py)
            pass
        return _in_turn(arrays)

    def _in_turn(arrays):
        outs = [_kernel(r, [executor.as_numpy(_kernel(m, arrays)[0]), arrays[0]])[0]]
        if b is not None:
            outs.append(_kernel(b, [executor.as_numpy(outs[0])])[0])
        return outs

    run_pool_relu_grad.declines = True
    f.fn = run_pool_relu_grad
    f.spec = ("pool_relu_grad", m, r, b)   # the parts as data
    return f


def _kernel(n, ins):
    """One part's kernel (TensorFlow's where it declines these values)."""
    try:
        return executor.run_kernel(n.kdef, n.shape_fn, ins, n.attrs, n.out_specs)
    except Unsupported as u:
        return executor.declined(n, ins, u)
