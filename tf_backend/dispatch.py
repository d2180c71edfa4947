"""Eager dispatch: op request -> kernel lookup -> shape fn -> aligned outputs -> kernel -> tensors.

Also decides, and records in the ledger, every fallback to TensorFlow's own kernels.
"""
import os
import threading
import warnings

import numpy as np

import kernels
import shape_fns
from shape_fns import BackendError, Spec, Unsupported, describe

from . import alloc, devices, executor, ledger, tf_adapter as tfa

# The device eager ops and tf.function programs run on, resolved once: kernel lookups go through
# it on cache misses only, so the per-call path is unchanged.
HOST = devices.host()

# Ops we never run, whatever is registered (DESIGN.md §5). Stateful ops and ops that touch
# resources, variants or strings are excluded by their OpDef as well. Of the stateless random
# ops, the ones with bit-exact kernels (kernels/cpu/random_ops.py) are not listed.
NEVER_INTERCEPT = frozenset("""
VarHandleOp ReadVariableOp AssignVariableOp AssignAddVariableOp AssignSubVariableOp
DestroyResourceOp VarIsInitializedOp ResourceGather ResourceScatterAdd
StatelessRandomUniform StatelessRandomNormal StatelessRandomNormalV2
StatelessTruncatedNormal StatelessTruncatedNormalV2 StatelessRandomUniformInt
StatelessRandomUniformIntV2 StatelessRandomUniformFullInt StatelessRandomUniformFullIntV2
StatelessRandomGetKeyCounterAlg StatelessRandomGetAlg
StatelessMultinomial StatelessRandomBinomial StatelessRandomGammaV2 StatelessRandomGammaV3
StatelessRandomPoisson StatelessParameterizedTruncatedNormal StatelessShuffle
CheckNumerics CheckNumericsV2 EagerPyFunc PyFunc PyFuncStateless
PartitionedCall StatefulPartitionedCall
""".split())
_BAD_ARG_TYPES = {7: "string", 20: "resource", 21: "variant"}

_state = threading.local()
mode = "off"                 # "off" | "on" | "strict"; set by tf_backend.switch
owned = set()                # op names the fast-path hook bounces to us
check_input_devices = False  # True only when TensorFlow sees a GPU


class OpInfo:
    __slots__ = ("op", "eligible", "reason", "shape_fn", "type_attrs", "list_type_attrs",
                 "value_free", "eager")


# Eager ops whose TensorFlow op hands back the input's buffer (the kernels' view ops: Reshape,
# ExpandDims, Squeeze, Split...; the aliases: Identity, StopGradient...) run as TensorFlow's op
# in mode "on", counted under this reason: our eager path makes every output a tensor of its
# own, so it copied (a 128 MiB tf.reshape, tf.identity or tf.expand_dims: 7.0-7.4 ms against
# stock's 0.01-0.04 ms, and the memory twice), and on small tensors TensorFlow's C fast path is
# quicker too. Programs keep them as views of their own. TF_BACKEND_EAGER_VIEWS=ours runs them
# on our kernels (the suite does: it checks those kernels against stock); strict and shadow
# modes always do.
EAGER_VIEW = "view: TensorFlow's op shares the input's buffer"
EAGER_VIEWS_TO_TF = os.environ.get("TF_BACKEND_EAGER_VIEWS", "tensorflow") != "ours"
_eager_views = frozenset()


_infos = {}
_attr_cache = {}
_spec_cache = {}   # (op, attrs key, input shapes) -> output specs, for value-free shape fns
_warned = set()


# Ops with no data to compute: neither ours nor a fallback, so the ledger does not count them
NO_EFFECT = frozenset({"NoOp", "ControlTrigger"})


def _build_info(op):
    if op in NO_EFFECT:
        return None
    sig = tfa.op_signature(op)
    if sig is None:
        return None  # a function call (__inference_f_12), not an op
    stateful, type_attrs, list_type_attrs, _ = sig
    info = OpInfo()
    info.op, info.type_attrs, info.list_type_attrs = op, type_attrs, list_type_attrs
    info.shape_fn = shape_fns.get(op)
    info.value_free = op in shape_fns.VALUE_FREE
    info.eligible = not (op in NEVER_INTERCEPT or stateful or _touches_state(op))
    info.eager = EAGER_VIEW if op in _eager_views else None
    if not info.eligible:
        info.reason = "never_intercept"
    elif not HOST.registered(op) or info.shape_fn is None:
        info.reason = "not_registered"
    else:
        info.reason = None
    return info


