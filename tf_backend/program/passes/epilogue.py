"""Epilogue fusion: a MatMul/Conv2D-like node and the elementwise node that consumes its result
(bias, activation, batch-norm affine, residual add — after canonicalisation and elementwise
fusion) become one node. The elementwise part runs in place on the GEMM/conv output buffer:
no second allocation, no extra pass writing a new array."""
import numpy as np

from kernels.elementwise_table import TABLE
from shape_fns import Spec, Unsupported

from ... import alloc, devices, executor
from ..ir import Node

PRODUCERS = {"MatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "DepthwiseConv2dNative",
             "Einsum"}


def _same_spec(prog, a, b):
    """Equal specs, unknown dimensions allowed (where the same ones are unknown): a Keras fit
    step's batch dimension comes from IteratorGetNext inside the function, so none of its
    shapes is fully defined. The merged node then checks at run time that the epilogue writes
    the product's shape (_merge)."""
    sa, sb = prog.slot_specs.get(a), prog.slot_specs.get(b)
    return (sa is not None and sb is not None and sa.shape is not None
            and tuple(sa.shape) == tuple(sb.shape) and sa.dtype == sb.dtype)


def _same_full_spec(prog, a, b):
    return _same_spec(prog, a, b) and prog.slot_specs[a].fully_defined


def run(prog):
    consumers = prog.consumers()
    producer = prog.producers()
    merged, replace = set(), {}
    for n in prog.nodes:
        if n.ctrl or not (n.kind == "fused" or (n.kind == "kernel" and n.op in TABLE)):
            continue
        for k, s in enumerate(n.inputs):
            m = producer.get(s)
            if (m is not None and m.kind == "kernel" and m.op in PRODUCERS and not m.ctrl
                    and id(m) not in merged and consumers.get(s) == 1 and len(m.outputs) == 1
                    and _same_spec(prog, s, n.outputs[0])):
                merged.add(id(m))
                replace[id(n)] = _merge(m, n, k, not prog.slot_specs[s].fully_defined)
                break
    if not replace:
        return prog
    relus = _half_relus(prog, replace, consumers)
    fused = sum(_f32_bias_relu(prog, e) for e in replace.values())
    prog.nodes = [replace.get(id(n), n) for n in prog.nodes
                  if id(n) not in merged and id(n) not in relus]
    prog.fusions += len(replace) + len(relus)
    prog.notes.append(f"epilogue: {len(replace)} GEMM/conv nodes fused with their epilogue"
                      + (f", {len(relus)} bfloat16 ones with their Relu" if relus else "")
                      + (f", {fused} float32 bias+Relu ones tried in the product's kernel"
                         if fused else ""))
    return prog


def _half_relus(prog, replace, consumers):
    """bfloat16 Conv2D/MatMul + bias epilogues take the Relu that reads them (bfloat16 ops are
    not fused elementwise: each rounds), so that kernels which add the bias and apply the Relu
    before their one rounding (kernels/cpu/bf16_gemm.py, as stock's fused oneDNN convolution)
    run all three; elsewhere the node runs the three kernels in turn. Returns the absorbed
    Relu nodes' ids."""
    users = {}
    for n in prog.nodes:
        for s in n.inputs:
            users.setdefault(s, []).append(n)
    absorbed = set()
    for i, e in list(replace.items()):
        _, m, n, k = e.spec
        out = e.outputs[0]
        spec = prog.slot_specs.get(out)
        if (m.op not in HALF_FUSED or n.kind != "kernel" or n.op not in BIAS_OPS
                or spec is None or spec.dtype.name != "bfloat16" or consumers.get(out) != 1):
            continue
        bias = prog.slot_specs.get(n.inputs[1 - k])
        r = users.get(out, [None])[0]
        if (bias is None or bias.shape is None or len(bias.shape) != 1 or r is None
                or r.kind != "kernel" or r.op != "Relu" or r.ctrl
                or not _same_full_spec(prog, out, r.outputs[0])):
            continue
        absorbed.add(id(r))
        replace[i] = _merge_half_relu(e, m, n, k, r)
    return absorbed


