"""Run a callable under stock TensorFlow and under the backend, and compare as the contract says."""
import warnings

import numpy as np
import tensorflow as tf

import tf_backend
from tf_backend import numerics


def to_tf(args):
    return [tf.constant(a) if isinstance(a, np.ndarray) else a for a in args]


def flat_numpy(out):
    return [np.asarray(o) for o in tf.nest.flatten(out)]


def run_stock(fn, args):
    tf_backend.disable()
    return flat_numpy(fn(*to_tf(args)))


def run_ours(fn, args, mode="on"):
    """Returns (outputs, ledger); fails on numpy RuntimeWarnings and on mutated inputs."""
    tensors = to_tf(args)
    before = [np.array(t) if isinstance(t, tf.Tensor) else None for t in tensors]
    tf_backend.enable(mode)
    tf_backend.reset_stats()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            out = flat_numpy(fn(*tensors))
        stats = tf_backend.stats()
    finally:
        tf_backend.disable()
    for b, t in zip(before, tensors):
        if b is not None:
            assert numerics.compare(np.asarray(t), b, kind="exact") is None, "input was mutated"
    return out, stats


def raised(fn, args, mode):
    """The exception class (or None) that fn raises with the backend off/on."""
    tensors = to_tf(args)
    if mode == "off":
        tf_backend.disable()
    else:
        tf_backend.enable(mode)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            flat_numpy(fn(*tensors))
        return None, None
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return type(e), e
    finally:
        tf_backend.disable()


def stock_words(exc):
    """Stock's message without TensorFlow's wrapping ({{function_node ...}} and [Op:...])."""
    import re
    msg = str(exc).splitlines()[0] if str(exc) else ""
    msg = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", msg)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", msg).strip()


def assert_matches(ours, ref, kind="elementwise", reduction_len=1, rtol=None, atol=None, what=""):
    assert len(ours) == len(ref), f"{what}: {len(ours)} outputs vs {len(ref)}"
    for i, (o, r) in enumerate(zip(ours, ref)):
        msg = numerics.compare(o, r, kind, reduction_len, rtol, atol)
        assert msg is None, f"{what} output {i}: {msg}"


def backend_calls(stats, op):
    return stats["ops"].get(op, {}).get("backend", 0)


def force_conv_forward(monkeypatch, x_shape, f_shape, choice, stride=1, padding="SAME"):
    """Where a float32 Conv2D's kernel is measured (no AVX-512F: conv_ops._forward_measured),
    run `choice` for this shape: for tests about what one kernel keeps (Winograd's kept
    transforms), which the measurement could otherwise leave to another."""
    from kernels.cpu import bf16_gemm, conv_ops, variants
    if bf16_gemm.runs_f32():
        return
    attrs = {"strides": [1, stride, stride, 1], "padding": padding, "data_format": "NHWC",
             "dilations": [1, 1, 1, 1], "explicit_paddings": []}
    g = conv_ops._geometry(tuple(x_shape), tuple(f_shape), attrs, "Conv2D",
                           np.dtype(np.float32))[2]
    monkeypatch.setitem(variants._choices, conv_ops.measured_name(
        "conv_f32_forward", x_shape, f_shape, g), choice)
