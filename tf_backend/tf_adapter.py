"""The only module that touches TensorFlow private APIs; every use is version-checked here.

Verified against the TensorFlow versions in VERIFIED. Facts it relies on: ../shared/DESIGN.md §2-3.
"""
import re
import threading
import warnings

import numpy as np

# TF DataType enum <-> numpy dtype (only the dtypes our kernels may see)
from shape_fns.spec import DTYPE_TO_ENUM, ENUM_TO_DTYPE  # noqa: F401

VERIFIED = ("2.21",)
# Our outputs live on this process's host CPU. A partial name: the context completes it with its
# own job/replica/task, /job:localhost/... in one process, /job:worker/replica:0/task:N/... once
# a multi-worker context is set up (a full /job:localhost name is an unknown device there).
CPU_DEVICE = "/device:CPU:0"


_lock = threading.Lock()
_installed = None     # (pywrap_tfe, orig_fast, orig_slow) while hooks are in place


def tf_version():
    import tensorflow as tf
    return tf.__version__


def is_verified(version=None):
    version = version or tf_version()
    return any(version == v or version.startswith(v + ".") for v in VERIFIED)


def _tf():
    from tensorflow.python import pywrap_tfe
    from tensorflow.python.eager import context, core
    from tensorflow.python.framework import ops, op_def_registry
    return pywrap_tfe, context, core, ops, op_def_registry


BOUNCE = object()   # returned by on_fast: let TensorFlow's generated fallback handle this call


def install(fast_owned, on_fast, on_fast_passthrough, on_fast_uncount, on_slow, tracer=None):
    """Patch both eager entry points.

    fast_owned: a set-like of op names we want to run (they are bounced to the slow path, where
    TensorFlow's generated fallback normalises inputs/attrs, runs op callbacks and records
    gradients) unless on_fast(ctx, op_name, name, args) runs them directly (returning the
    result, or BOUNCE). on_slow(op_name, inputs, flat_attrs, device_name) returns a list of EagerTensors,
    or None to let TensorFlow run the op.
    """
    global _installed
    with _lock:
        if _installed is not None:
            return
        pywrap_tfe, context, core, ops, _ = _tf()
        orig_fast, orig_slow = pywrap_tfe.TFE_Py_FastPathExecute, pywrap_tfe.TFE_Py_Execute
        fallback_exc = core._FallbackException

        def fast_hook(ctx, op_name, name, *args):
            if op_name in fast_owned:
                tld = ctx._thread_local_data
                dn = tld.device_name
                # op callbacks or a non-CPU:0 device scope: TF's fallback path handles the op
                if not tld.op_callbacks and (not dn or dn.endswith("CPU:0")):
                    r = on_fast(op_name, name, args)
                    if r is not BOUNCE:
                        return r
                raise fallback_exc()
            on_fast_passthrough(op_name)
            try:
                return orig_fast(ctx, op_name, name, *args)
            except fallback_exc:
                on_fast_uncount(op_name)
                raise

        def slow_hook(ctx_handle, device_name, op_name, inputs, attrs, num_outputs):
            out = on_slow(op_name, inputs, attrs, device_name)
            if out is None:
                return orig_slow(ctx_handle, device_name, op_name, inputs, attrs, num_outputs)
            return out

        if tracer is not None:   # tracing variants: chosen here so the plain hooks pay nothing
            fast_plain = fast_hook

            def fast_hook(ctx, op_name, name, *args):
                t0 = tracer.now()
                try:
                    return fast_plain(ctx, op_name, name, *args)
                finally:
                    tracer.span(op_name, "eager", t0, device="CPU:0",
                                path="backend" if op_name in fast_owned else "fallback",
                                shapes=tracer.shapes(a for a in args if hasattr(a, "shape")))

            def slow_hook(ctx_handle, device_name, op_name, inputs, attrs, num_outputs):
                t0 = tracer.now()
                out = on_slow(op_name, inputs, attrs, device_name)
                path = "backend"
                if out is None:
                    path = "fallback"
                    out = orig_slow(ctx_handle, device_name, op_name, inputs, attrs, num_outputs)
                name = op_name.decode() if isinstance(op_name, bytes) else op_name
                if not name.startswith("__inference"):
                    tracer.span(name, "eager", t0, device=device_name or "CPU:0", path=path,
                                shapes=tracer.shapes(inputs))
                return out

        fast_hook.__wrapped__, slow_hook.__wrapped__ = orig_fast, orig_slow
        pywrap_tfe.TFE_Py_FastPathExecute = fast_hook
        pywrap_tfe.TFE_Py_Execute = slow_hook
        _installed = (pywrap_tfe, orig_fast, orig_slow)


def uninstall():
    global _installed
    with _lock:
        if _installed is None:
            return
        pywrap_tfe, orig_fast, orig_slow = _installed
        pywrap_tfe.TFE_Py_FastPathExecute = orig_fast
        pywrap_tfe.TFE_Py_Execute = orig_slow
        _installed = None


