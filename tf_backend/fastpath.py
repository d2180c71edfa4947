"""Direct execution of owned ops from the fast-path hook (no trip through TF's Python fallback).

Handles the common call: EagerTensor (or Python scalar/list) inputs, no op callbacks, CPU scope.
Anything unusual returns BOUNCE, and TensorFlow's generated fallback brings the op back to
dispatch.on_slow with normalised inputs and attrs. Gradients are recorded here when a tape or
forward accumulator is active.
"""
import numpy as np

from . import dispatch, tf_adapter as tfa

BOUNCE = tfa.BOUNCE
_layouts = {}
_plans = {}    # (op, flat attrs) -> (OpInfo, canonical attrs, KernelDef or None)
_ET = None
_SCALARS = (int, float, bool)


def _layout(op):
    L = _layouts.get(op)
    if L is None:
        L = _layouts[op] = tfa.fast_layout(op)
        # simple_attr: every input is a plain tensor typed by the same single attr, no other attrs
        tas = {ta for ta, fixed, na, tla in L.inputs}
        plain = all(not fixed and not na and not tla for ta, fixed, na, tla in L.inputs)
        L.simple_attr = (next(iter(tas)) if plain and len(tas) == 1 and None not in tas
                         and set(L.kinds) == tas else None)
    return L


def on_fast(op, name, args):
    """Called by the fast-path hook (context already checked: no callbacks, CPU:0 scope)."""
    global _ET
    if _ET is None:
        _ET = tfa.eager_tensor_type()
    if dispatch.mode == "shadow":   # compared against TensorFlow on the slow path
        return BOUNCE
    L = _layouts.get(op) or _layout(op)
    n_in = L.n_in
    nargs = len(args)
    if nargs < n_in:
        return BOUNCE
    ET = _ET
    simple = L.simple_attr is not None and nargs == n_in
    if simple:
        e = None
        for t in args:   # tensors only, one shared type attr, no explicit attrs
            if type(t) is not ET:
                simple = False
                break
            te = t._datatype_enum()
            if e is None:
                e = te
            elif te != e:
                return BOUNCE
    if simple:
        r = _simple(op, L, args, e)
        if r is not None:
            return r
        flat = (L.simple_attr, e)
        tensors = args
    else:
        r = _general(L, args, n_in, nargs, ET)
        if r is BOUNCE:
            return BOUNCE
        flat, tensors = r
    try:
        plan = _plans.get((op, flat))
        key = flat
    except TypeError:  # unhashable attr values: resolve without the caches
        plan, key = None, None
    if plan is None:
        info = dispatch.info_for(op)
        if key is not None:
            attrs, kdef, reason = dispatch._resolve(info, flat)
            if len(_plans) > 8192:
                _plans.clear()
            _plans[(op, flat)] = (info, attrs, kdef)
        else:
            attrs, bad = dispatch._decode_attrs(info, flat)
            kdef, reason = (None, bad) if bad else dispatch.HOST.lookup(op, attrs)
    else:
        info, attrs, kdef = plan
    if kdef is None:
        return BOUNCE  # the slow path records the fallback reason once
    to_numpy = tfa.to_numpy
    arrays = [t if type(t) is np.ndarray else to_numpy(t) for t in tensors]
    outs = dispatch.run(info, kdef, arrays, attrs, key)
    if outs is None:
        return BOUNCE
    if tfa.tape_active():
        inputs = [t if type(t) is ET else tfa.make_tensor(t) for t in tensors]
        tfa.record_gradient(op, inputs, flat, outs)
    return outs[0] if L.single_output else outs


_splans = {}   # (op, dtype enum) -> (info, attrs, kdef, counter, flat) or False


def _simple(op, L, args, e):
    """The commonest call (tensors only, one type attr, value-free shape fn, one output) with
    nothing generic on the way; None sends it down the general path."""
    plan = _splans.get((op, e))
    if plan is None:
        flat = (L.simple_attr, e)
        info = dispatch.info_for(op)
        attrs, kdef, _ = dispatch._resolve(info, flat)
        ok = kdef is not None and info.value_free and L.single_output
        plan = _splans[(op, e)] = (
            (info, attrs, kdef, dispatch.ledger.counter(op, kdef.name), flat) if ok else False)
    if plan is False:
        return None
    info, attrs, kdef, counter, flat = plan
    arrays = tfa.numpy_views(args)
    try:
        outs = dispatch._outputs(info, kdef, arrays, attrs, flat)
    except Exception:  # errors, Unsupported, defects: the general path handles them all
        return None
    next(counter)
    out = tfa.make_tensor(outs[0])
    if tfa.tape_active():
        tfa.record_gradient(op, args, flat, [out])
    return out


