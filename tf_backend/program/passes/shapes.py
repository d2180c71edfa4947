"""Static shape/dtype inference with the same shape fns eager dispatch uses.

Where every output spec comes out fully defined, the node keeps it (`out_specs`) and the executor
allocates without running the shape fn. Unknown dims stay for run time. Also marks `heavy` nodes
(worth a pool thread) from the static sizes.
"""
import numpy as np

from shape_fns import BackendError, Spec, Unsupported

HEAVY_OPS = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D",
             "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2dNative",
             "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
             "Einsum", "FusedBatchNormV3", "FusedBatchNormGradV3"}
HEAVY_ELEMENTS = 1 << 16


def _size(spec):
    if spec is None or not spec.fully_defined:
        return None
    return int(np.prod(spec.shape, dtype=np.int64))


def run(prog):
    known = 0
    for n in prog.nodes:
        if n.kind not in ("kernel", "fused") or n.shape_fn is None:
            continue
        specs = []
        for s in n.inputs:
            st = prog.slot_specs.get(s)
            v = prog.consts.get(s)
            if v is not None and isinstance(v, np.ndarray):
                specs.append(Spec(v.shape, v.dtype, v))
            elif st is not None:
                specs.append(Spec(st.shape, st.dtype))
            else:
                specs.append(Spec(None, np.float32))
        try:
            outs = n.shape_fn(specs, n.attrs)
        except (BackendError, Unsupported, Exception):  # decided at run time, with the real error
            outs = None
        if outs is not None:
            for s, o in zip(n.outputs, outs):
                prog.slot_specs[s] = _merge(prog.slot_specs.get(s), o)
            if all(o.fully_defined for o in outs):
                n.out_specs = outs
                known += 1
        sizes = [_size(prog.slot_specs.get(s)) for s in list(n.inputs) + list(n.outputs)]
        total = sum(x for x in sizes if x)
        n.heavy = total >= HEAVY_ELEMENTS or (n.op in HEAVY_OPS and None in sizes)
    prog.notes.append(f"shapes: {known} kernel nodes with static output specs")
    return prog


def _merge(tf_spec, ours):
    """Ours where known, TensorFlow's static shape where ours is unknown."""
    if tf_spec is None or tf_spec.shape is None:
        return ours
    if ours.shape is None or len(ours.shape) != len(tf_spec.shape):
        return Spec(tf_spec.shape, ours.dtype)
    return Spec(tuple(a if a is not None else b for a, b in zip(ours.shape, tf_spec.shape)),
                ours.dtype)