def installed():
    return _installed is not None


def entry_points():
    """The current (fast, slow) entry points, for tests that check nothing is patched."""
    from tensorflow.python import pywrap_tfe
    return pywrap_tfe.TFE_Py_FastPathExecute, pywrap_tfe.TFE_Py_Execute


def op_def(op_name):
    from tensorflow.python.framework import op_def_registry
    return op_def_registry.get(op_name)


def op_signature(op_name):
    """(is_stateful, type_attrs, list_type_attrs, arg_types) of an op, or None for non-ops."""
    od = op_def(op_name)
    if od is None:
        return None
    type_attrs = frozenset(a.name for a in od.attr if a.type == "type")
    list_type_attrs = frozenset(a.name for a in od.attr if a.type == "list(type)")
    arg_types = [a.type for a in list(od.input_arg) + list(od.output_arg)]
    return od.is_stateful, type_attrs, list_type_attrs, arg_types


def to_numpy(t):
    """Zero-copy numpy view of an EagerTensor. It aliases TensorFlow's memory and is writable:
    kernels must never write their inputs (the op-table tests check every input afterwards)."""
    a = t._numpy()
    if type(a) is not np.ndarray:  # 0-d tensors come back as numpy scalars
        return np.asarray(a)
    return a


def buffer_addresses(values):
    """The data address of each value (numpy array or EagerTensor), or None when one has no
    stable buffer (a 0-d tensor comes back from TensorFlow as a fresh numpy scalar)."""
    out = []
    for v in values:
        a = v if type(v) is np.ndarray else v._numpy_internal()
        if type(a) is not np.ndarray:
            return None
        out.append(a.ctypes.data)
    return tuple(out)


def numpy_views(tensors):
    """to_numpy over a sequence, in one call (the eager hot path)."""
    out = []
    for t in tensors:
        a = t._numpy()
        out.append(a if type(a) is np.ndarray else np.asarray(a))
    return out


_EagerTensor = None


def make_tensor(arr):
    """Wrap a C-contiguous numpy array as an EagerTensor on the CPU (zero-copy if aligned)."""
    global _EagerTensor
    if _EagerTensor is None:
        from tensorflow.python.framework import ops
        _EagerTensor = ops.EagerTensor
    return _EagerTensor(arr, CPU_DEVICE, DTYPE_TO_ENUM[arr.dtype])


def status_error(message, code):
    """An exception that TensorFlow's execute path turns into the tf.errors class for `code`."""
    from tensorflow.python.eager import core
    return core._NotOkStatusException(message, code, None)


def tf_error(message, code):
    """The tf.errors exception for a canonical code."""
    from tensorflow.python.framework import errors
    cls = errors.exception_type_from_error_code(code)
    return cls(None, None, message)


_context_fn = []   # [tensorflow's context.context]: the import statement cost 1 us a call


def ctx():
    if not _context_fn:
        from tensorflow.python.eager import context
        _context_fn.append(context.context)
    return _context_fn[0]()


_CPU0 = re.compile(r"^((/job:(?P<job>[^/]+))?(/replica:(?P<replica>\d+))?"
                   r"(/task:(?P<task>\d+))?)(/device:|/)?CPU:(?P<index>\d+)$", re.I)
_host_cpu0_seen = {}


def host_address_space():
    """(job, replica, task) of this process in its context: localhost/0/0 alone, worker/0/N in
    a multi-worker cluster."""
    m = _CPU0.match(ctx().host_address_space() + "/device:CPU:0")
    return (m.group("job"), m.group("replica"), m.group("task")) if m else ("localhost", "0", "0")


def device_is_cpu(device_name):
    """True for no device scope or this process's CPU:0 in whatever job the context runs (our
    outputs live there). Another task's CPU:0 (`/job:worker/replica:0/task:1/device:CPU:0`
    seen from task 0) is not ours to run on. Cached per name (cleared by `forget_devices`)."""
    if not device_name:
        return True
    r = _host_cpu0_seen.get(device_name)
    if r is None:
        r = _host_cpu0_seen[device_name] = device_is_local_cpu(device_name, index="0")
    return r


def device_is_local_cpu(device_name, index=None):
    """A CPU device of this process (any index, or `index`), in whatever job the context runs."""
    m = _CPU0.match(device_name)
    if m is None or (index is not None and m.group("index") != index):
        return False
    local = host_address_space()
    return all(m.group(k) is None or m.group(k) == v
               for k, v in zip(("job", "replica", "task"), local))


def forget_devices():
    """Drop cached device answers (the context may have changed its job)."""
    _host_cpu0_seen.clear()


def gpus_visible():
    import tensorflow as tf
    return bool(tf.config.list_physical_devices("GPU"))