def _f32_bias_relu(prog, e):
    """A float32 Conv2D whose fused epilogue is exactly (+ bias over the last axis, Relu) first
    asks the device's fused kernel (bias and Relu applied in the product's registers: one pass
    over the output instead of two); where it declines (None), the epilogue runs as built.
    Returns 1 when the node was given that path."""
    if e.spec[0] != "epilogue":
        return 0
    _, m, n, k = e.spec
    out = prog.slot_specs.get(e.outputs[0])
    if (m.op not in F32_FUSED or n.kind != "fused" or out is None or out.dtype != np.float32
            or out.shape is None or len(n.inputs) != 2):
        return 0
    steps = n.spec[2]
    if (len(steps) != 2 or steps[0][0] not in BIAS_OPS or steps[1][0] != "Relu"
            or steps[1][1] != [("t", 0)]
            or sorted(steps[0][1]) != [("in", 0), ("in", 1)]
            or (steps[0][0] == "BiasAdd" and (steps[0][1][0] != ("in", k)
                                               or steps[0][2] not in ([], ["NHWC"])))):
        return 0
    bias = prog.slot_specs.get(n.inputs[1 - k])
    if (bias is None or bias.shape is None or not bias.shape or len(bias.shape) > len(out.shape)
            or tuple(bias.shape) != (1,) * (len(bias.shape) - 1) + (out.shape[-1],)):
        return 0   # (a bias over the last axis: [O] or Keras' [1, 1, 1, O])
    fused = devices.library("fused_kernels")
    if fused is None:
        return 0
    inner, n_m = e.fn, len(m.inputs)

    def run_bias_relu(arrays, out_specs, out=None):
        spec = out_specs[0] if out_specs else None
        if (spec is None or not spec.fully_defined) and not inner.producer["stock"]:
            try:   # a shape known only at run time: the convolution's shape function
                spec = m.shape_fn([Spec(a.shape, a.dtype, a) for a in arrays[:n_m]],
                                  m.attrs)[0]
            except Exception:  # noqa: BLE001 - the kernels in turn raise stock's error
                spec = None
        if not inner.producer["stock"] and spec is not None and spec.fully_defined:
            bias = executor.as_numpy(arrays[n_m])
            try:
                res = fused.bias_relu_product(m.op, m.attrs, arrays[:n_m], bias.reshape(-1),
                                              alloc.empty(spec.shape, spec.dtype))
            except Unsupported:   # compiling in the background (kernels/cpu/deferred.py)
                res = None
            if res is not None:
                return [res]
        return inner(arrays, out_specs, out)

    run_bias_relu.declines = inner.declines
    run_bias_relu.producer = inner.producer
    e.fn = run_bias_relu
    return 1


F32_FUSED = {"Conv2D", "MatMul"}
HALF_FUSED = {"Conv2D", "MatMul"}
BIAS_OPS = {"AddV2", "BiasAdd"}


def _merge_half_relu(e, m, n, k, r):
    f = Node(r.name, e.op, "fused", list(e.inputs), list(r.outputs), where=r.where)
    f.fused_ops = e.fused_ops + ("Relu",)
    f.heavy = True
    f.out_specs = r.out_specs
    n_m = len(m.inputs)
    half = devices.library("fused_kernels")   # the device's own fused kernel, if it has one

    def run_half(arrays, out_specs, out=None):
        spec = out_specs[0] if out_specs else None
        if half is not None and spec is not None and spec.fully_defined:
            try:
                res = half.bias_relu_product(m.op, m.attrs, arrays[:n_m], arrays[n_m],
                                             alloc.empty(spec.shape, spec.dtype))
            except Unsupported:   # its kernel compiles in the background (kernels/cpu/
                res = None        # deferred.py): the three kernels, each declining alone
            if res is not None:
                return [res]
        buf = e.fn(arrays, e.out_specs)[0]   # the three kernels in turn
        buf = np.array(executor.as_numpy(buf)) if not executor.writable(buf) else buf
        try:
            r.kdef.fn([buf], [buf], r.attrs)
        except Unsupported as u:   # compiling in the background (kernels/cpu/deferred.py)
            return executor.declined(r, [buf], u)
        return [buf]

    run_half.declines = True
    f.fn = run_half
    f.spec = ("epilogue_relu", m, n, k, r)
    return f


def _writes_shape(ins, shape):
    try:
        return np.broadcast_shapes(*(a.shape for a in ins)) == shape
    except ValueError:   # the kernel raises stock's error
        return False


def _merge(m, n, k, dynamic=False):
    """dynamic: the shapes are known only at run time; where the epilogue's other inputs would
    broadcast the product to a bigger shape, the epilogue writes a new array (a fused
    elementwise node does so by itself)."""
    rest = [s for i, s in enumerate(n.inputs) if i != k]
    e = Node(n.name, m.op + "+epilogue", "fused", list(m.inputs) + rest, list(n.outputs),
             where=n.where)
    e.fused_ops = (m.op,) + (n.fused_ops or (n.op,))
    e.heavy = True
    e.out_specs = n.out_specs
    n_m = len(m.inputs)
    producer = {"stock": False}   # autotune.py chose TensorFlow's kernel for the producer

    def run_epilogue(arrays, out_specs, out=None):
        if producer["stock"]:
            buf = np.array(executor.as_numpy(executor.stock_outputs(m, arrays[:n_m])[0]))
        else:
            try:
                buf = executor.run_kernel(m.kdef, m.shape_fn, arrays[:n_m], m.attrs,
                                          m.out_specs)[0]
            except Unsupported as u:   # e.g. Inf with padding: the producer runs on
                # TensorFlow's kernel, the epilogue on ours, in a writable copy of its result
                buf = np.array(executor.as_numpy(executor.declined(m, arrays[:n_m], u)[0]))
        ins = list(arrays[n_m:])
        ins.insert(k, buf)
        if n.kind == "fused":
            return n.fn(ins, n.out_specs, out=buf)
        try:
            if dynamic and not _writes_shape(ins, buf.shape):
                return executor.run_kernel(n.kdef, n.shape_fn, ins, n.attrs)
            n.kdef.fn(ins, [buf], n.attrs)
        except Unsupported as u:   # compiling in the background (kernels/cpu/deferred.py)
            return executor.declined(n, ins, u)
        return [buf]

    # a compile in the background declines each part (executor.may_defer)
    run_epilogue.declines = n.kind != "fused" or getattr(n.fn, "declines", False)
    run_epilogue.producer = producer
    e.fn = run_epilogue
    e.spec = ("epilogue", m, n, k)   # the parts as data (compiled loops inline them)
    return e