def _touches_state(op):
    od = tfa.op_def(op)
    for a in list(od.input_arg) + list(od.output_arg):
        if a.type in _BAD_ARG_TYPES:
            return True
    return False


def info_for(op):
    try:
        return _infos[op]
    except KeyError:
        info = _infos[op] = _build_info(op)
        return info


def ensure_loaded():
    """Kernel and shape-fn modules imported (idempotent)."""
    HOST.load()
    shape_fns.load_all()


def refresh(for_mode="on"):
    """Recompute ownership after kernels or shape fns were (un)registered, for eager ops in
    mode `for_mode`."""
    global _eager_views
    from .program.lower import ALIAS_OPS
    _attr_cache.clear()
    _spec_cache.clear()
    from . import fastpath
    fastpath._plans.clear()
    fastpath._splans.clear()
    owned.clear()
    HOST.load()
    shape_fns.load_all()
    _eager_views = (frozenset(kernels.view_ops(HOST.name)) | ALIAS_OPS   # as kernels declare
                    if EAGER_VIEWS_TO_TF and for_mode == "on" else frozenset())
    _infos.clear()
    for (op, dev) in list(kernels.KERNELS):
        if dev == HOST.name:
            info = info_for(op)
            if info is not None and info.reason is None and info.eager is None:
                owned.add(op)


def _fallback(info, reason):
    ledger.fallback(info.op, reason)
    if mode == "strict" and info.eligible:
        raise tfa.status_error(
            f"tf_backend strict mode: op {info.op} fell back to TensorFlow ({reason})", 12)
    return None


def on_fast_passthrough(op):
    info = info_for(op)
    if info is None:
        return
    ledger.fallback(op, info.eager or info.reason)
    if mode == "strict" and info.eligible:
        raise tfa.tf_error(
            f"tf_backend strict mode: op {op} fell back to TensorFlow ({info.reason})", 12)


def on_fast_uncount(op):
    info = info_for(op)
    if info is not None:
        ledger.uncount_fallback(op, info.eager or info.reason)


def _decode_attrs(info, flat):
    attrs = {}
    bad = None
    for i in range(0, len(flat), 2):
        k, v = flat[i], flat[i + 1]
        if k in info.type_attrs:
            d = tfa.ENUM_TO_DTYPE.get(v)
            if d is None:
                bad = f"dtype:{_enum_name(v)}"
            v = d
        elif k in info.list_type_attrs:
            v = tuple(tfa.ENUM_TO_DTYPE.get(e) for e in v)
            if None in v:
                bad = "dtype:list"
        elif type(v) is bytes:
            v = v.decode()
        elif type(v) is list and v and type(v[0]) is bytes:
            v = [e.decode() for e in v]
        attrs[k] = v
    return attrs, bad


def _enum_name(e):
    return {7: "string", 8: "complex64", 18: "complex128", 20: "resource",
            21: "variant"}.get(e, f"enum{e}")


def _resolve(info, flat):
    """(attrs, kernel_def, reason), cached by the flat attr tuple when it is hashable."""
    key = (info.op, flat)
    try:
        return _attr_cache[key]
    except KeyError:
        pass
    except TypeError:
        key = None
    attrs, bad = _decode_attrs(info, flat)
    if bad:
        res = (attrs, None, bad)
    else:
        kdef, reason = HOST.lookup(info.op, attrs)
        res = (attrs, kdef, reason)
    if key is not None:
        if len(_attr_cache) > 8192:
            _attr_cache.clear()
        _attr_cache[key] = res
    return res


def on_slow(op_name, inputs, flat_attrs, device_name):
    """The TFE_Py_Execute hook: run the op on our kernel, or return None for TensorFlow."""
    op = op_name.decode() if type(op_name) is bytes else op_name
    info = info_for(op)
    if info is None:
        return None
    if flat_attrs is None:   # some TF Python code calls TFE_Py_Execute with attrs=None
        flat_attrs = ()
    if info.reason is not None:
        return _fallback(info, info.reason)
    if info.eager is not None:
        return _fallback(info, info.eager)
    if device_name and not tfa.device_is_cpu(device_name):
        return _fallback(info, "device_placement")
    if check_input_devices:
        for t in inputs:
            if not tfa.device_is_cpu(getattr(t, "device", "")):
                return _fallback(info, "device_placement")
    attrs, kdef, reason = _resolve(info, flat_attrs)
    if kdef is None:
        return _fallback(info, reason)
    try:
        arrays = [tfa.to_numpy(t) for t in inputs]
    except Exception:  # an input TensorFlow cannot hand over as numpy
        return _fallback(info, "input_kind")
    try:
        hash(flat_attrs)
        key = flat_attrs
    except TypeError:
        key = None
    if mode == "shadow":
        return _shadow_run(info, kdef, arrays, attrs, key, inputs, flat_attrs)
    return run(info, kdef, arrays, attrs, key)