def warn_unverified(version):
    warnings.warn(
        f"tf_backend: TensorFlow {version} is not a version the hooks were verified against "
        f"({', '.join(VERIFIED)}); the backend stays disabled. Set TF_BACKEND_FORCE=1 or call "
        f"tf_backend.enable(force=True) to try anyway.", RuntimeWarning, stacklevel=3)


def canonical_attr(value, kind):
    """An attr value in the form kernels and shape fns see: dtypes as numpy dtypes, str not bytes."""
    if kind == "type":
        return ENUM_TO_DTYPE.get(_enum(value))
    if kind == "list(type)":
        return tuple(ENUM_TO_DTYPE.get(_enum(v)) for v in value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _enum(v):
    return v if isinstance(v, int) else v.as_datatype_enum


def graph_op_attrs(op):
    """Canonical attrs of a graph Operation (for shape-fn checks and the program compiler)."""
    out = {}
    for name, kind, v in _graph_attr_values(op):
        if kind == "shape":
            v = None if v.rank is None else tuple(v.as_list())
        out[name] = canonical_attr(v, kind)
    return out


_OP_DEFS = {}   # serialized OpDef -> parsed (Operation.op_def parses it on every read)


def graph_op_def(op):
    """A graph Operation's OpDef, parsed once per distinct definition."""
    b = op._op_def
    d = _OP_DEFS.get(b)
    if d is None:
        from tensorflow.core.framework import op_def_pb2
        d = _OP_DEFS[b] = op_def_pb2.OpDef.FromString(b)
    return d


_ATTR_FIELDS = ("s", "i", "f", "b", "type", "shape", "tensor", "func")


def _graph_attr_values(op):
    """(name, OpDef attr type, value) of each attr the op has, in OpDef order, each value as
    Operation.get_attr returns it (same conversions) except that a `shape` attr is a TensorShape,
    decoded from one NodeDef: get_attr costs a C call, a buffer and a parse per attr (~20 us an
    op of a Keras step's lowering, twice)."""
    from tensorflow.python.framework import dtypes, tensor_shape
    have = op.node_def.attr
    out = []
    for a in graph_op_def(op).attr:
        if a.name not in have:
            continue
        x = have[a.name]
        which = x.WhichOneof("value")
        if which is None:
            v = []
        elif which == "list":
            v = []
            for f in _ATTR_FIELDS:
                items = getattr(x.list, f)
                if items:
                    v = ([dtypes.as_dtype(t) for t in items] if f == "type" else list(items))
                    break
        elif which == "type":
            v = dtypes.as_dtype(x.type)
        else:
            v = getattr(x, which)
        if a.type == "shape":
            v = tensor_shape.TensorShape(v)
        out.append((a.name, a.type, v))
    return out


def graph_const_value(t):
    """Host value of a graph tensor when TensorFlow can fold it to a constant, else None."""
    from tensorflow.python.framework import tensor_util
    try:
        return tensor_util.constant_value(t)
    except Exception:
        return None


class FastLayout:
    """How TFE_Py_FastPathExecute lays out an op's arguments (from its OpDef)."""

    __slots__ = ("op", "inputs", "n_in", "defaults", "kinds", "single_output", "inferred",
                 "simple_attr")


def _attr_default(av):
    which = av.WhichOneof("value")
    if which is None:
        return None
    if which == "list":
        lv = av.list
        for f in ("s", "i", "f", "b", "type"):
            vals = list(getattr(lv, f))
            if vals:
                return vals
        return []
    if which == "shape":
        return None
    return getattr(av, which)


def fast_layout(op_name):
    od = op_def(op_name)
    if od is None:
        return None
    L = FastLayout()
    L.op = op_name
    # (type_attr, fixed_enum, number_attr, type_list_attr) per input arg
    L.inputs = [(a.type_attr or None, a.type or None, a.number_attr or None,
                 a.type_list_attr or None) for a in od.input_arg]
    L.n_in = len(L.inputs)
    L.kinds = {a.name: a.type for a in od.attr}
    L.defaults = {a.name: _attr_default(a.default_value) for a in od.attr
                  if a.HasField("default_value")}
    L.inferred = {x for a in od.input_arg for x in (a.type_attr, a.number_attr, a.type_list_attr) if x}
    outs = od.output_arg
    L.single_output = len(outs) == 1 and not outs[0].number_attr and not outs[0].type_list_attr
    return L


_tape_set_is_empty = None
_record_gradient = None


def tape_active():
    global _tape_set_is_empty
    if _tape_set_is_empty is None:
        from tensorflow.python import pywrap_tfe
        _tape_set_is_empty = pywrap_tfe.TFE_Py_TapeSetIsEmpty
    return not _tape_set_is_empty()


def record_gradient(op_name, inputs, flat_attrs, outputs):
    """Record an op run outside TensorFlow's executor on the active tapes/accumulators."""
    global _record_gradient
    if _record_gradient is None:
        from tensorflow.python.eager import execute
        _record_gradient = execute.record_gradient
    _record_gradient(op_name, inputs, flat_attrs, outputs)


def eager_tensor_type():
    from tensorflow.python.framework import ops
    return ops.EagerTensor


# --- tf.function interception (DESIGN.md §4) ---------------------------------------------

_fn_installed = None   # (AtomicFunction class, original call_flat)


def install_function_hook(on_call):
    """Patch AtomicFunction.call_flat. on_call(atomic_fn, args) returns the flat outputs, or
    None to let TensorFlow run the function. Tracing (non-eager) and XLA calls never reach it."""
    global _fn_installed
    with _lock:
        if _fn_installed is not None:
            return
        from tensorflow.python.eager.polymorphic_function import atomic_function
        cls = atomic_function.AtomicFunction
        orig = cls.call_flat

        def call_flat(self, *args):
            if self._bound_context.executing_eagerly():
                d = self.__dict__
                xla = d.get("_tfb_xla")
                if xla is None:   # the definition's attrs never change: read once
                    xla = d["_tfb_xla"] = _xla_marked(self)
                if not xla:
                    out = on_call(self, args)
                    if out is not None:
                        return out
            return orig(self, *args)

        call_flat.__wrapped__ = orig
        cls.call_flat = call_flat
        _fn_installed = (cls, orig)


def function_note(atomic_fn):
    """What functions.py noted on this AtomicFunction (its `set_function_note`), or None."""
    return atomic_fn.__dict__.get("_tfb_note")


def set_function_note(atomic_fn, note):
    """Keep `note` on the AtomicFunction itself: it lives and dies with the function (a table
    keyed by id() could hand a new function a dead one's note)."""
    atomic_fn.__dict__["_tfb_note"] = note


def call_function_stock(atomic_fn, args):
    """TensorFlow's own run of a function (the hooked call_flat's original)."""
    return _fn_installed[1](atomic_fn, *args)


def uninstall_function_hook():
    _restore("_fn_installed", "call_flat")


def _restore(name, attr):
    """Put back the method a hook patched: global `name` holds (class, original) or None."""
    with _lock:
        installed = globals()[name]
        if installed is not None:
            setattr(installed[0], attr, installed[1])
            globals()[name] = None


# --- tf.function calls: TensorFlow's Python call layer, short-cut ---------------------------

_call_installed = None   # (Function class, original __call__)
CALL_KEYS_MAX = 64       # argument signatures kept per tf.function (a relaxed trace serves many)
_NOT_PLAIN = (20, 21)    # DT_RESOURCE, DT_VARIANT: their trace type holds more than shape, dtype


def install_call_shortcut():
    """Patch polymorphic_function.Function.__call__ so that a repeated call skips TensorFlow's
    Python binding and trace-type lookup: when every argument is an EagerTensor given
    positionally (not a resource or variant), in a context where TensorFlow has already resolved
    the same shapes and dtypes to a concrete function whose flat inputs are exactly those
    tensors, that concrete function's _call_flat runs (what tracing_compilation.call_function
    calls after its lookup; tapes and captures are handled there). Anything else, a new
    signature, a retrace since, a changed context (device scope, strategy, graph), keyword
    arguments, input_signature, jit_compile or run_functions_eagerly takes TensorFlow's path,
    which then records the resolution. A 4x4 one-op function: 250 -> 90 us per call; a
    tf.matmul wrapped as is (12 parameters to bind): 1 ms less (AMD EPYC Zen 3)."""
    global _call_installed
    with _lock:
        if _call_installed is not None:
            return
        from tensorflow.python.eager.polymorphic_function import (
            function_context, function_type_utils, polymorphic_function, tracing_compilation)
        from tensorflow.python.framework import ops
        cls = polymorphic_function.Function
        orig = cls.__call__
        eager_tensor = ops.EagerTensor
        context_now = function_context.make_function_context

        def signature(args):
            key = []
            for a in args:
                if type(a) is not eager_tensor:
                    return None
                dt = a._datatype_enum()
                if dt in _NOT_PLAIN:
                    return None
                key.append((a._shape_tuple(), dt))
            return tuple(key)

        def __call__(self, *args, **kwds):
            known = self.__dict__.get("_tfb_calls")
            if known is not None and known[0] is None:   # not a function this can short-cut
                return orig(self, *args, **kwds)
            key = ctx = None
            if not kwds and not self._run_functions_eagerly:
                key = signature(args)
                if key is not None:
                    ctx = context_now()
                    if known is not None and known[0] == self.experimental_get_tracing_count():
                        fn = known[1].get((key, ctx))
                        if fn is False:   # resolved before, to other inputs: TensorFlow's path
                            return orig(self, *args, **kwds)
                        if fn is not None:
                            return fn._call_flat(list(args), captured_inputs=fn.captured_inputs)
            out = orig(self, *args, **kwds)
            if key is not None:
                _learn_call(self, args, (key, ctx), function_type_utils, tracing_compilation)
            return out

        __call__.__wrapped__ = orig
        cls.__call__ = __call__
        _call_installed = (cls, orig)


def _learn_call(fn_obj, args, key, function_type_utils, tracing_compilation):
    """After TensorFlow's own call: the concrete function it ran for these arguments, kept
    under `key` (shapes and dtypes, context) when its flat inputs are exactly the arguments
    (False when they are not: TensorFlow's path from then on, without asking again)."""
    opts = (fn_obj._no_variable_creation_config if fn_obj._created_variables
            else fn_obj._variable_creation_config)
    if (fn_obj._jit_compile or opts is None or opts.input_signature is not None
            or (opts.function_captures is not None and opts.function_captures.capture_types)):
        fn_obj.__dict__["_tfb_calls"] = (None, None)
        return
    count = fn_obj.experimental_get_tracing_count()
    known = fn_obj.__dict__.get("_tfb_calls")
    if known is None or known[0] != count:
        known = fn_obj.__dict__["_tfb_calls"] = (count, {})
    if len(known[1]) >= CALL_KEYS_MAX:
        return
    bound = function_type_utils.canonicalize_function_inputs(
        args, {}, fn_obj._function_type, fn_obj._default_values, fn_obj._is_pure)
    concrete = tracing_compilation.trace_function(bound.args, bound.kwargs, opts)
    if fn_obj.experimental_get_tracing_count() != count:
        return   # (that lookup traced: not what the call ran)
    flat = concrete.function_type.unpack_inputs(
        concrete.function_type.bind(*bound.args, **bound.kwargs))
    same = len(flat) == len(args) and all(f is a for f, a in zip(flat, args))
    known[1][key] = concrete if same else False


def uninstall_call_shortcut():
    _restore("_call_installed", "__call__")


def _xla_marked(atomic_fn):
    av = atomic_fn.cached_definition.attr.get("_XlaMustCompile")
    return bool(av is not None and av.b)


def call_must_compile(op):
    """A call op (PartitionedCall...) to a `jit_compile=True` function: XLA must run it (Keras
    runs grouped convolutions that way; CPU TensorFlow has no kernel for them without XLA)."""
    try:
        return bool(op.get_attr("_XlaMustCompile"))
    except (ValueError, TypeError):
        return False


def atomic_fn_info(atomic_fn):
    """(name, FuncGraph) of an AtomicFunction."""
    name = atomic_fn.name
    return (name.decode() if isinstance(name, bytes) else name), atomic_fn.graph


def function_graph(name, outer_graph=None):
    """The FuncGraph of a library function (If/While branches, nested calls)."""
    from tensorflow.python.framework import function_def_to_graph
    if outer_graph is not None:
        g = outer_graph
        while g is not None:
            f = getattr(g, "_functions", {}).get(name)
            if f is not None and getattr(f, "graph", None) is not None:
                return f.graph
            g = getattr(g, "outer_graph", None)
    fdef = ctx().get_function_def(name)
    return function_def_to_graph.function_def_to_graph(fdef)


class OpWhere:
    """op_traceback_line(op), worked out when first read (str, bool, f-string): walking an op's
    traceback cost ~0.15 ms an op, 66 ms of lowering a Keras MNIST training function, and only
    an error message or a dump reads it."""
    __slots__ = ("_op", "_text")

    def __init__(self, op):
        self._op, self._text = op, None

    def __str__(self):
        if self._text is None:
            self._text = op_traceback_line(self._op)
            self._op = None
        return self._text

    def __bool__(self):
        return bool(str(self))


def op_traceback_line(op):
    """'file:line in fn' of the user frame that created a graph op, or ''."""
    try:
        tb = op.traceback
    except Exception:
        return ""
    if not tb:
        return ""
    for frame in reversed(list(tb)):
        fname = frame.filename
        if "/tensorflow/" not in fname and "/keras/" not in fname and "/tf_backend/" not in fname:
            return f'File "{fname}", line {frame.lineno}, in {frame.name}'
    f = list(tb)[-1]
    return f'File "{f.filename}", line {f.lineno}, in {f.name}'


def raw_attrs(op):
    """Flat (name, value, ...) attrs of a graph op in the form TFE_Py_Execute accepts."""
    flat = []
    for name, kind, v in _graph_attr_values(op):
        if kind == "type":
            v = v.as_datatype_enum
        elif kind == "list(type)":
            v = [t.as_datatype_enum for t in v]
        elif kind == "shape":
            v = _shape_list(v)
        elif kind == "list(shape)":
            v = [_shape_list(s) for s in v]
        elif kind == "func":
            v = v.name
        flat.append(name)
        flat.append(v)
    return tuple(flat)


def _shape_list(s):
    from tensorflow.python.framework import tensor_shape
    s = tensor_shape.TensorShape(s)
    return None if s.rank is None else s.as_list()


_stock = {}


def _stock_state():
    """(context handle, TFE_Py_Execute, core, context, context module) for the current eager
    context. Tests may replace the context (`context._reset_context()`, e.g. Keras' nn_test before
    setting logical devices): ops run through an old handle act on the old context (a variable
    assigned there read back empty), and reader functions registered there are unknown to the
    new one, so both are renewed when the context changes."""
    from tensorflow.python import pywrap_tfe
    from tensorflow.python.eager import context, core
    c = context.context()
    c.ensure_initialized()
    with _readers_lock:
        _readers.clear()
    with _groups_lock:
        _groups_here.clear()
    st = _stock["ctx"] = (c._handle, pywrap_tfe.TFE_Py_Execute, core, c, context)
    return st


# Every eager op TensorFlow runs captures the Python stack (TFE_Py_ExecuteCancelable ->
# StackTrace::Capture, the innermost 30 frames in 2.21) and works out each frame's line with
# PyCode_Addr2Line, which scans the frame's line table from the start to its current
# instruction: a caller deep inside a long function (Keras' `fit`, TensorFlow's own call path)
# costs every eager op its scan. Measured on the AVX2 EPYC VM: a 1-element AddV2 11 us at the
# top, 30 us under a 3000-line frame, 13 us once 28 short frames stand between them.
STACK_CAPTURE_FRAMES = 30


def _pad(n, fn, args):
    if n:
        return _pad(n - 1, fn, args)
    return fn(*args)


def call_below_capture(fn, *args):
    """fn(*args) under enough short frames that the eager ops it runs (a program's TensorFlow
    nodes) capture none of the caller's frames: a fixed ~1 us per call instead of the callers'
    line-table scans on every op."""
    return _pad(STACK_CAPTURE_FRAMES, fn, args)


def execute_stock(op_type, inputs, flat_attrs, num_outputs):
    """Run one op on TensorFlow's own kernel (bypassing our hooks); inputs are EagerTensors."""
    st = _stock.get("ctx")
    if st is None or st[4]._context is not st[3]:
        st = _stock_state()
    handle, orig, core = st[0], st[1], st[2]
    fn = _installed[2] if _installed is not None else orig
    try:
        return fn(handle, None, op_type, inputs, flat_attrs, num_outputs)
    except core._NotOkStatusException as e:
        raise core._status_to_exception(e) from None


def fresh_handle(t):
    """A new EagerTensor on t's buffer (TensorFlow's Identity, run without recording on any
    tape)."""
    return execute_stock("Identity", [t], ("T", t._datatype_enum()), 1)[0]


# Ops whose kernel keeps state between calls (a random generator): in a function each op has
# its own kernel, while eager calls of the same op and attrs share one cached kernel. Run as one
# eager op per program node, a seeded tf.random.uniform inside a function would continue the
# user's eager sequence instead of starting its own, as stock's does.
KERNEL_STATE_OPS = frozenset("""RandomUniform RandomUniformInt RandomStandardNormal
TruncatedNormal ParameterizedTruncatedNormal RandomShuffle Multinomial RandomGamma RandomPoisson
RandomPoissonV2 RandomCrop""".split())
_isolated = {}
_isolated_lock = threading.Lock()
ISOLATED_FUNCTIONS = set()   # names of those functions (TensorFlow runs them, not our hook)


def execute_isolated(key, op_type, inputs, flat_attrs):
    """Run one op through a TensorFlow function of its own, built once per `key` (the node's
    state_key: function and op name), so its kernel and kernel state belong to that op of that
    function in all its specialisations, as in stock's function."""
    f = _isolated.get(key)
    if f is None:
        with _isolated_lock:
            f = _isolated.get(key)
            if f is None:
                f = _isolated[key] = _single_op_function(op_type, inputs, flat_attrs)
    return list(f(*inputs))


def _raw_op(op_type, flat_attrs):
    """(tf.raw_ops function, its input names, keyword attrs) for an op and its flat attrs; the
    attrs its inputs' types imply are left for the call to infer."""
    import tensorflow as tf
    od = op_def(op_type)
    inferred = set()
    for a in od.input_arg:
        inferred.update(x for x in (a.type_attr, a.number_attr, a.type_list_attr) if x)
    kwargs = {}
    for name, value in zip(flat_attrs[::2], flat_attrs[1::2]):
        if name in inferred:
            continue
        kind = next((a.type for a in od.attr if a.name == name), None)
        kwargs[name] = tf.dtypes.as_dtype(value) if kind == "type" else value
    return getattr(tf.raw_ops, op_type), [a.name for a in od.input_arg], kwargs


def _single_op_function(op_type, inputs, flat_attrs):
    import tensorflow as tf
    raw, names, kwargs = _raw_op(op_type, flat_attrs)
    sig = [tf.TensorSpec([None] * t.shape.rank, t.dtype) for t in inputs]   # any dims

    @tf.function(input_signature=sig, autograph=False)
    def one_op(*ins):
        out = raw(**dict(zip(names, ins)), **kwargs)
        return out if isinstance(out, (list, tuple)) else [out]

    cf = one_op.get_concrete_function()
    ISOLATED_FUNCTIONS.add(cf.function_def.signature.name)   # functions.on_call leaves them to TF
    return cf


def forget_isolated():
    with _isolated_lock:
        _isolated.clear()


_readers = {}
_readers_lock = threading.Lock()


_multi_read = []   # [flag]: whether TensorFlow's `_ReadVariablesOp` is usable (checked once)


def _multi_read_ok():
    """`_ReadVariablesOp` (resource_variable_ops.cc): one kernel that reads N variables, with
    ReadVariableOp's semantics per variable (a shared lock per read, copy-on-read variables
    copied). Private, so used only where its OpDef has the attributes we pass (N, dtypes) on a
    verified version; a missing attribute aborts the process instead of raising."""
    if not _multi_read:
        ok = False
        try:
            _, _, _, _, reg = _tf()
            od = reg.get("_ReadVariablesOp")
            ok = (od is not None and is_verified()
                  and sorted(a.name for a in od.attr) == ["N", "dtypes"]
                  and len(od.input_arg) == 1 and len(od.output_arg) == 1)
        except Exception:   # pragma: no cover - an unexpected TensorFlow build
            ok = False
        _multi_read.append(ok)
    return _multi_read[0]


def read_variables(handles, dtype_enums):
    """Read many resource variables in one trip through TensorFlow, bypassing our hooks: one
    `_ReadVariablesOp` where it is usable (one kernel: 320 reads in about 0.3 ms against 1 ms
    through a function), else a graph function of ReadVariableOps registered once per dtype
    tuple. Any error (an uninitialized or freed variable, a wrong dtype) is raised by the
    function path instead, so it is exactly stock ReadVariableOp's."""
    key = tuple(dtype_enums)
    st = _stock.get("ctx")
    if st is None or st[4]._context is not st[3]:
        _stock_state()   # a new context: register the readers there
    if _multi_read_ok():
        try:
            return execute_stock("_ReadVariablesOp", handles,
                                 ("N", len(key), "dtypes", list(key)), len(key))
        except Exception:
            pass
    name = _readers.get(key)
    if name is None:
        with _readers_lock:
            name = _readers.get(key)
            if name is None:
                name = _readers[key] = _make_reader(key)
    return execute_stock(name, handles, (), len(key))


def _make_reader(dtype_enums):
    import tensorflow as tf
    from tensorflow.python.ops import gen_resource_variable_ops as rv
    dts = [tf.dtypes.as_dtype(d) for d in dtype_enums]

    def read_all(*handles):
        return [rv.read_variable_op(h, d) for h, d in zip(handles, dts)]

    specs = [tf.TensorSpec([], tf.resource)] * len(dts)
    fdef = tf.function(read_all, autograph=False).get_concrete_function(*specs).function_def
    ctx().add_function_def(fdef)
    return fdef.signature.name


# Variable ops a program may hand TensorFlow as one function call (passes/stock_runs.py): their
# inputs are handles and values of known dtypes, their outputs plain tensors or nothing.
GROUP_OPS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
                       "ReadVariableOp", "VariableShape"})