def _general(L, args, n_in, nargs, ET):
    """(flat attrs tuple, tensors) for any fast-path call we can take, else BOUNCE."""
    flat = []           # attrs as TF's slow path would see them (also for record_gradient)
    types = {}          # type attr -> enum
    kinds = L.kinds
    for i in range(n_in, nargs - 1, 2):
        k, v = args[i], args[i + 1]
        kind = kinds.get(k)
        if v is None:
            v = L.defaults.get(k)
        elif kind == "type" and type(v) is not int:
            v = getattr(v, "as_datatype_enum", None)
            if v is None:
                return BOUNCE
        if kind == "type":
            types[k] = v
        elif isinstance(v, list):  # also list subclasses, e.g. Keras' TrackedList
            v = tuple(v)
        flat.append(k)
        flat.append(v)
    tensors = []
    pending = None
    for j, (type_attr, fixed, number_attr, type_list_attr) in enumerate(L.inputs):
        v = args[j]
        if number_attr or type_list_attr:
            if type(v) not in (list, tuple) or not all(type(t) is ET for t in v):
                return BOUNCE
            if number_attr:
                flat.append(number_attr)
                flat.append(len(v))
                if type_attr:
                    for t in v:
                        e = t._datatype_enum()
                        if types.setdefault(type_attr, e) != e:
                            return BOUNCE
            else:
                flat.append(type_list_attr)
                flat.append(tuple(t._datatype_enum() for t in v))
            tensors.extend(v)
        elif type(v) is ET:
            if type_attr:
                e = v._datatype_enum()
                if types.setdefault(type_attr, e) != e:
                    return BOUNCE
            tensors.append(v)
        else:   # a value to convert once every tensor has said what its type attr is
            numpy_value = type(v) is np.ndarray or isinstance(v, np.generic)
            if not (numpy_value or type(v) in _SCALARS or type(v) is list):
                return BOUNCE
            if pending is None:
                pending = []
            pending.append((len(tensors), j, v, numpy_value))
            tensors.append(None)
    if pending is not None:
        for pos, j, v, numpy_value in pending:
            type_attr, fixed = L.inputs[j][0], L.inputs[j][1]
            enum = fixed or types.get(type_attr) or L.defaults.get(type_attr)
            if numpy_value:
                a, enum = _convert_numpy(v, enum)
            else:
                a = _convert(v, tfa.ENUM_TO_DTYPE.get(enum))
            if a is None:
                return BOUNCE
            if type_attr:
                types.setdefault(type_attr, enum)
            tensors[pos] = a
    for k in L.inferred:
        if k in types:
            flat.append(k)
            flat.append(types[k])
    return tuple(flat), tensors


_INT_BOUNDS = {}


def _convert_numpy(v, enum):
    """(array, dtype enum) for a numpy array or scalar input, as TensorFlow's fast path converts
    it (pywrap_tensor.cc, ConvertToEagerTensorUncached): cast to the dtype its type attr already
    has (from a tensor input, an earlier converted input or the attr's default), unsafe casts
    included (NPY_ARRAY_FORCECAST); with none, its own dtype. Always a C-contiguous copy of
    ours: a view op's output must not alias the caller's array. (None, None) for what that
    path does not take this way (strings, objects)."""
    a = np.asarray(v)
    if a.dtype.kind not in "biufc":
        return None, None
    if enum:
        dt = tfa.ENUM_TO_DTYPE.get(enum)
        if dt is None or (a.dtype.kind == "c" and dt.kind != "c"):   # numpy would warn
            return None, None
    else:
        dt = a.dtype
        enum = tfa.DTYPE_TO_ENUM.get(dt)
        if enum is None:
            return None, None
    with np.errstate(all="ignore"):
        return np.array(a, dtype=dt, order="C", copy=True), enum


def _convert(v, dt):
    """A Python scalar/list as a numpy array of the op's dtype, or None when TF would differ."""
    if dt is None:
        return None
    t = type(v)
    kind = dt.kind
    if t is int:
        if kind == "f":
            return np.asarray(v, dt)
        if kind not in "iu":
            return None
        lo, hi = _INT_BOUNDS.get(dt) or _INT_BOUNDS.setdefault(
            dt, (int(np.iinfo(dt).min), int(np.iinfo(dt).max)))
        return np.asarray(v, dt) if lo <= v <= hi else None
    if t is float:
        return np.asarray(v, dt) if kind == "f" else None
    if t is bool:
        return np.asarray(v, dt) if kind == "b" else None
    try:
        a = np.asarray(v)
    except Exception:
        return None
    k = a.dtype.kind
    if k not in "bif" or (k == "b") != (kind == "b") or (k == "f" and kind != "f"):
        return None
    if k == "i" and kind in "iu" and a.size:
        info = np.iinfo(dt)
        if a.min() < info.min or a.max() > info.max:
            return None
    return a.astype(dt)
