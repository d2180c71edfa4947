"""Export a tf.function or Keras model as a program file that runs without TensorFlow.

Lowering and the device-independent passes are the host runtime's own (program/lower.py,
identity, canonicalize, shapes, const_fold, dce); variables are read once, here, and become
constants. Device passes (fusion, in-place reuse) run when the file is loaded
(tf_backend/runtime), for the device that loads it. Format: tf_backend/runtime/FORMAT.md.
"""
import numpy as np

from . import __version__
from .program import lower, passes
from .runtime import format as fmt
from .runtime.errors import ExportError



def export(fn_or_model, input_specs, path, name=None, weights_dtype=None):
    """Compile `fn_or_model` for `input_specs` and write it to `path`; returns the header.

    fn_or_model: a tf.function, a Keras model (called with training=False) or a Python callable.
    input_specs: tf.TensorSpec, numpy array (its shape/dtype) or (shape, dtype) per input; a
    single one may be given bare. None dims stay dynamic (shape fns run per call).
    weights_dtype: "float16" or "bfloat16" stores float32/float64 constants rounded to that type
    (half the file; the loader widens them back, so the program computes as before on rounded
    weights); None keeps them exact.
    """
    import tensorflow as tf
    specs = _tensor_specs(tf, input_specs)
    cf = _as_function(tf, fn_or_model).get_concrete_function(*specs)
    name = name or getattr(fn_or_model, "name", None) or cf.name
    name = name.decode() if isinstance(name, bytes) else str(name)
    try:
        prog = lower.lower(cf.graph, name)
    except lower.Unlowerable as e:
        raise ExportError(f"cannot export {name}: {e.reason}") from None
    _freeze(tf, prog, cf, len(specs), name)
    for p in passes.PORTABLE:
        p.run(prog)
        prog.finalize()
    header, blobs = _serialize(prog, cf, tf)
    version = fmt.FORMAT_VERSION
    if weights_dtype is not None:
        blobs, version = _narrow(blobs, weights_dtype), 2
        header["weights_dtype"] = np.dtype(weights_dtype).name
    fmt.write(path, header, blobs, version)
    return header


def _narrow(blobs, weights_dtype):
    """Float constants of more than 16 bits stored as `weights_dtype` (format version 2)."""
    try:
        wd = np.dtype(weights_dtype)
    except TypeError:
        raise ExportError(f"weights_dtype {weights_dtype!r} is not a dtype numpy knows") from None
    if wd.name not in ("float16", "bfloat16"):
        raise ExportError(f"weights_dtype must be float16 or bfloat16, not {wd.name}")
    return {k: v.astype(wd) if v.dtype.kind == "f" and v.dtype.itemsize > 2 else v
            for k, v in blobs.items()}


def _tensor_specs(tf, input_specs):
    if isinstance(input_specs, (tf.TensorSpec, np.ndarray)):
        input_specs = [input_specs]
    out = []
    for s in input_specs:
        if isinstance(s, tf.TensorSpec):
            out.append(s)
        elif isinstance(s, np.ndarray) or hasattr(s, "shape") and hasattr(s, "dtype"):
            out.append(tf.TensorSpec(tuple(s.shape), tf.as_dtype(s.dtype)))
        else:
            shape, dtype = s
            out.append(tf.TensorSpec(shape, tf.as_dtype(dtype)))
    return out


def _as_function(tf, obj):
    if hasattr(obj, "get_concrete_function"):
        return obj
    if hasattr(obj, "trainable_weights") and hasattr(obj, "call"):   # a Keras model or layer
        return tf.function(lambda *xs: obj(xs[0] if len(xs) == 1 else list(xs), training=False))
    if callable(obj):
        return tf.function(obj)
    raise ExportError(f"cannot export {obj!r}: not a tf.function, Keras model or callable")