GROUP_NODE_OP = "TensorFlowGroup"   # the op name such a group's node carries (no compute)
GROUP_OUTPUTS = {"ReadVariableOp": 1, "VariableShape": 1}   # outputs per op (others: none)
_group_fdefs = {}     # group description -> FunctionDef (built once per process)
_groups_here = {}     # group description -> function name registered in the current context
_groups_lock = threading.Lock()


def execute_group(group, inputs, num_outputs):
    """Run a group of TensorFlow ops (passes/stock_runs.py's description) as one call of a graph
    function registered in the current context: one trip through TFE_Py_Execute instead of one
    per op. Its ops run one after another in the group's order (each with a control edge on the
    one before), as the separate calls would; an error is the failing op's, raised from the
    call. Where the function cannot be built or registered (an op or attr the tracer refuses),
    the ops run one by one instead, in the same order."""
    st = _stock.get("ctx")
    if st is None or st[4]._context is not st[3]:
        _stock_state()
    name = _groups_here.get(group)
    if name is None:
        name = _register_group(group)
    if not name:
        return execute_group_ops(group, inputs)
    return execute_stock(name, inputs, (), num_outputs)


def _register_group(group):
    """The group's function name in the current context ("" where it cannot be built, once per
    process, or registered)."""
    with _groups_lock:
        name = _groups_here.get(group)
        if name is not None:
            return name
        if group not in _group_fdefs:
            try:
                _group_fdefs[group] = _group_fdef(group)
            except Exception:  # noqa: BLE001 - the ops alone still run
                _group_fdefs[group] = None
        fdef, name = _group_fdefs[group], ""
        if fdef is not None:
            try:
                ctx().add_function_def(fdef)
                name = fdef.signature.name
            except Exception:  # noqa: BLE001
                pass
        _groups_here[group] = name
        return name


