"""Shape function: Einsum (one or two inputs, letters and one optional "..." per term).

`parse` and `ellipsis_shape` are shared with the CPU kernel. Equations TensorFlow reads in
surprising ways (spaces or digits taken as labels, output labels missing from the inputs or
repeated) are left to TensorFlow.
"""
import functools
import string

from . import host
from .errors import InvalidArgumentError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape

ELL = "..."
_OK = set(string.ascii_letters)


@functools.lru_cache(maxsize=512)
def parse(equation, n):
    """(input terms, output term); a term is a tuple of labels, "..." standing for the
    broadcast dimensions."""
    if equation.count("->") != 1:
        raise InvalidArgumentError(f"Expecting exactly one '->' in einsum equation: {equation}")
    lhs, rhs = equation.split("->")
    terms = lhs.split(",")
    if len(terms) not in (1, 2) or len(terms) != n:
        raise InvalidArgumentError(
            f"Einsum: expecting {n} input subscripts in equation '{equation}' but got {len(terms)}")

    def term(s):
        if s.count(ELL) > 1:
            raise Unsupported("attr:equation")
        parts = s.split(ELL)
        if any(c not in _OK for p in parts for c in p):
            raise Unsupported("attr:equation")
        return tuple(parts[0]) + ((ELL,) + tuple(parts[1]) if len(parts) == 2 else ())

    ins = tuple(term(t) for t in terms)
    out = term(rhs)
    seen = {c for t in ins for c in t}
    if len(set(out)) != len(out) or any(c not in seen for c in out if c != ELL):
        raise Unsupported("attr:equation")
    return ins, out


def _broadcast(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1 or x is None and y != 1:
            out.append(y)
        elif y == 1 or y is None or x == y:
            out.append(x)
        else:
            return None
    return tuple(out)


def label_dims(ins, shapes):
    """{label: dim} and the ellipsis part of each input shape; checks ranks and sizes."""
    dims, ells = {}, []
    for i, (t, s) in enumerate(zip(ins, shapes)):
        named = len(t) - (ELL in t)
        if (ELL in t and len(s) < named) or (ELL not in t and len(s) != named):
            raise InvalidArgumentError(
                f"Expected input {i} to have rank {named} but got: {len(s)} (Einsum)")
        k = t.index(ELL) if ELL in t else len(t)
        e = len(s) - named
        ells.append(tuple(s[k:k + e]))
        for j, c in enumerate(t):
            if c == ELL:
                continue
            axis = j if j < k else j - 1 + e
            d = s[axis]
            old = dims.get(c)
            if old is not None and d is not None and old != d:
                raise InvalidArgumentError(
                    f"Expected dimension {old} at axis {axis} of the input shaped "
                    f"{fmt_shape(s)} but got dimension {d} (Einsum: label {c!r} of input {i})")
            if old is None:
                dims[c] = d
    return dims, ells


def ellipsis_shape(ells, shapes, out, dtype=None):
    bshape = ells[0] if len(ells) == 1 else _broadcast(*ells)
    if bshape is None:
        if dtype is not None and len(shapes) == 2 and host.onednn_runs(dtype):
            # stock's oneDNN Einsum (_MklEinsum) words it as its batch product
            raise InvalidArgumentError(
                "In[0] and In[1] must have compatible batch dimensions: "
                f"{fmt_shape(shapes[0])} vs. {fmt_shape(shapes[1])} (Einsum)")
        raise InvalidArgumentError(
            "Invalid broadcasting dimensions: " + " vs. ".join(fmt_shape(s) for s in shapes)
            + " (Einsum)")
    if bshape and ELL not in out:
        raise InvalidArgumentError(
            f"Output contains {len(bshape)} broadcasting dimension(s) but no ellipsis "
            "(...) was found in the output subscripts. (Einsum)")
    return bshape


@shape_fn("Einsum", value_free=True)
def einsum(inputs, attrs):
    dt = inputs[0].dtype
    ins, out = parse(attrs["equation"], len(inputs))
    shapes = [s.shape for s in inputs]
    if any(s is None for s in shapes):
        if ELL in out:
            return [Spec(None, dt)]
        return [Spec((None,) * len(out), dt)]
    dims, ells = label_dims(ins, shapes)
    bshape = ellipsis_shape(ells, shapes, out, dt)
    res = []
    for c in out:
        res.extend(bshape if c == ELL else (dims[c],))
    return [Spec(res, dt)]
