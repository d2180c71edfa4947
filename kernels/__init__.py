"""Per-device kernels in one registry keyed by TensorFlow op type; no TensorFlow here.

A kernel is `fn(inputs, outputs, attrs)`: `inputs` are read-only numpy arrays (flat, as the
op receives them), `outputs` are preallocated arrays it must fill, `attrs` a dict with dtype
attrs as numpy dtypes. It never writes its inputs. It may raise `shape_fns.Unsupported`
(before writing) to send the op back to TensorFlow, or a `shape_fns.errors` class for bad input.
"""
import importlib
import os

import numpy as np

try:  # numpy learns the name "bfloat16" from ml_dtypes (a TensorFlow dependency)
    import ml_dtypes  # noqa: F401
except ImportError:  # pragma: no cover - without it no array can be bfloat16 anyway
    pass

KERNELS = {}          # (op_type, device) -> [KernelDef]
DEVICE_MODULES = {"cuda": (
    "elementwise", "matmul_ops", "conv_ops", "pooling_ops", "reduction_ops", "nn_ops",
    "array_ops",
), "cpu": (
    "elementwise", "math_ops", "reduction_ops", "matmul_ops", "array_ops", "array_concat_ops",
    "array_index_ops", "strided_slice", "nn_ops", "conv_ops", "pooling_ops",
    "gather_scatter_ops", "scan_ops", "misc_math_ops", "image_ops", "einsum_ops", "norm_ops",
    "depthwise_ops", "loss_ops", "conv3d_ops", "random_ops",
    "half_ops",   # last: wraps float32 kernels registered by the modules above
)}
_loaded = set()


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the checkout / site dir


def lowest_priority():
    """preexec_fn of background children: nice 19 (they take only the cores' idle time)."""
    try:
        os.nice(19)
    except OSError:
        pass


def detached_child(module, *args):
    """Start `python -m module args` at the lowest priority in a session of its own, with no
    standard streams: work that may outlive this process (a cache's upkeep, compiles handed
    off at exit)."""
    import subprocess
    import sys
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            preexec_fn=lowest_priority, start_new_session=True, cwd=ROOT)


def cache_dir():
    """Where generated kernels (and autotune's choices) are kept: TF_BACKEND_CACHE_DIR, else
    ~/.cache/tf_backend. Not created here."""
    return os.environ.get("TF_BACKEND_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tf_backend")