def _member_args(refs, inputs, made):
    """A group member's arguments: ("i", k) is the group's input k, ("o", j, m) output m of
    member j."""
    return [inputs[r[1]] if r[0] == "i" else made[r[1], r[2]] for r in refs]


def execute_group_ops(group, inputs):
    """A group's ops as separate eager calls, in order (what the group replaced)."""
    _, members, outputs = group
    made = {}
    for j, (op, refs, flat, _name) in enumerate(members):
        outs = execute_stock(op, _member_args(refs, inputs, made), flat, GROUP_OUTPUTS.get(op, 0))
        for m, o in enumerate(outs or ()):
            made[j, m] = o
    return [made[j, m] for j, m in outputs]


def group_input_type(op, k, flat):
    """The dtype enum (or "resource") input k of `op` takes with attrs `flat`; None when it is
    not one plain tensor of a type the attrs name."""
    od = op_def(op)
    if od is None or k >= len(od.input_arg):
        return None
    a = od.input_arg[k]
    if a.number_attr or a.type_list_attr:
        return None
    if a.type == 20:   # DT_RESOURCE
        return "resource"
    if a.type:
        return a.type
    for name, v in zip(flat[::2], flat[1::2]):
        if name == a.type_attr:
            return v
    return None


def _group_fdef(group):
    """The group's FunctionDef, named `__tfb_group_<digest>` after the group and TensorFlow's
    version: read from the cache directory when an earlier process traced it (tracing one
    takes 5-16 ms, three in a Keras training step's first call), else traced and kept there
    (`<cache dir>/tf_groups/<digest>.pb`)."""
    import hashlib
    import os

    import kernels
    from kernels import cache_prune
    from tensorflow.core.framework import function_pb2
    digest = hashlib.sha256(repr((tf_version(), group)).encode()).hexdigest()[:32]
    fname = "__tfb_group_" + digest

    def load(data):
        fdef = function_pb2.FunctionDef.FromString(data)
        return fdef if fdef.signature.name == fname else None

    def make():
        fdef = _traced_group_fdef(group)
        fdef.signature.name = fname
        return fdef
    return kernels.kept(os.path.join(cache_prune.GROUPS, digest + ".pb"), load, make,
                        lambda fdef: fdef.SerializeToString())


