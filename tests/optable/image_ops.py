"""Op table: ResizeBilinear/ResizeNearestNeighbor (+ grads) and MirrorPad(+Grad)."""
import numpy as np
import tensorflow as tf

from . import OpCase, arr
from .array_ops import ALL, data

R = tf.raw_ops
NUM = ("float32", "float64", "int32", "int64")
I32 = np.int32
MODES = ((False, False), (True, False), (False, True))   # (align_corners, half_pixel_centers)
# (image shape, output size): up, down, 3 channels, same size, 1x1 in or out, mixed
RESIZES = [((2, 3, 4, 2), (5, 7)), ((1, 8, 9, 3), (3, 4)), ((1, 1, 1, 2), (3, 2)),
           ((2, 4, 5, 1), (4, 5)), ((1, 5, 6, 4), (1, 1)), ((3, 6, 2, 3), (2, 9)),
           ((0, 3, 4, 2), (5, 5))]


def _resize_samples(dt, rng, big=((4, 64, 64, 3), (128, 96))):
    out = [(data(rng, s, dt), np.array(size, I32), a, h)
           for s, size in RESIZES for a, h in MODES]
    if dt == np.float32:  # one large image batch: the parallel loop
        out.append((data(rng, big[0], dt), np.array(big[1], I32), False, True))
    # Without values near the subnormal range: the loop that need not flush.
    out += [(np.asarray(arr(rng, s, dt)), np.array(size, I32), a, h)
            for s, size in RESIZES[:3] for a, h in MODES]
    if dt == np.float32:
        out.append((np.asarray(arr(rng, big[0], dt)), np.array(big[1], I32), False, True))
    return out


def _resize_errors(dt):
    x = np.zeros((1, 3, 4, 2), dt)
    s = np.array([5, 5], I32)
    return [(x, s, True, True), (x[0], s, False, False), (np.zeros((1, 3, 4, 0), dt), s, False, False),
            (np.zeros((1, 0, 4, 1), dt), s, False, False), (x, np.array([0, 5], I32), False, False),
            (x, np.array([5, 5, 5], I32), False, False), (x, np.array([[5, 5]], I32), False, False)]


def _bilinear(x, s, a, h):
    return R.ResizeBilinear(images=x, size=s, align_corners=a, half_pixel_centers=h)


def _nearest(x, s, a, h):
    return R.ResizeNearestNeighbor(images=x, size=s, align_corners=a, half_pixel_centers=h)


def _bilinear_grad(g, o, a, h):
    return R.ResizeBilinearGrad(grads=g, original_image=o, align_corners=a, half_pixel_centers=h)


def _nearest_grad(g, s, a, h):
    return R.ResizeNearestNeighborGrad(grads=g, size=s, align_corners=a, half_pixel_centers=h)


def _bilinear_grad_samples(dt, rng):
    g = lambda *s: np.asarray(rng.standard_normal(s), np.float32)  # noqa: E731
    out = [(g(n, *size, c), np.zeros((n, h, w, c), dt), a, hp)
           for (n, h, w, c), size in RESIZES for a, hp in MODES]
    tiny = g(2, 5, 7, 2) * np.float32(1e-37)  # products flush to zero
    return out + [(tiny, np.zeros((2, 3, 4, 2), dt), False, True)]


def _bilinear_grad_len(args):
    g, o = args[0], args[1]
    return 4 * max(1, (g.shape[1] * g.shape[2]) // (o.shape[1] * o.shape[2]) + 1)


def _bilinear_grad_errors(dt):
    g, o = np.zeros((1, 5, 5, 2), np.float32), np.zeros((1, 3, 4, 2), dt)
    return [(g, o, True, True), (g[0], o, False, False), (g, o[0], False, False),
            (np.zeros((1, 0, 5, 2), np.float32), o, False, False),
            (g, np.zeros((1, 3, 0, 2), dt), False, False)]


def _nearest_grad_samples(dt, rng):
    out = [(data(rng, (n,) + tuple(size) + (c,), dt), np.array((h, w), I32), a, hp)
           for (n, h, w, c), size in RESIZES for a, hp in MODES + ((True, True),)]
    out.append((data(rng, (2, 40, 30, 8), dt), np.array((13, 17), I32), False, True))
    out.append((np.asarray(arr(rng, (2, 40, 30, 8), dt)), np.array((13, 17), I32), True, False))
    return out


def _nearest_grad_len(args):
    g, s = args[0], args[1]
    return max(1, (g.shape[1] * g.shape[2]) // int(s[0] * s[1]) + 1)


def _nearest_grad_errors(dt):
    g = np.zeros((1, 5, 5, 2), dt)
    return [(g[0], np.array([3, 3], I32), False, False), (g, np.array([0, 3], I32), False, False),
            (g, np.array([3, 3, 3], I32), False, False), (g, np.array([[3, 3]], I32), False, False)]


def _mp(x, p, mode):
    return R.MirrorPad(input=x, paddings=p, mode=mode)


def _mp_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [
        (d(3, 4), [[1, 1], [2, 2]], "REFLECT"), (d(3, 4), [[3, 3], [4, 4]], "SYMMETRIC"),
        (d(3, 4), [[2, 0], [0, 3]], "REFLECT"), (d(), np.zeros((0, 2), I32), "REFLECT"),
        (d(5,), [[0, 0]], "REFLECT"),
        (d(2, 3, 4), np.array([[1, 2], [2, 1], [0, 3]], np.int64), "SYMMETRIC"),
        (d(1, 5, 5, 3), [[0, 0], [2, 2], [2, 2], [0, 0]], "REFLECT"),
        (d(2, 2, 2, 2, 3), [[1, 1], [1, 0], [0, 1], [1, 1], [2, 2]], "SYMMETRIC"),
        (d(300, 400), [[2, 2], [3, 3]], "REFLECT"),
    ]


def _mp_errors(dt):
    x = np.zeros((2, 3), dt)
    return [(x, [[2, 0], [0, 0]], "REFLECT"), (x, [[0, 0], [4, 0]], "SYMMETRIC"),
            (x, [[-1, 0], [0, 0]], "SYMMETRIC"), (x, [[1, 1]], "SYMMETRIC"),
            (x, [[1, 1, 1], [0, 0, 0]], "SYMMETRIC"), (np.zeros((0, 3), dt), [[0, 0], [1, 1]], "REFLECT"),
            (np.zeros((1,) * 6, dt), np.zeros((6, 2), I32), "SYMMETRIC")]


def _mpg(g, p, mode):
    return R.MirrorPadGrad(input=g, paddings=p, mode=mode)


def _mpg_samples(dt, rng):
    return [(data(rng, tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, np.reshape(p, (-1, 2)))),
                  dt), p, mode) for x, p, mode in _mp_samples(dt, rng)]