def read_cache_json(name):
    """The JSON value kept as `name` in cache_dir(), or {} when missing or unreadable."""
    import json
    try:
        with open(os.path.join(cache_dir(), name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def host_choices(name, host):
    """The measured choices kept in `name` (cache_dir()) for `host` (a CPU key), as a fresh
    dict; empty when there are none or under TF_BACKEND_AUTOTUNE=measure (measure again)."""
    if os.environ.get("TF_BACKEND_AUTOTUNE", "").strip().lower() == "measure":
        return {}
    whole = read_cache_json(name)
    got = whole.get(host, {}) if isinstance(whole, dict) else {}
    return got if isinstance(got, dict) else {}


def record_choice(name, host, key, choice):
    """Add one measured choice to `name` under `host`, re-reading the file first (another
    process may have added some); a read-only cache directory keeps it for this process only."""
    whole = read_cache_json(name)
    if not isinstance(whole, dict):
        whole = {}
    whole.setdefault(host, {})[key] = choice
    try:
        write_cache_json(name, whole)
    except OSError:
        pass


class CacheTable:
    """A JSON object kept as `name` in cache_dir(), read on first use (`value()`), written
    whole by `save()`, read again after `forget()` (autotune's and function choices)."""

    def __init__(self, name):
        self.name, self._value = name, None

    def value(self):
        if self._value is None:
            self._value = read_cache_json(self.name)
        return self._value

    def save(self):
        write_cache_json(self.name, self.value())

    def forget(self):
        self._value = None


def write_cache_json(name, value):
    """Replace `name` in cache_dir() with `value` at once; OSError propagates."""
    import json
    write_cache_file(name, json.dumps(value, indent=0, sort_keys=True).encode())


def kept(name, load, make, dump):
    """A value kept as the file `name` under cache_dir(): load(bytes) of the file (a use marked
    for cache_prune) unless it is missing, unreadable or load returns None; else make(), kept
    as dump(value) for the next process (a read-only cache directory keeps nothing)."""
    from . import cache_prune
    path = os.path.join(cache_dir(), name)
    try:
        with open(path, "rb") as f:
            value = load(f.read())
        if value is not None:
            cache_prune.mark_used(path)
            return value
    except Exception:  # noqa: BLE001 - whatever the file holds, making the value again is right
        pass
    value = make()
    try:
        write_cache_file(name, dump(value))
    except OSError:
        pass
    return value


def write_cache_file(name, data):
    """Replace `name` (a path under cache_dir()) with the bytes `data` at once, through a
    temporary file of this process and thread, so concurrent writers never leave half a file;
    OSError propagates."""
    import threading
    path = os.path.join(cache_dir(), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# Inputs an op reads on the host (TensorFlow's HostMemory declarations): shapes, axes,
# paddings, sizes. On a device whose memory the host cannot touch, the runtime hands a kernel
# these inputs as host numpy arrays (constants kept on the host at load, anything else copied
# out once) and every other input as a device buffer; shape fns see values only of these.
# Negative indices count from the end (ConcatV2's axis follows its N values).
HOST_INPUTS = {
    "Reshape": (1,), "Transpose": (1,), "ConjugateTranspose": (1,), "ExpandDims": (1,),
    "ConcatV2": (-1,), "Concat": (0,), "Pad": (1,), "PadV2": (1,), "MirrorPad": (1,),
    "Sum": (1,), "Mean": (1,), "Max": (1,), "Min": (1,), "Prod": (1,), "All": (1,),
    "Any": (1,), "ArgMax": (1,), "ArgMin": (1,), "EuclideanNorm": (1,),
    "Tile": (1,), "Slice": (1, 2), "StridedSlice": (1, 2, 3), "StridedSliceGrad": (0, 1, 2, 3),
    "Fill": (0,), "Range": (0, 1, 2), "GatherV2": (2,), "OneHot": (1,), "Cumsum": (1,),
    "Cumprod": (1,), "Split": (0,), "SplitV": (1, 2), "BroadcastTo": (1,),
    "ResizeBilinear": (1,), "ResizeNearestNeighbor": (1,), "ReverseV2": (1,), "Roll": (1, 2),
    "TopKV2": (1,), "ScatterNd": (2,), "MatrixBandPart": (1, 2), "UnsortedSegmentSum": (2,),
    "Conv2DBackpropInput": (0,), "Conv2DBackpropFilter": (1,),
    "Conv3DBackpropInputV2": (0,), "Conv3DBackpropFilterV2": (1,),
    "SpaceToBatchND": (1, 2), "BatchToSpaceND": (1, 2), "InTopKV2": (2,),
    "DepthwiseConv2dNativeBackpropInput": (0,), "DepthwiseConv2dNativeBackpropFilter": (1,),
    "BroadcastGradientArgs": (0, 1), "StatelessRandomUniformV2": (0, 3),
    "StatelessRandomGetKeyCounter": (0,),
}


def host_inputs(op, n_inputs):
    """The input positions `op` reads on the host, for a node with n_inputs inputs."""
    return tuple(sorted({i % n_inputs for i in HOST_INPUTS.get(op, ()) if -n_inputs <= i < n_inputs}))


class KernelDef:
    __slots__ = ("op", "device", "fn", "dtypes", "type_attr", "name")

    def __init__(self, op, device, fn, dtypes, type_attr):
        self.op, self.device, self.fn = op, device, fn
        self.dtypes = None if dtypes is None else frozenset(_known(dtypes))
        self.type_attr = type_attr
        self.name = f"{device}:{getattr(fn, '__qualname__', op)}"

    def accepts(self, attrs):
        """None when this kernel takes these attrs, else the ledger reason."""
        if self.dtypes is None or self.type_attr is None:
            return None
        names = (self.type_attr,) if isinstance(self.type_attr, str) else self.type_attr
        for n in names:
            d = attrs.get(n)
            if d is not None and d not in self.dtypes:
                return f"dtype:{np.dtype(d).name}"
        return None


def _known(dtypes):
    """numpy dtypes of the names numpy knows here (bfloat16 only with ml_dtypes)."""
    for d in dtypes:
        try:
            yield np.dtype(d)
        except TypeError:
            pass


def kernel(*op_types, device="cpu", dtypes=None, type_attr="T"):
    """Register `fn(inputs, outputs, attrs)` for op types on a device.

    dtypes: the dtypes accepted for attr `type_attr` (a name or a tuple of names), None = any.
    """

    def register(fn):
        for op in op_types:
            KERNELS.setdefault((op, device), []).append(
                KernelDef(op, device, fn, dtypes, type_attr))
        return fn

    return register


SPECIALIZERS = {}   # (op_type, device) -> fn(attrs, in_specs, out_specs, kernel) -> kernel or None


def specializer(*op_types, device="cpu"):
    """Register `fn(attrs, in_specs, out_specs, kernel)` for op types on a device: given a
    program node's attrs and static specs (shape_fns.Spec, all shapes fully defined), it returns
    a kernel `(inputs, outputs, attrs)` made for them, that checks what it assumes and hands
    anything else to `kernel` (the registered one), or None. Generated drivers bind it in the
    registered kernel's place: a tiny product then skips the checks every call repeats."""

    def register(fn):
        for op in op_types:
            SPECIALIZERS[(op, device)] = fn
        return fn

    return register


def specialized(kdef, attrs, in_specs, out_specs):
    """The kernel a specializer made for these static specs, or kdef.fn."""
    sp = SPECIALIZERS.get((kdef.op, kdef.device))
    if (sp is None or out_specs is None or any(s is None or not s.fully_defined
                                               for s in list(in_specs) + list(out_specs))):
        return kdef.fn
    return sp(attrs, in_specs, out_specs, kdef.fn) or kdef.fn


VIEWS = {}   # (op_type, device) -> View: the op's outputs may be views of an input's data


class View:
    """An op trait: a runtime with zero-copy views may run `fn(inputs, out_specs, attrs)`
    instead of the kernel; it returns the outputs as views of inputs[data] (never written
    through them by the op itself), or None where these inputs need the kernel's copy."""
    __slots__ = ("op", "fn", "data")

    def __init__(self, op, fn, data):
        self.op, self.fn, self.data = op, fn, data


_view_ops = {}   # device -> the live set of ops with a View (filled as modules register)


def view(*op_types, device="cpu", data=0):
    """Register `fn(inputs, out_specs, attrs)` as the view form of op types (see View)."""

    def register(fn):
        for op in op_types:
            VIEWS[(op, device)] = View(op, fn, data)
            view_ops(device).add(op)
        return fn

    return register


def view_ops(device="cpu"):
    """The ops with a view form on `device`: one set, kept up to date as kernel modules load
    (runtimes hold it from import time)."""
    return _view_ops.setdefault(device, set())


# the folder of a device's kernels, where it is not named as the device
DEVICE_FOLDERS = {"cuda": "gpu"}


def load(device="cpu"):
    """Import a device's kernel modules once; returns the registry."""
    if device not in _loaded:
        folder = DEVICE_FOLDERS.get(device, device)
        for m in DEVICE_MODULES.get(device, ()):
            importlib.import_module(f"{__name__}.{folder}.{m}")
        _loaded.add(device)
    return KERNELS


def ops(device="cpu"):
    return sorted(op for (op, dev) in KERNELS if dev == device)


def lookup(op, device, attrs):
    """(KernelDef, None) or (None, reason)."""
    defs = KERNELS.get((op, device))
    if not defs:
        return None, "not_registered"
    reason = None
    for k in defs:
        reason = k.accepts(attrs)
        if reason is None:
            return k, None
    return None, reason