def _traced_group_fdef(group):
    """group: (in_types, members, outputs). in_types: a TF dtype enum per input, or "resource";
    members: (op, refs, flat attrs, name) with refs ("i", k) for input k or ("o", j, m) for
    output m of member j; outputs: (j, m) pairs."""
    import tensorflow as tf
    in_types, members, outputs = group
    sig = [tf.TensorSpec([], tf.resource) if t == "resource"
           else tf.TensorSpec(None, tf.dtypes.as_dtype(t)) for t in in_types]

    def body(*ins):
        made, prev = {}, []
        for j, (op, refs, flat, name) in enumerate(members):
            with tf.control_dependencies(prev):
                out = _raw_call(op, _member_args(refs, ins, made), flat, name)
            if isinstance(out, tf.Operation):
                prev = [out]
            else:
                outs = list(out) if isinstance(out, (list, tuple)) else [out]
                for m, o in enumerate(outs):
                    made[j, m] = o
                prev = [outs[0].op] if outs else []
        return [made[j, m] for j, m in outputs]

    fn = tf.function(body, input_signature=sig, autograph=False)
    return fn.get_concrete_function().function_def


def _raw_call(op, args, flat, name):
    raw, names, kwargs = _raw_op(op, flat)
    return raw(**dict(zip(names, args)), **kwargs,
               name=re.sub(r"[^A-Za-z0-9_.\-/]", "_", name).strip("/") or op)


def const_value(op):
    """numpy value of a Const op (object arrays for strings)."""
    from tensorflow.python.framework import tensor_util
    return tensor_util.MakeNdarray(op.node_def.attr["value"].tensor)


def make_tensor_any(arr):
    """An EagerTensor from any numpy array (non-contiguous, object/string arrays included)."""
    if arr.dtype in DTYPE_TO_ENUM:
        # not np.ascontiguousarray: it turns 0-d arrays into shape (1,)
        return make_tensor(arr if arr.flags.c_contiguous else arr.copy(order="C"))
    import tensorflow as tf
    return tf.constant(arr)


def shape_tuple(t):
    """A tensor's shape as a tuple of ints (EagerTensor fast accessor)."""
    return t._shape_tuple()


def pywrap():
    """TensorFlow's pywrap_tfe module (for tools that wrap the entry points, e.g. tfb ab's
    per-op timer)."""
    from tensorflow.python import pywrap_tfe
    return pywrap_tfe


def current_device():
    """The calling thread's device scope ('' when none)."""
    return ctx()._thread_local_data.device_name or ""
