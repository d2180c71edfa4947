"""CPU kernels: joining and splitting (ConcatV2, ConcatOffset, Pack, Unpack, Split, SplitV)."""
import numpy as np

from kernels import kernel, view
from shape_fns.errors import InvalidArgumentError

_copyto = np.copyto


@kernel("ConcatV2")
def concat_v2(inputs, outputs, attrs):
    np.concatenate(inputs[:-1], axis=int(inputs[-1].item()), out=outputs[0])


@kernel("ConcatOffset", type_attr=None)
def concat_offset(inputs, outputs, attrs):
    dim = int(inputs[0])
    shapes = [s.tolist() for s in inputs[1:]]
    r = len(shapes[0])
    if not -r <= dim < r:
        raise InvalidArgumentError(f"Concat dim is out of range: {dim} vs. {r} (ConcatOffset)")
    if dim < 0:
        dim += r
    offset = 0
    for k, (s, out) in enumerate(zip(shapes, outputs)):
        if len(s) != r:
            raise InvalidArgumentError(
                f"input {k} should contain {r} elements, but got {len(s)} (ConcatOffset)")
        for i in range(r):
            if i != dim and s[i] != shapes[0][i]:
                raise InvalidArgumentError(
                    f"All dimensions except {dim} must match. Input {k} has shape "
                    f"[{' '.join(map(str, s))}] and doesn't match input 0 with shape "
                    f"[{' '.join(map(str, shapes[0]))}]. (ConcatOffset)")
        out.fill(0)
        out[dim] = offset
        offset += s[dim]


@kernel("Pack")
def pack(inputs, outputs, attrs):
    out = outputs[0]
    axis = attrs.get("axis", 0)
    if len(inputs) > 8:
        np.stack(inputs, axis=axis, out=out)
        return
    pre = (slice(None),) * (axis + out.ndim if axis < 0 else axis)
    for i, x in enumerate(inputs):  # cheaper than np.stack for a few inputs
        out[pre + (i,)] = x


@kernel("Unpack")
def unpack(inputs, outputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 0)
    pre = (slice(None),) * (axis + x.ndim if axis < 0 else axis)
    for i, out in enumerate(outputs):
        _copyto(out, x[pre + (i,)])


@kernel("Split")
def split(inputs, outputs, attrs):
    x = inputs[1]
    axis = int(inputs[0])
    axis = axis + x.ndim if axis < 0 else axis
    n = outputs[0].shape[axis]
    _split(x, axis, [n] * len(outputs), outputs)


@kernel("SplitV")
def split_v(inputs, outputs, attrs):
    x = inputs[0]
    axis = int(inputs[2].reshape(-1)[0])
    axis = axis + x.ndim if axis < 0 else axis
    _split(x, axis, [o.shape[axis] for o in outputs], outputs)


def _split(x, axis, sizes, outputs):
    pre = (slice(None),) * axis
    start = 0
    for n, out in zip(sizes, outputs):
        _copyto(out, x[pre + (slice(start, start + n),)])
        start += n


@view("Split", data=1)
def split_view(inputs, out_specs, attrs):
    return _split_views(inputs[1], int(inputs[0]), out_specs)


@view("SplitV", data=0)
def split_v_view(inputs, out_specs, attrs):
    return _split_views(inputs[0], int(inputs[2].reshape(-1)[0]), out_specs)


def _split_views(x, axis, out_specs):
    """The pieces as views of x where each is one contiguous run of it (x C-contiguous, every
    dimension before `axis` 1): TensorFlow's SplitOp shares the input's buffer on the same
    condition (split along the first dimension). None otherwise: the kernel copies."""
    axis = axis + x.ndim if axis < 0 else axis
    if not (0 <= axis < x.ndim and x.flags.c_contiguous and all(d == 1 for d in x.shape[:axis])):
        return None
    pre = (slice(None),) * axis
    outs, start = [], 0
    for sp in out_specs:
        n = sp.shape[axis]
        outs.append(x[pre + (slice(start, start + n),)])
        start += n
    return outs if start == x.shape[axis] else None