def _shadow_run(info, kdef, arrays, attrs, key, inputs, flat_attrs):
    """Ours and TensorFlow's kernel on the same inputs; the user gets TensorFlow's result."""
    from . import shadow
    ours, ours_error = None, None
    try:
        ours = run(info, kdef, arrays, attrs, key)
    except Exception as e:  # noqa: BLE001 - compared with TensorFlow's behaviour below
        ours_error = e
    if ours is None and ours_error is None:
        return None     # we declined the op: nothing to compare
    try:
        ref = tfa.execute_stock(info.op, inputs, flat_attrs, len(ours) if ours else 1)
    except Exception as e:  # noqa: BLE001
        shadow.check(info.op, arrays, None, None, shadow.user_line(), ours_error, e)
        raise
    if ours_error is not None:
        shadow.check(info.op, arrays, None, None, shadow.user_line(), ours_error, None)
    else:
        shadow.check(info.op, arrays, [np.asarray(t) for t in ours], [np.asarray(t) for t in ref],
                     shadow.user_line())
    return ref


def _outputs(info, kdef, arrays, attrs, attrs_key):
    """Allocate outputs (allocation plan cached for value-free shape fns) and run the kernel."""
    if info.value_free and attrs_key is not None:
        if len(arrays) == 2:
            key = (info.op, attrs_key, arrays[0].shape, arrays[1].shape)
        else:
            key = (info.op, attrs_key, *[a.shape for a in arrays])
        p = _spec_cache.get(key)
        if p is None:
            p = alloc.plan(info.shape_fn([Spec(a.shape, a.dtype) for a in arrays], attrs))
            if len(_spec_cache) > 16384:
                _spec_cache.clear()
            _spec_cache[key] = p
        outs = alloc.empty_planned(p)
        kdef.fn(arrays, outs, attrs)
        return outs
    return executor.run_kernel(kdef, info.shape_fn, arrays, attrs)


def _warm_kernel(info, arrays, attrs):
    try:
        specs = info.shape_fn([Spec(a.shape, a.dtype, a) for a in arrays], attrs)
    except Exception:  # noqa: BLE001 - no specs: the function-level requests still run
        return
    executor._library("compiles").warm_kernel(info.op, attrs, arrays, specs)


def run(info, kdef, arrays, attrs, attrs_key=None):
    """Shape fn -> allocate -> kernel -> EagerTensors (or None to fall back).

    attrs_key: a hashable key of the attrs (the flat attr tuple), enabling the spec cache.
    """
    try:
        outs = _outputs(info, kdef, arrays, attrs, attrs_key)
    except Unsupported as u:
        if getattr(u, "deferred", False):   # compiling in a child: it runs the whole kernel
            _warm_kernel(info, arrays, attrs)
        return _fallback(info, u.reason)
    except BackendError as e:
        ledger.error(info.op)
        specs = [Spec(a.shape, a.dtype) for a in arrays]
        raise tfa.status_error(
            f"{e.message} (op {info.op}; inputs: {describe(specs)}) [Op:{info.op}]",
            e.code) from None
    except Exception as e:  # a defect of ours: never the user's problem; TensorFlow runs it
        specs = [Spec(a.shape, a.dtype) for a in arrays]
        if (info.op, type(e)) not in _warned:
            _warned.add((info.op, type(e)))
            warnings.warn(f"tf_backend: kernel {kdef.name} failed on {describe(specs)} "
                          f"({type(e).__name__}: {e}); falling back to TensorFlow",
                          RuntimeWarning, stacklevel=2)
        return _fallback(info, f"internal_error:{type(e).__name__}")
    ledger.backend(info.op, kdef.name)
    return [tfa.make_tensor(o) for o in outs]
