"""The contiguous-run im2col (kernels/cpu/conv_ops.py, dw == 1) against the per-tap one, without
TensorFlow (the op table checks the convolutions against stock): the same patch matrix for
strides, row dilation, padding on every side, partial windows at the borders, several images
and a chunk that starts past the first image row. The input gradient in blocks of whole images
against the chunked path and an exact sum."""
import numpy as np
import pytest

from kernels.cpu import conv_ops, gemm

# (x shape, KH, KW, sh, sw, dh, pt, pl, pb, pr)
CASES = [((1, 230, 230, 3), 7, 7, 2, 2, 1, 0, 0, 0, 0),     # ResNet stem after its pad
         ((1, 224, 224, 3), 7, 7, 2, 2, 1, 3, 3, 3, 3),     # the same padded inside the conv
         ((2, 9, 11, 5), 3, 3, 1, 1, 1, 1, 1, 1, 1),
         ((3, 10, 7, 4), 3, 2, 2, 1, 2, 2, 0, 1, 3),         # row dilation, uneven padding
         ((1, 6, 6, 1), 5, 5, 1, 1, 1, 4, 4, 4, 4),          # windows wider than the input
         ((2, 8, 8, 16), 1, 4, 3, 2, 1, 0, 2, 0, 1)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("parallel", [False, True])
def test_runs_match_per_tap_im2col(case, parallel):
    xs, KH, KW, sh, sw, dh, pt, pl, pb, pr = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    keep = x.copy()
    N, H, W, C = xs
    OH = (H + pt + pb - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) - 1) // sw + 1
    runs = conv_ops._runs_p if parallel else conv_ops._runs_s
    for q0, q1 in ((0, N * OH), (1, N * OH - 1)):       # whole, and a chunk of rows
        ref = np.empty(((q1 - q0) * OW, KH * KW, C), np.float32)
        got = np.full_like(ref, np.nan)
        args = (q0, q1, OH, OW, KH, KW, sh, sw, dh, 1, pt, pl)
        conv_ops._im2col_s(x, ref, *args)
        runs(x, got, *args)
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(x, keep)


def test_forward_conv_in_chunks_matches_one_chunk(monkeypatch):
    """conv_nhwc builds and multiplies the patches COLS_CHUNK_BYTES at a time: chunks of one
    image row, of an uneven number of rows, and the whole at once give the same result."""
    from shape_fns.conv_ops import conv_geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 23, 19, 3)).astype(np.float32)
    f = rng.standard_normal((7, 7, 3, 8)).astype(np.float32)
    attrs = {"strides": [1, 2, 2, 1], "padding": "SAME", "dilations": [1, 1, 1, 1],
             "data_format": "NHWC", "explicit_paddings": []}
    g = conv_geometry(x.shape, f.shape, attrs, "Conv2D", np.float32)[0]
    # one product kernel for every chunk shape (the measured choice may pick another per shape)
    monkeypatch.setattr(gemm, "CHOOSE", False)
    outs = []
    for chunk in (1 << 30, 10 * 147 * 4 * 3, 1):
        monkeypatch.setattr(conv_ops, "COLS_CHUNK_BYTES", chunk)
        out = np.full((2, g.oh, g.ow, 8), np.nan, np.float32)
        conv_ops.conv_nhwc(x, f, out, g)
        outs.append(out)
    exact = np.zeros(outs[0].shape, np.float64)
    xp = np.pad(x.astype(np.float64), ((0, 0), (g.pt, g.pb), (g.pl, g.pr), (0, 0)))
    for i in range(g.oh):
        for j in range(g.ow):
            patch = xp[:, 2 * i:2 * i + 7, 2 * j:2 * j + 7, :]
            exact[:, i, j] = np.tensordot(patch, f.astype(np.float64), axes=3)
    for out in outs:
        np.testing.assert_allclose(out, exact, rtol=1e-5, atol=1e-4)
        # OpenBLAS's AVX2 build takes a small-matrix kernel for short chunks (other roundings)
        np.testing.assert_allclose(out, outs[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geom", [((9, 13, 13, 32), (3, 3, 32, 64), 1, 0, 1),     # VALID
                                  ((12, 10, 10, 32), (3, 3, 32, 64), 1, 1, 1),    # 2 images a block (float32)
                                  ((16, 16, 15, 16), (3, 3, 16, 24), 2, 1, 1),    # stride 2
                                  ((6, 14, 14, 16), (3, 3, 16, 8), 1, 2, 2)])     # row dilation
def test_backprop_input_blocks(geom, dtype):
    """Conv2DBackpropInput in blocks of whole images (one BLAS product and col2im per block in
    its thread's buffer) against the chunked path and an exact float64 col2im; the blocks
    depend on the shape only, so one and two threads give the same bits."""
    import numba
    import types as pytypes
    xs, fs, s, pad, dh = geom
    rng = np.random.default_rng(2)
    f = rng.standard_normal(fs).astype(dtype)
    N, H, W, C = xs
    KH, KW = fs[:2]
    OH = (H + 2 * pad - dh * (KH - 1) - 1) // s + 1
    OW = (W + 2 * pad - (KW - 1) - 1) // s + 1
    dy = rng.standard_normal((N, OH, OW, fs[3])).astype(dtype)
    g = pytypes.SimpleNamespace(kh=KH, kw=KW, sh=s, sw=s, dh=dh, dw=1, pt=pad, pl=pad, pb=pad,
                                pr=pad, oh=OH, ow=OW)
    keep = (f.copy(), dy.copy())
    before = numba.get_num_threads()
    outs = []
    try:
        for threads in (1, before):
            numba.set_num_threads(threads)
            dx = np.full(xs, np.nan, dtype)
            assert conv_ops._backprop_input_by_blocks(f, dy, dx, g)
            outs.append(dx)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(outs[0], outs[1])
    exact = np.zeros((N, H + 2 * pad, W + 2 * pad, C))
    for kh in range(KH):
        for kw in range(KW):
            part = dy.astype(np.float64) @ f[kh, kw].astype(np.float64).T
            exact[:, kh * dh:kh * dh + s * (OH - 1) + 1:s, kw:kw + s * (OW - 1) + 1:s] += part
    exact = exact[:, pad:pad + H, pad:pad + W]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(outs[0], exact, rtol=tol, atol=tol * np.abs(exact).max())
    old = conv_ops.BLOCKS_ENABLED
    conv_ops.BLOCKS_ENABLED = False
    try:
        chunked = np.full(xs, np.nan, dtype)
        conv_ops.backprop_input_nhwc(f, dy, chunked, g)
    finally:
        conv_ops.BLOCKS_ENABLED = old
    np.testing.assert_allclose(outs[0], chunked, rtol=tol, atol=tol * np.abs(exact).max())
    np.testing.assert_array_equal(f, keep[0])
    np.testing.assert_array_equal(dy, keep[1])
