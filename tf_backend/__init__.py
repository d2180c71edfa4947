"""tf_backend: a TFRT-style runtime for TensorFlow. Set TF_BACKEND=1, run TensorFlow code unchanged.

Kept import-light: TensorFlow, numpy and numba are imported only when the backend is enabled.
"""
__version__ = "0.1.0"

from . import _startup

_startup.check_flag_reaches_startup()


def enable(mode="on", force=False, device=None):
    """Install the hooks; mode is "on" or "strict". Returns True when the backend is active.
    device: run tf.function programs on this device (a name from tf_backend.devices, or a
    Device), their inputs copied in and outputs out at each call; None: the host CPU path."""
    with _startup.collections_held():
        from . import switch
        return switch.enable(mode, force=force, device=device)


def disable():
    from . import switch
    switch.disable()


def enabled(mode="on", force=False, device=None):
    """Context manager: the backend in `mode` (tf.function programs on `device`) inside the
    block, the previous mode and device after."""
    from . import switch
    return switch.enabled(mode, force=force, device=device)


def mode():
    """The active mode: "off", "on" or "strict"."""
    from . import switch
    return switch.mode()


def stats():
    """The ledger: {"ops": {op: {"backend", "fallback", "errors", "reasons", "kernels"}}, "totals"}."""
    from . import ledger
    return ledger.snapshot()


def reset_stats():
    from . import ledger
    ledger.reset()


def wait_for_compiles(timeout=600.0):
    """Wait for the loops and regions being compiled in the background (a child process compiles
    each new one while the interpreter runs it) to be ready; returns the seconds waited. For
    timing steady state: call the function once, wait, then time it."""
    from . import executor
    return executor.wait_compiles(timeout)


def clear_caches():
    """Drop what the backend keeps between calls: compiled tf.function programs (and the
    weight-derived values they memoise), weight forms kept for inference (Winograd transforms,
    transposed matrices) and pooled output buffers. Variables' buffers they held are released;
    the next calls compile and fill again."""
    from . import alloc, devices, functions
    functions.clear_cache()
    cache = devices.library("weight_cache")
    if cache is not None:
        cache.clear()
    alloc.trim()


def export(fn_or_model, input_specs, path, name=None, weights_dtype=None):
    """Write `fn_or_model` (tf.function, Keras model, callable) compiled for `input_specs` to a
    program file that `tf_backend.runtime.load(path)` runs without TensorFlow; weights_dtype
    ("float16"/"bfloat16") stores float weights rounded to half the size."""
    from .exporter import export as _export
    return _export(fn_or_model, input_specs, path, name, weights_dtype)


def report(path="-"):
    """Write the ledger as JSON to `path`, or as a table on stderr for "-"."""
    from . import ledger
    ledger.write_report(path, ledger.snapshot())
