"""What `tfb ab` runs: a bundled model, a .keras file, a SavedModel directory or a user callable.

Every target is reduced to `fn(*inputs) -> outputs` (a tensor or nested structure of tensors)
and a list of input tensors; the arms wrap `fn` as is (eager) or in tf.function (graph, XLA).

Callable contract (`--callable module:function`, module a dotted name or a path to a .py file):
the function takes no arguments and returns `(fn, inputs)`, where `inputs` is a tuple/list of
tensors or numpy arrays and `fn(*inputs)` returns the outputs. `fn` should be traceable by
tf.function (else the graph arms report the error and the eager arms still run); it is called
many times, so it should not depend on call count (no stateful updates) if outputs are compared.
"""
import importlib
import importlib.util
import os
import sys


class Target:
    """fn(*inputs) -> outputs, with a description for the report."""

    def __init__(self, kind, name, fn, inputs, notes=()):
        self.kind, self.name, self.fn, self.inputs = kind, name, fn, list(inputs)
        self.notes = list(notes)

    def describe(self):
        return {"kind": self.kind, "name": self.name,
                "inputs": [{"shape": list(x.shape), "dtype": x.dtype.name} for x in self.inputs],
                "notes": self.notes}


def parse_shape(text):
    """"1,224,224,3" -> (1, 224, 224, 3)."""
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise ValueError(f"--input-shape {text!r}: expected comma-separated integers") from None
    if not dims or min(dims) < 0:
        raise ValueError(f"--input-shape {text!r}: expected non-negative integers")
    return dims


def _random_inputs(tf, specs, seed):
    """Tensors for [(shape, dtype)]: standard normal floats, small non-negative integers."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            a = rng.standard_normal(shape).astype(dt)
        elif dt.kind in "iu":
            a = rng.integers(0, 10, size=shape).astype(dt)
        elif dt.kind == "b":
            a = rng.random(shape) < 0.5
        else:
            raise ValueError(f"cannot make random inputs of dtype {dt}")
        out.append(tf.constant(a))
    return out


def _fill_shapes(declared, overrides, batch, where):
    """Concrete input shapes: --input-shape overrides, else declared shapes with batch filled in."""
    if overrides:
        if len(overrides) != len(declared):
            raise ValueError(f"{where} has {len(declared)} input(s); got {len(overrides)} "
                             f"--input-shape value(s)")
        return [tuple(s) for s in overrides]
    shapes = []
    for shape in declared:
        if shape is None:
            raise ValueError(f"{where}: an input has unknown rank; pass --input-shape")
        dims = list(shape)
        if dims and dims[0] is None:
            dims[0] = batch
        if any(d is None for d in dims):
            raise ValueError(f"{where}: input shape {tuple(shape)} has unknown dimensions; "
                             f"pass --input-shape, e.g. --input-shape 1,224,224,3")
        shapes.append(tuple(dims))
    return shapes


def _keras_target(tf, model, kind, name, batch, input_shapes, seed, notes=()):
    declared = [tuple(t.shape) for t in model.inputs]
    dtypes = [getattr(t.dtype, "name", t.dtype) for t in model.inputs]
    shapes = _fill_shapes(declared, input_shapes, batch, f"model {name}")
    inputs = _random_inputs(tf, list(zip(shapes, dtypes)), seed)
    single = len(inputs) == 1

    def fn(*xs):
        return model(xs[0] if single else list(xs), training=False)

    return Target(kind, name, fn, inputs, notes)


def bundled(tf, keras, name, batch=1, input_shapes=None, seed=0):
    from .. import zoo
    return _keras_target(tf, zoo.build(name, keras, seed=seed), "model", name, batch,
                         input_shapes, seed)


def keras_file(tf, keras, path, batch=1, input_shapes=None, seed=0):
    model = keras.saving.load_model(path, compile=False)
    return _keras_target(tf, model, "keras_file", path, batch, input_shapes, seed)


def saved_model(tf, path, batch=1, input_shapes=None, seed=0, signature=None):
    loaded = tf.saved_model.load(path)
    sigs = dict(loaded.signatures)
    if not sigs:
        raise ValueError(f"SavedModel {path} has no signatures to call")
    key = signature or ("serving_default" if "serving_default" in sigs else sorted(sigs)[0])
    if key not in sigs:
        raise ValueError(f"SavedModel {path}: no signature {key!r} (has {', '.join(sigs)})")
    sig = sigs[key]
    _, kw = sig.structured_input_signature
    names = sorted(kw)
    declared = [None if kw[n].shape.rank is None else tuple(kw[n].shape) for n in names]
    shapes = _fill_shapes(declared, input_shapes, batch, f"SavedModel signature {key!r}")
    inputs = _random_inputs(tf, [(s, kw[n].dtype.as_numpy_dtype) for s, n in
                                 zip(shapes, names)], seed)

    def fn(*xs):
        out = sig(**dict(zip(names, xs)))
        return [out[k] for k in sorted(out)]

    note = (f"signature {key!r} is a restored graph function: the eager arms call it as a "
            f"function too (no eager ops; see the ledger's functions for what ran on ours)")
    t = Target("saved_model", path, fn, inputs, [note])
    t._keep = loaded  # the signature needs the loaded object alive
    return t


def _import_module(spec):
    if spec.endswith(".py") or os.sep in spec:
        path = os.path.abspath(spec)
        name = "_tfb_user_" + os.path.splitext(os.path.basename(path))[0]
        mspec = importlib.util.spec_from_file_location(name, path)
        if mspec is None:
            raise ValueError(f"cannot import {spec}")
        mod = importlib.util.module_from_spec(mspec)
        sys.modules[name] = mod
        mspec.loader.exec_module(mod)
        return mod
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(spec)


def user_callable(tf, spec):
    modname, sep, attr = spec.rpartition(":")
    if not sep or not modname or not attr:
        raise ValueError(f"--callable {spec!r}: expected module:function or path/file.py:function")
    factory = getattr(_import_module(modname), attr)
    got = factory()
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and callable(got[0])):
        raise TypeError(f"{spec}() must return (fn, inputs); got {type(got).__name__}")
    fn, inputs = got
    inputs = [x if isinstance(x, tf.Tensor) else tf.constant(x) for x in inputs]
    return Target("callable", spec, fn, inputs)


def resolve(tf, keras, args):
    """The Target for parsed `tfb ab` arguments (exactly one of model / callable / path)."""
    shapes = [parse_shape(s) for s in (args.input_shape or [])]
    if args.model:
        return bundled(tf, keras, args.model, args.batch, shapes, args.seed)
    if args.callable:
        return user_callable(tf, args.callable)
    path = args.path
    if os.path.isdir(path):
        return saved_model(tf, path, args.batch, shapes, args.seed, args.signature)
    if path.endswith((".keras", ".h5")) and os.path.isfile(path):
        return keras_file(tf, keras, path, args.batch, shapes, args.seed)
    raise ValueError(f"{path}: not a .keras/.h5 file or a SavedModel directory")
