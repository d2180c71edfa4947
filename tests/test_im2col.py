"""The contiguous-run im2col (kernels/cpu/conv_ops.py, dw == 1) against the per-tap one, without
TensorFlow (the op table checks the convolutions against stock): the same patch matrix for
strides, row dilation, padding on every side, partial windows at the borders, several images
and a chunk that starts past the first image row."""
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
