"""Data movement on the GPU: Pad, ConcatV2, Transpose, Reshape-as-copy, Identity, Cast."""
import cupy
import numpy as np

import kernels

from . import DEVICE

ALL = ("float16", "float32", "float64", "int32", "int64", "bool")


@kernels.kernel("Pad", "PadV2", device=DEVICE, dtypes=ALL)
def pad(inputs, outputs, attrs):
    x, p, out = inputs[0], np.asarray(inputs[1]), outputs[0]
    value = inputs[2] if len(inputs) > 2 else 0
    out.fill(value if np.isscalar(value) else value.reshape(()))
    out[tuple(slice(int(lo), int(lo) + n) for (lo, _), n in zip(p, x.shape))] = x


@kernels.kernel("ConcatV2", device=DEVICE, dtypes=ALL)
def concat(inputs, outputs, attrs):
    *xs, axis = inputs
    out = outputs[0]
    ax = int(np.asarray(axis)) % out.ndim
    at = 0
    for x in xs:
        n = x.shape[ax]
        out[(slice(None),) * ax + (slice(at, at + n),)] = x
        at += n


@kernels.kernel("Transpose", device=DEVICE, dtypes=ALL)
def transpose(inputs, outputs, attrs):
    outputs[0][...] = inputs[0].transpose([int(a) for a in np.asarray(inputs[1])])


@kernels.kernel("Reshape", "Squeeze", "ExpandDims", "Identity", "Snapshot", device=DEVICE,
                dtypes=ALL)
def copy(inputs, outputs, attrs):
    outputs[0][...] = inputs[0].reshape(outputs[0].shape)


@kernels.kernel("Cast", device=DEVICE, dtypes=("float16", "float32", "float64"),
                type_attr=("SrcT", "DstT"))
def cast(inputs, outputs, attrs):
    outputs[0][...] = inputs[0].astype(outputs[0].dtype)