def _mpg_errors(dt):
    g = np.zeros((5, 7), dt)
    return [(g, [[2, 2], [0, 0]], "REFLECT"), (g, [[3, 2], [0, 0]], "SYMMETRIC"),
            (g, [[-1, 0], [0, 0]], "REFLECT"), (g, [[1, 1]], "REFLECT"),
            (np.zeros((0, 7), dt), [[0, 0], [3, 1]], "SYMMETRIC"),
            (np.zeros((1,) * 6, dt), np.zeros((6, 2), I32), "SYMMETRIC")]


CASES = [
    OpCase("ResizeBilinear", "ResizeBilinear", _bilinear, _resize_samples, dtypes=NUM,
           grad=True, grad_args=(0,), grad_ops=("ResizeBilinearGrad",), errors=_resize_errors),
    OpCase("ResizeBilinear_image_resize", "ResizeBilinear",
           lambda x, s: tf.image.resize(x, s), lambda dt, rng: [
               (arr(rng, (2, 10, 12, 3), dt), [20, 24]), (arr(rng, (1, 9, 9, 1), dt), [4, 5])],
           dtypes=("float32", "float64"), grad=True, grad_ops=("ResizeBilinearGrad",)),
    OpCase("ResizeBilinearGrad", "ResizeBilinearGrad", _bilinear_grad, _bilinear_grad_samples,
           dtypes=("float32", "float64"), kind="reduction", reduction_len=_bilinear_grad_len,
           errors=_bilinear_grad_errors),
    # Batch and channels come from the gradient, not from original_image (TF's graph shape
    # inference takes them from original_image: no shape check).
    OpCase("ResizeBilinearGrad_nc", "ResizeBilinearGrad", _bilinear_grad, lambda dt, rng: [
               (np.asarray(rng.standard_normal((2, 5, 7, 3)), np.float32),
                np.zeros((3, 4, 6, 1), dt), False, False)],
           dtypes=("float32", "float64"), kind="reduction", reduction_len=lambda a: 8,
           shape_check=False),
    OpCase("ResizeNearestNeighbor", "ResizeNearestNeighbor", _nearest, _resize_samples,
           dtypes=NUM, kind="exact", grad=True, grad_args=(0,),
           grad_ops=("ResizeNearestNeighborGrad",), errors=_resize_errors),
    OpCase("ResizeNearestNeighborGrad", "ResizeNearestNeighborGrad", _nearest_grad,
           _nearest_grad_samples, dtypes=("float32", "float64", "int32"), kind="reduction",
           reduction_len=_nearest_grad_len, errors=_nearest_grad_errors),
    OpCase("MirrorPad", "MirrorPad", _mp, _mp_samples, dtypes=ALL, kind="exact", grad=True,
           grad_args=(0,), grad_ops=("MirrorPadGrad",), errors=_mp_errors),
    # Empty input: forward only (stock's MirrorPadGrad rejects a zero-size dimension).
    OpCase("MirrorPad_empty", "MirrorPad", _mp,
           lambda dt, rng: [(np.zeros((0, 3), dt), [[0, 0], [3, 1]], "SYMMETRIC")], dtypes=ALL,
           kind="exact"),
    OpCase("MirrorPadGrad", "MirrorPadGrad", _mpg, _mpg_samples, dtypes=NUM, kind="reduction",
           reduction_len=lambda a: 8, grad=True, grad_args=(0,), grad_ops=("MirrorPad",),
           errors=_mpg_errors),
]
