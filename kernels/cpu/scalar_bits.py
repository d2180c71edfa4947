"""Scalar helpers for the integer bit ops of the elementwise table (numba, CPU).

TensorFlow clamps shift amounts to [0, bits - 1] (measured: 1 << 8 in int8 is -128, -8 >> 100
is -1, a negative amount shifts by 0) and shifts signed values left as unsigned (wrapping).
"""
import numpy as np
from numba import types
from numba.extending import overload


def lshift(x, y):
    raise NotImplementedError("numba only")


def rshift(x, y):
    raise NotImplementedError("numba only")


def _casts(x):
    bits = x.bitwidth
    return bits, getattr(np, f"uint{bits}"), getattr(np, x.name)


@overload(lshift)
def _lshift(x, y):
    if isinstance(x, types.Integer):
        bits, u, t = _casts(x)
        top = bits - 1

        def f(x, y):
            s = u(top) if y > top else u(y)
            if y < 0:
                s = u(0)
            return t(u(x) << s)
        return f


@overload(rshift)
def _rshift(x, y):
    if isinstance(x, types.Integer):
        bits, u, t = _casts(x)
        top = bits - 1

        def f(x, y):
            s = t(top) if y > top else t(y)
            if y < 0:
                s = t(0)
            return t(x >> s)
        return f