def _freeze(tf, prog, cf, n_user, name):
    """Captured variables -> constants (read now); other captures -> constants; refuse the rest."""
    captured = list(cf.captured_inputs)
    cap_slots = prog.inputs[len(prog.inputs) - len(captured):] if captured else []
    handles = {}
    for s, v in zip(cap_slots, captured):
        if v.dtype == tf.resource:
            handles[s] = v
        else:
            prog.consts[s] = np.asarray(v.numpy())
    refused, kept = {}, []
    for n in prog.nodes:
        if n.kind == "stock" and n.op == "ReadVariableOp" and n.inputs[0] in handles:
            dtype = dict(zip(n.raw_attrs[::2], n.raw_attrs[1::2]))["dtype"]
            value = tf.raw_ops.ReadVariableOp(resource=handles[n.inputs[0]], dtype=dtype)
            prog.consts[n.outputs[0]] = np.asarray(value.numpy())
            continue
        if n.kind in ("stock", "if", "while", "case"):
            why = n.reason if n.kind == "stock" else "control flow is not exportable yet"
            refused.setdefault(f"{n.op} ({why})", []).append(n.name)
        kept.append(n)
    if refused:
        ops = "; ".join(f"{op} at {', '.join(nodes[:3])}{' ...' if len(nodes) > 3 else ''}"
                        for op, nodes in sorted(refused.items()))
        raise ExportError(f"cannot export {name}: these nodes need TensorFlow's kernels: {ops}")
    prog.nodes = kept
    prog.inputs = prog.inputs[:n_user]
    prog.finalize()


def _shape(shape):
    return None if shape is None else [None if d is None else int(d) for d in shape]


def _serialize(prog, cf, tf):
    used = set(prog.inputs) | set(prog.outputs)
    for n in prog.nodes:
        if n.kind not in fmt.KINDS:
            raise ExportError(f"cannot export {prog.name}: node {n.name} of kind {n.kind}")
        used.update(n.inputs)
        used.update(n.outputs)
    blobs, by_id, consts = {}, {}, []
    for s in sorted(used):
        if s not in prog.consts:
            continue
        v = np.asarray(prog.consts[s])
        if v.dtype.kind in "OUSV":
            raise ExportError(f"cannot export {prog.name}: constant {prog.slot_names.get(s, s)} "
                              f"has dtype {v.dtype} (strings/objects are not exportable)")
        key = id(prog.consts[s])
        if key not in by_id:
            by_id[key] = f"weights/{len(blobs)}.npy"
            blobs[by_id[key]] = v
        consts.append([s, by_id[key]])
    index = {id(n): i for i, n in enumerate(prog.nodes)}
    nodes = []
    for n in prog.nodes:
        where = f"node {n.name} ({n.op})"
        try:
            attrs = {k: fmt.encode_attr(v, where) for k, v in n.attrs.items()}
        except TypeError as e:
            raise ExportError(f"cannot export {prog.name}: {e}") from None
        nodes.append({"name": n.name, "op": n.op, "kind": n.kind, "inputs": list(n.inputs),
                      "outputs": list(n.outputs), "ctrl": [index[id(c)] for c in n.ctrl],
                      "attrs": attrs, "where": str(n.where),
                      "out_specs": None if n.out_specs is None else
                      [[o.dtype.name, _shape(o.shape)] for o in n.out_specs]})
    specs = prog.slot_specs
    slot_specs = [[s, specs[s].dtype.name, _shape(specs[s].shape)] for s in sorted(used)
                  if s in specs and specs[s].dtype.kind != "O"]
    header = {
        "producer": {"tf_backend": __version__, "tensorflow": tf.__version__},
        "name": prog.name,
        "n_slots": prog.n_slots,
        "inputs": [{"slot": s, "name": prog.slot_names.get(s, ""), "dtype": specs[s].dtype.name,
                    "shape": _shape(specs[s].shape)} for s in prog.inputs],
        "outputs": [{"slot": s, "name": prog.slot_names.get(s, "")} for s in prog.outputs],
        "slot_specs": slot_specs,
        "consts": consts,
        "nodes": nodes,
        "notes": list(prog.notes),
    }
    return header, blobs
