"""bfloat16 matrix products on the CPU's own bfloat16 dot-product instruction (AVX512_BF16's
VDPBF16PS: 16 float32 lanes, each += the two products of a pair of bfloat16 values), as stock's
oneDNN runs them on CPUs that have it; float32 accumulation, each result (+ bias, Relu) rounded
once to bfloat16 (VCVTNEPS2BF16) as it is stored.

The micro-kernel is LLVM IR emitted by a numba intrinsic (`_tile`): an MR x 64 (or x 32) block
of the float32 product held in registers over the whole reduction, B read as packed pairs
(`pack_b`: [N/nr panels][K/2][nr] 32-bit words, each the bfloat16 pair B[2p, n], B[2p+1, n];
nr = panel_width(N)), A's pair of each row broadcast. The drivers (`_matmul`, `_conv`,
`_filter_grad`) cut the work into tiles over numba's threads (how it is cut depends on the
shape only: the bits do not depend on the threads).
Like the instruction, the product treats subnormal inputs as zero and flushes subnormal
results (stock's oneDNN kernel runs the same instruction).

`runs()`: the CPU has AVX512_BF16 (shape_fns.host), LLVM compiled the kernel and stock runs
bfloat16 on oneDNN; elsewhere the callers widen to float32 (kernels/cpu/half_ops.py,
matmul_ops.py).

The same tiles in float32 (`_tile(..., f32=True)`: A one value a step, 16-lane FMA, float32
out, no subnormal flushing) run float32 convolutions and their backprops on AVX-512F CPUs
(`runs_f32()`; conv_ops.py decides where), including first layers' filter gradients
(`backprop_filter_few_into`: A's values a pixel apart). The drivers serve both: the tile set
is picked by A's dtype when numba types them.
"""
import functools

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload

from kernels.cpu import filter_cache, jit
from kernels.cpu.half_bits import narrow_into, widen
from kernels.cpu.scratch import scratch
from shape_fns.conv_ops import Window
from shape_fns.host import cpu_flags, onednn_runs

NR = 64          # columns of a tile: four 16-lane registers
MR = 6           # rows of a tile: 6 x 4 accumulators + 4 B registers + 1 broadcast of 32
_state = {"ok": None}


class _BFloat(ir.Type):
    """LLVM's bfloat (llvmlite has no such type; the IR is text)."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash("bfloat")


def _phis(builder, ty, values, block):
    """One phi of type ty per value, entered from `block` with that value."""
    out = []
    for v in values:
        ph = builder.phi(ty)
        ph.add_incoming(v, block)
        out.append(ph)
    return out


def _tile(mr, accumulate=False, nv=4, f32=False, strided=False, ldb=False, b16=False):
    """An intrinsic computing C[0:mr, 0:min(64, ncols)] = sum over segments s of
    A_s[0:mr, 0:2kp] @ the panel's rows for s, accumulated in float32, + bias, Relu where relu
    is set, stored rounded to bfloat16: tile(a_addr, lda, offs_addr, nseg, kp, b_addr, c_addr,
    ldc, ncols, bias_addr, relu). A_s starts offs[s] bfloat16 elements after a_addr (a product:
    one segment at 0; a convolution: one per filter tap), rows lda elements apart; the panel
    holds nseg * kp rows of 64 packed pairs (read unaligned: pack_b aligns them to 64 bytes,
    the check in `available` need not); C's rows ldc bfloat16 elements apart; bias: 64 float32
    values; nseg, kp >= 1. accumulate: C is float32 (64 columns of every row its own, ldc in
    float32 elements), the sums are added to it and stored unrounded (bias and relu unused): a
    reduction cut into blocks. nv: 16-column registers a row (4: panels of 64 columns, 2: of
    32, for products with few columns). f32: A, the panels and C are float32 (a panel row: 64
    float32 values, A read one value a step, FMA), the same segments and epilogue, no rounding.
    strided (float32, accumulate): A's values of a row are `relu` elements apart (A[r, p] at
    r * lda + p * relu), not adjacent.
    ldb (float32): B is not packed but read in place, its rows a twelfth argument's float32
    elements apart (b: the panel's first column; every row of the panel inside B: the
    caller's panels divide N; segment s reads rows s * kp ...), and A's values of a row a
    thirteenth's apart (1: adjacent; a transposed A: its rows adjacent, lda 1).
    b16 (float32, packed B): the panels hold bfloat16 values (uint16, nr a row), each widened
    to float32 as it is loaded (a shift: exact), so B is never widened in memory.
    """

    def body(typingctx):
        sig = types.void(*([types.intp] * (13 if ldb else 11)))

        def codegen(context, builder, signature, args):
            (a_addr, lda_v, offs_addr, nseg_v, kp_v, b_addr, c_addr, ldc_v, ncols_v, bias_addr,
             relu_v) = args[:11]
            fl, i16, i32, i64 = ir.FloatType(), ir.IntType(16), ir.IntType(32), ir.IntType(64)
            vf = ir.VectorType(fl, 16)
            vi = ir.VectorType(i32, 16)
            vb = ir.VectorType(_BFloat(), 32)
            mod = builder.module
            if f32:
                name = "llvm.fma.v16f32"
                dp = mod.globals.get(name) or ir.Function(
                    mod, ir.FunctionType(vf, [vf, vf, vf]), name=name)
            else:
                name = "llvm.x86.avx512bf16.dpbf16ps.512"
                dp = mod.globals.get(name) or ir.Function(
                    mod, ir.FunctionType(vf, [vf, vb, vb]), name=name)
            a_p = builder.inttoptr(a_addr, (fl if f32 else i16).as_pointer())
            o_p = builder.inttoptr(offs_addr, i64.as_pointer())
            b_p = builder.inttoptr(b_addr, vi.as_pointer())
            zero = ir.Constant(vf, [0.0] * 16)
            undef = ir.Constant(vi, None)
            mask = ir.Constant(ir.VectorType(i32, 16), [0] * 16)
            k64 = (lambda v: ir.Constant(i64, v))
            entry = builder.block
            c_f = builder.inttoptr(c_addr, fl.as_pointer())
            cptr = [[builder.bitcast(builder.gep(c_f, [builder.add(
                builder.mul(k64(r), ldc_v), k64(16 * j))]), vf.as_pointer())
                for j in range(nv)] for r in range(mr)] if accumulate else None
            init = [builder.load(cptr[r][j], align=4) for r in range(mr) for j in range(nv)] \
                if accumulate else [zero] * (mr * nv)
            head = builder.append_basic_block("bf16_seg")
            loop = builder.append_basic_block("bf16_loop")
            latch = builder.append_basic_block("bf16_next")
            done = builder.append_basic_block("bf16_done")
            builder.branch(head)
            # per segment: its A offset, its first panel row
            builder.position_at_end(head)
            sg = builder.phi(i64)
            sg.add_incoming(k64(0), entry)
            seg_accs = _phis(builder, vf, init, entry)
            a_s = builder.gep(a_p, [builder.load(builder.gep(o_p, [sg]))])
            row0 = builder.mul(sg, kp_v)
            builder.branch(loop)
            # per pair of the segment: nv panel registers, mr broadcasts, mr * nv products
            builder.position_at_end(loop)
            p = builder.phi(i64)
            p.add_incoming(k64(0), head)
            accs = _phis(builder, vf, seg_accs, head)
            if ldb:     # row (row0 + p) of B in place: ldb float32 values a row
                b_f = builder.inttoptr(b_addr, fl.as_pointer())
                bel = builder.mul(builder.add(row0, p), args[11])
                bs = [builder.load(builder.bitcast(builder.gep(b_f, [builder.add(
                    bel, k64(16 * j))]), vf.as_pointer()), align=4) for j in range(nv)]
            elif b16:   # 16 bfloat16 values a register: zero-extended, shifted to the top
                brow = builder.mul(builder.add(row0, p), k64(nv))
                b_h = builder.inttoptr(b_addr, ir.VectorType(i16, 16).as_pointer())
                sh = ir.Constant(vi, [16] * 16)
                bs = [builder.bitcast(builder.shl(builder.zext(builder.load(
                    builder.gep(b_h, [builder.add(brow, k64(j))]), align=2), vi), sh), vf)
                    for j in range(nv)]
            else:
                brow = builder.mul(builder.add(row0, p), k64(nv))
                bs = [builder.bitcast(builder.load(builder.gep(b_p, [builder.add(brow, k64(j))]),
                                                   align=4), vf if f32 else vb)
                      for j in range(nv)]
            news = []
            for r in range(mr):
                if f32:     # A's value of the row, broadcast; acc + a * b, one rounding (FMA)
                    av = builder.load(builder.gep(a_s, [builder.add(
                        builder.mul(k64(r), lda_v),
                        builder.mul(p, relu_v) if strided else
                        builder.mul(p, args[12]) if ldb else p)]), align=4)
                    sb = builder.shuffle_vector(
                        builder.insert_element(ir.Constant(vf, None), av,
                                               ir.Constant(i32, 0)), ir.Constant(vf, None), mask)
                    for j in range(nv):
                        news.append(builder.call(dp, [sb, bs[j], accs[r * nv + j]]))
                    continue
                off = builder.add(builder.mul(k64(r), lda_v), builder.mul(p, k64(2)))
                pa = builder.bitcast(builder.gep(a_s, [off]), i32.as_pointer())
                av = builder.load(pa, align=2)
                splat = builder.shuffle_vector(
                    builder.insert_element(undef, av, ir.Constant(i32, 0)), undef, mask)
                sb = builder.bitcast(splat, vb)
                for j in range(nv):
                    news.append(builder.call(dp, [accs[r * nv + j], sb, bs[j]]))
            p1 = builder.add(p, k64(1))
            p.add_incoming(p1, loop)
            for ph, new in zip(accs, news):
                ph.add_incoming(new, loop)
            builder.cbranch(builder.icmp_signed("<", p1, kp_v), loop, latch)
            builder.position_at_end(latch)
            s1 = builder.add(sg, k64(1))
            sg.add_incoming(s1, latch)
            for ph, new in zip(seg_accs, news):
                ph.add_incoming(new, latch)
            builder.cbranch(builder.icmp_signed("<", s1, nseg_v), head, done)
            builder.position_at_end(done)
            if accumulate:
                for r in range(mr):
                    for j in range(nv):
                        builder.store(news[r * nv + j], cptr[r][j], align=4)
                return context.get_dummy_value()
            # rounded to bfloat16 (VCVTNEPS2BF16: nearest even, NaN quiet) and stored: whole
            # registers where all 16 columns are C's, lane by lane where some are
            cname = "llvm.x86.avx512bf16.cvtneps2bf16.512"
            vh = ir.VectorType(_BFloat(), 16)
            cvt = None if f32 else (mod.globals.get(cname) or ir.Function(
                mod, ir.FunctionType(vh, [vf]), name=cname))
            vs = vf if f32 else ir.VectorType(i16, 16)
            h_p = c_f if f32 else builder.inttoptr(c_addr, i16.as_pointer())
            # the epilogue in float32 before the one rounding: + bias (64 float32 values for
            # the panel's columns, zeros where none), then Relu (x < 0 ? 0 : x: NaN and -0 stay)
            bias_p = builder.inttoptr(bias_addr, vf.as_pointer())
            bias = [builder.load(builder.gep(bias_p, [k64(j)]), align=4) for j in range(nv)]
            do_relu = builder.icmp_signed("!=", relu_v, k64(0))
            for r in range(mr):
                for j in range(nv):
                    acc = builder.fadd(news[r * nv + j], bias[j])
                    clipped = builder.select(builder.fcmp_ordered("<", acc, zero), zero, acc)
                    acc = builder.select(do_relu, clipped, acc)
                    # float32 out: the same epilogue, stored unrounded
                    v = acc if f32 else builder.bitcast(builder.call(cvt, [acc]), vs)
                    row = builder.add(builder.mul(k64(r), ldc_v), k64(16 * j))
                    full = builder.icmp_signed("<=", k64(16 * (j + 1)), ncols_v)
                    with builder.if_else(full) as (whole, part):
                        with whole:
                            ptr = builder.bitcast(builder.gep(h_p, [row]), vs.as_pointer())
                            builder.store(v, ptr, align=2)
                        with part:
                            for lane in range(16):
                                inside = builder.icmp_signed("<", k64(16 * j + lane), ncols_v)
                                with builder.if_then(inside):
                                    builder.store(builder.extract_element(
                                        v, ir.Constant(i32, lane)),
                                        builder.gep(h_p, [builder.add(row, k64(lane))]))
            return context.get_dummy_value()

        return sig, codegen

    if ldb:
        def tile(typingctx, a, lda, offs, nseg, kp, b, c, ldc, ncols, bias, relu, ldb_, step):
            return body(typingctx)
    else:
        def tile(typingctx, a, lda, offs, nseg, kp, b, c, ldc, ncols, bias, relu):
            return body(typingctx)
    return intrinsic(tile)


@functools.lru_cache(maxsize=None)
def _tile_set(f32):
    """The tiles of 1..MR rows on 64- and 32-column panels, and the accumulating 6-row tile;
    made when a driver is first typed (numba makes an intrinsic in ~1 ms: 38 at import were
    0.19 s of every start; a driver loaded from numba's cache needs none)."""
    return (tuple(_tile(m, f32=f32) for m in range(1, MR + 1)),
            tuple(_tile(m, nv=2, f32=f32) for m in range(1, MR + 1)),
            _tile(MR, accumulate=True, f32=f32))


def _tiles(kind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
    """The tile of mr rows (1..MR) for panels nr columns wide (64 or 32); kind: the A operand,
    whose dtype picks the instruction (float32: FMA, else bfloat16 pairs) when numba types the
    caller (a CPU without AVX512_BF16 never compiles the bfloat16 tiles)."""


def _by_rows(tiles, name):
    """A jitted call of the tile of mr rows (1..MR) among `tiles` (one panel width), named
    `name` (see jit.named)."""
    t1, t2, t3, t4, t5, t6 = tiles

    def call(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
        if mr == 6:
            t6(pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
        elif mr == 5:
            t5(pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
        elif mr == 4:
            t4(pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
        elif mr == 3:
            t3(pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
        elif mr == 2:
            t2(pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
        else:
            t1(pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
    return njit(inline="always")(jit.named(call, name))


def _dispatcher(name, wide, narrow, thin=None):
    """A numba implementation calling, by mr and nr, one of the tiles of 1..MR rows on 64-
    (wide), 32- (narrow) or, where given, 16-column (thin) panels; `name`: the tile set's
    (see jit.named)."""
    w, n = _by_rows(wide, f"_tiles_{name}_64"), _by_rows(narrow, f"_tiles_{name}_32")
    t = _by_rows(thin, f"_tiles_{name}_16") if thin is not None else n

    def impl(kind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
        if nr == NR:
            w(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
        elif nr == 32:
            n(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
        else:
            t(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
    return jit.named(impl, f"_dispatch_{name}")


@overload(_tiles)
def _tiles_typed(kind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
    f32 = kind.dtype == types.float32
    wide, narrow, _ = _tile_set(f32)
    return _dispatcher("f32" if f32 else "bf16", wide, narrow)


def _acc6(kind, pa, lda, o0, nseg, kp, pb, pc, ldc):
    """The accumulating 6-row tile for A's dtype (see _tiles)."""


@overload(_acc6)
def _acc6_typed(kind, pa, lda, o0, nseg, kp, pb, pc, ldc):
    f32 = kind.dtype == types.float32
    a6 = _tile_set(f32)[2]

    def impl(kind, pa, lda, o0, nseg, kp, pb, pc, ldc):
        a6(pa, lda, o0, nseg, kp, pb, pc, ldc, 0, 0, 0)
    return jit.named(impl, "_acc6_f32" if f32 else "_acc6_bf16")


def _matmul(a, bp, c, bias, relu):
    """c[M, N] = a[M, K] @ the packed panels bp[ceil(N/nr), kp, nr] (nr 64 or 32): bfloat16 bits
    (uint16) in and out, K = 2kp (uint32 pairs), or float32 with K = kp."""
    M, N = c.shape
    n_pan, kp, nr = bp.shape[0], bp.shape[1], bp.shape[2]
    ea, ec = a.itemsize, c.itemsize
    lda, ldc = a.strides[0] // ea, c.strides[0] // ec
    mt = (M + MR - 1) // MR
    offs = np.zeros(1, np.int64)
    a0, b0, c0, o0 = a.ctypes.data, bp.ctypes.data, c.ctypes.data, offs.ctypes.data
    z0 = bias.ctypes.data
    for t in prange(mt * n_pan):
        j = t // mt
        i = t - j * mt
        r0 = i * MR
        _tiles(a, min(MR, M - r0), nr, a0 + r0 * lda * ea, lda, o0, 1, kp,
               b0 + j * kp * nr * 4, c0 + (r0 * ldc + j * nr) * ec, ldc, N - j * nr,
               z0 + j * nr * 4, relu)


def _pack_b(b, out):
    """out[panel, p, c] = B[2p, nr panel + c] | B[2p + 1, nr panel + c] << 16 (zero beyond B;
    nr: the panels' width, out's last axis)."""
    K, N = b.shape
    n_pan, kp, nr = out.shape[0], out.shape[1], out.shape[2]
    for t in prange(n_pan * kp):
        j = t // kp
        p = t - j * kp
        k0 = 2 * p
        for cc in range(nr):
            n = j * nr + cc
            lo = np.uint32(0)
            hi = np.uint32(0)
            if n < N:
                lo = np.uint32(b[k0, n])
                if k0 + 1 < K:
                    hi = np.uint32(b[k0 + 1, n])
            out[j, p, cc] = lo | (hi << np.uint32(16))


def _pack_f(b, out):
    """out[panel, k, c] = B[k, nr panel + c], float32 (zero beyond B)."""
    K, N = b.shape
    n_pan, nr = out.shape[0], out.shape[2]
    for t in prange(n_pan * K):
        j = t // K
        k = t - j * K
        for cc in range(nr):
            n = j * nr + cc
            out[j, k, cc] = b[k, n] if n < N else 0


_MATMUL = (njit(cache=True, nogil=True)(_matmul), jit.parallel(_matmul))
_PACK = (njit(cache=True, nogil=True)(_pack_b), jit.parallel(_pack_b))
_PACK_F = (njit(cache=True, nogil=True)(_pack_f), jit.parallel(_pack_f))
PARALLEL_MIN = 1 << 18    # multiply-adds below which one thread runs the product


@functools.lru_cache(maxsize=None)
def _ldb_set():
    """float32 product tiles reading B in place (`_tile(..., ldb=True)`): 1..MR rows on 64-,
    32- and 16-column panels (made when first typed, as _tile_set)."""
    return tuple(tuple(_tile(m, nv=nv, f32=True, ldb=True) for m in range(1, MR + 1))
                 for nv in (4, 2, 1))


def _by_rows_ldb(tiles, name):
    """A jitted call of the in-place-B tile of mr rows (1..MR) among `tiles` (one panel
    width), named `name` (see jit.named); the panels divide N, so every store is whole."""
    t1, t2, t3, t4, t5, t6 = tiles

    def call(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, z0, relu, ldb, step):
        if mr == 6:
            t6(pa, lda, o0, nseg, kp, pb, pc, ldc, NR, z0, relu, ldb, step)
        elif mr == 5:
            t5(pa, lda, o0, nseg, kp, pb, pc, ldc, NR, z0, relu, ldb, step)
        elif mr == 4:
            t4(pa, lda, o0, nseg, kp, pb, pc, ldc, NR, z0, relu, ldb, step)
        elif mr == 3:
            t3(pa, lda, o0, nseg, kp, pb, pc, ldc, NR, z0, relu, ldb, step)
        elif mr == 2:
            t2(pa, lda, o0, nseg, kp, pb, pc, ldc, NR, z0, relu, ldb, step)
        else:
            t1(pa, lda, o0, nseg, kp, pb, pc, ldc, NR, z0, relu, ldb, step)
    return njit(inline="always")(jit.named(call, name))


def _ldb_tile(mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, z0, relu, ldb, step):
    """The in-place-B float32 tile of mr rows (1..MR) on panels nr columns wide."""


@overload(_ldb_tile)
def _ldb_typed(mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, z0, relu, ldb, step):
    w, n, t = (_by_rows_ldb(tiles, f"_tiles_ldb_{width}")
               for tiles, width in zip(_ldb_set(), (64, 32, 16)))

    def impl(mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, z0, relu, ldb, step):
        if nr == NR:
            w(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, z0, relu, ldb, step)
        elif nr == 32:
            n(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, z0, relu, ldb, step)
        else:
            t(mr, pa, lda, o0, nseg, kp, pb, pc, ldc, z0, relu, ldb, step)
    return jit.named(impl, "_dispatch_ldb")


def _matmul_ldb(a, b, c, bias, relu, nr):
    """c[M, N] = a[M, K] @ b[K, N] (+ bias, Relu), float32, B read in place in panels nr
    columns wide (nr divides N): a task is one panel's tile of MR rows, the tasks of one panel
    adjacent (its K x nr block of B stays in the core's cache while its rows are done)."""
    M, N = c.shape
    K = a.shape[1]
    lda, step, ldb, ldc = a.strides[0] // 4, a.strides[1] // 4, b.strides[0] // 4, c.strides[0] // 4
    n_pan = N // nr
    mt = (M + MR - 1) // MR
    offs = np.zeros(1, np.int64)
    a0, b0, c0, o0, z0 = (a.ctypes.data, b.ctypes.data, c.ctypes.data, offs.ctypes.data,
                          bias.ctypes.data)
    for t in prange(mt * n_pan):
        j = t // mt
        r0 = (t - j * mt) * MR
        _ldb_tile(min(MR, M - r0), nr, a0 + r0 * lda * 4, lda, o0, 1, K, b0 + j * nr * 4,
                  c0 + (r0 * ldc + j * nr) * 4, ldc, z0 + j * nr * 4, relu, ldb, step)


_MATMUL_LDB = (njit(cache=True, nogil=True)(_matmul_ldb), jit.parallel(_matmul_ldb))


def product_f32_eligible(a, b, out):
    """Whether matmul_f32_into runs this float32 product: AVX-512F (runs_f32), rows of b and
    out contiguous along their columns, a's rows or columns contiguous (a transposed view),
    N a multiple of 16, nothing empty."""
    it = 4
    return (a.dtype == b.dtype == out.dtype == np.float32 and a.ndim == b.ndim == 2
            and it in a.strides and b.strides[1] == it and out.strides[1] == it
            and min(a.strides) > 0
            and not (a.strides[0] % it or a.strides[1] % it or b.strides[0] % it
                     or out.strides[0] % it)
            and a.shape[0] and a.shape[1] and b.shape[1] and b.shape[1] % 16 == 0
            and runs_f32())


def matmul_f32_into(out, a, b, bias=None, relu=False):
    """out[M, N] = a[M, K] @ b[K, N] (+ bias, Relu), float32, on the tiles with B read in
    place (no packing: OpenBLAS packs B on every call); each output is one FMA chain over K
    in order, whatever the threads. False where it does not apply (product_f32_eligible)."""
    if not product_f32_eligible(a, b, out):
        return False
    M, K = a.shape
    N = b.shape[1]
    z = np.zeros(N, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32)
    _MATMUL_LDB[1 if M * K * N >= PARALLEL_MIN else 0](a, b, out, z, int(relu),
                                                       strided_width(N))
    return True


def available():
    """Whether this CPU runs bfloat16 products on VDPBF16PS here (checked once)."""
    if _state["ok"] is None:
        ok = "avx512_bf16" in cpu_flags() and "avx512f" in cpu_flags()
        if ok:
            try:
                a = np.ones((1, 2), np.uint16) * np.uint16(0x3F80)    # 1.0
                bp = np.ones((1, 1, NR), np.uint32) * np.uint32(0x3F803F80)
                c = np.empty((1, NR), np.uint16)
                _MATMUL[0](a, bp, c, np.zeros(NR, np.float32), 0)
                ok = bool((c == 0x4000).all())    # 2.0
            except Exception:  # noqa: BLE001 - LLVM refused the intrinsic: widen instead
                ok = False
        _state["ok"] = ok
    return _state["ok"]


def runs_f32():
    """Whether float32 convolutions run on these tiles (FMA on 16-lane registers: AVX-512F;
    with 256-bit registers the 24 accumulators would not fit; checked once)."""
    if _state.get("f32") is None:
        ok = "avx512f" in cpu_flags()
        if ok:
            try:
                a = np.full((1, 1), 1.5, np.float32)
                bp = np.full((1, 1, NR), 2.0, np.float32)
                c = np.empty((1, NR), np.float32)
                _MATMUL[0](a, bp, c, np.zeros(NR, np.float32), 0)
                ok = bool((c == 3.0).all())
            except Exception:  # noqa: BLE001 - LLVM refused: the im2col kernels run
                ok = False
        _state["f32"] = ok
    return _state["f32"]


def runs():
    """Whether bfloat16 products run here: the instruction is there and stock runs bfloat16 on
    oneDNN, which uses it (with TF_ENABLE_ONEDNN_OPTS=0 stock widens in software: subnormal
    inputs count there, and the instruction would drop them)."""
    return available() and onednn_runs("bfloat16")


def panel_width(n):
    """The panels' width for a product of n columns: 32 up to 32 (two registers a row, no half-
    empty panel), else 64."""
    return 32 if n <= 32 else NR


def strided_width(n):
    """The panels' width for the accumulating strided tiles over n columns: the widest of 64,
    32 and 16 that divides n (no padded panel: a 32-wide panel of a 16-channel dy doubled the
    bytes pack_b wrote and the products), 16 below 16, else panel_width(n)."""
    if n <= 16:
        return 16
    for w in (NR, 32, 16):
        if n % w == 0:
            return w
    return panel_width(n)


def pack_b(b, nr=NR, single=False):
    """B[K, N] (bfloat16 bits, uint16) as panels nr columns wide of packed pairs (float32 B, or
    bfloat16 bits with `single`: of single values), 64-byte aligned, in this thread's work
    buffer (valid until its next pack_b: a fresh multi-MB array each call cost a page fault per
    4 KiB)."""
    K, N = b.shape
    f32 = b.dtype == np.float32
    one = f32 or single
    shape = ((N + nr - 1) // nr, max(1, K if one else (K + 1) // 2), nr)
    n = shape[0] * shape[1] * nr
    dtype = np.dtype(np.float32 if f32 else np.uint16 if single else np.uint32)
    raw = scratch((n + 64 // dtype.itemsize,), dtype, "bf16_b")   # (room to align to 64 bytes)
    off = (-raw.ctypes.data % 64) // dtype.itemsize
    out = raw[off:off + n].reshape(shape)
    (_PACK_F if one else _PACK)[1 if out.size >= 1 << 16 else 0](b, out)
    return out


def _bias(bias, bp):
    """The epilogue's bias as float32, zero-padded to the panels' width (zeros: none)."""
    z = np.zeros(bp.shape[0] * bp.shape[2], np.float32)
    if bias is not None:
        z[:bias.size] = bias.astype(np.float32).reshape(-1)
    return z


def matmul(a, bp, out, bias=None, relu=False):
    """out[M, N] = a[M, K] @ B: bfloat16 bits (uint16) in and out, a's rows contiguous with K
    even (a zero column added by the caller where odd), B packed by pack_b, out C-contiguous."""
    M, K = a.shape
    kp = bp.shape[1]
    if K != 2 * kp:
        raise ValueError(f"bf16 matmul: A has {K} columns, the packed B {2 * kp}")
    if M and out.shape[1]:
        _MATMUL[1 if M * K * out.shape[1] >= PARALLEL_MIN else 0](
            a, bp, out, _bias(bias, bp), int(relu))


@njit(inline="always")
def _conv_task(t, rows, owb, OH, sh, dh, pt, H, KH):
    """A convolution driver's task t: its panel j, output row nh (image n, row oh), first
    pixel ow0, and the filter rows kh0..kh1 that read image rows, not padding (every row
    when all read padding: zeros summed)."""
    j = t // rows
    q = t - j * rows
    nh = q // owb
    ow0 = (q - nh * owb) * MR
    n = nh // OH
    oh = nh - n * OH
    kh0, kh1 = 0, KH
    while kh0 < KH and oh * sh + kh0 * dh < pt:
        kh0 += 1
    while kh1 > kh0 and oh * sh + (kh1 - 1) * dh >= pt + H:
        kh1 -= 1
    if kh0 == kh1:
        kh0, kh1 = 0, KH
    return j, nh, ow0, n, oh, kh0, kh1


def _conv(xp, bp, offs, KW, OH, OW, sh, sw, dh, pt, H, c, bias, relu):
    """c[(n, oh, ow), O] = the convolution of the padded input xp[N, Hp, Wp, Ce] (bfloat16
    bits or float32; the image's H rows from row pt) with the packed filter (one segment per
    tap at offs, kh-major, KW a filter row; Ce/2 pairs or Ce values each; panels 64 or 32
    wide): tiles of up to MR output pixels of one output row, each summing only the filter rows
    that read the image's rows (a padding row adds zeros: skipped, as oneDNN skips it)."""
    N, Ce = xp.shape[0], xp.shape[3]
    O = c.shape[1]
    n_pan = bp.shape[0]
    ex, ec = xp.itemsize, c.itemsize
    kp = Ce // 2 if ex == 2 else Ce
    nseg = offs.shape[0]
    KH = nseg // KW
    lda = sw * Ce
    ldc = c.strides[0] // ec
    owb = (OW + MR - 1) // MR
    rows = N * OH * owb
    sn, sr = xp.strides[0] // ex, xp.strides[1] // ex
    x0, b0, c0, o0 = xp.ctypes.data, bp.ctypes.data, c.ctypes.data, offs.ctypes.data
    z0 = bias.ctypes.data
    nr = bp.shape[2]
    for t in prange(rows * n_pan):
        j, nh, ow0, n, oh, kh0, kh1 = _conv_task(t, rows, owb, OH, sh, dh, pt, H, KH)
        s0 = kh0 * KW
        _tiles(xp, min(MR, OW - ow0), nr, x0 + (n * sn + oh * sh * sr + ow0 * sw * Ce) * ex,
               lda, o0 + s0 * 8, (kh1 - kh0) * KW, kp, b0 + (j * nseg + s0) * kp * nr * 4,
               c0 + ((nh * OW + ow0) * ldc + j * nr) * ec, ldc, O - j * nr, z0 + j * nr * 4, relu)


_CONV = (njit(cache=True, nogil=True)(_conv), jit.parallel(_conv))


def _conv_ldb(xp, f2, offs, KW, OH, OW, sh, sw, dh, pt, H, c, bias, relu, nr):
    """_conv in float32 with the filter read in place: f2 = f.reshape(KH * KW * C, O), its
    rows of one tap adjacent, panels nr columns wide (nr divides O); no packing per call."""
    N, Ce = xp.shape[0], xp.shape[3]
    O = c.shape[1]
    n_pan = O // nr
    nseg = offs.shape[0]
    KH = nseg // KW
    lda = sw * Ce
    ldc = c.strides[0] // 4
    ldb = f2.strides[0] // 4
    owb = (OW + MR - 1) // MR
    rows = N * OH * owb
    sn, sr = xp.strides[0] // 4, xp.strides[1] // 4
    x0, b0, c0, o0 = xp.ctypes.data, f2.ctypes.data, c.ctypes.data, offs.ctypes.data
    z0 = bias.ctypes.data
    for t in prange(rows * n_pan):
        j, nh, ow0, n, oh, kh0, kh1 = _conv_task(t, rows, owb, OH, sh, dh, pt, H, KH)
        s0 = kh0 * KW
        _ldb_tile(min(MR, OW - ow0), nr, x0 + (n * sn + oh * sh * sr + ow0 * sw * Ce) * 4,
                  lda, o0 + s0 * 8, (kh1 - kh0) * KW, Ce, b0 + (s0 * Ce * ldb + j * nr) * 4,
                  c0 + ((nh * OW + ow0) * ldc + j * nr) * 4, ldc, z0 + j * nr * 4, relu, ldb, 1)


_CONV_LDB = (njit(cache=True, nogil=True)(_conv_ldb), jit.parallel(_conv_ldb))
# A float32 filter of 16, 32 or 64 output channels is read in place: its rows are then exactly
# the one panel packing would copy out. Wider filters are still packed: read in place, a panel's
# rows lie O floats apart, and the packed panel's contiguous rows won (AMD EPYC Zen 5, 2
# threads, interleaved medians of 40, in place / packed: 1x14x14x256 3x3 -> 256 889/644 us,
# 1x35x35x288 3x3/2 -> 384 1559/1512, 8x28x28x64 -> 128 1886/1837; at 64 or fewer channels
# 1x56x56x64 489/519, 32x13x13x16 -> 32 83/90)
CONV_IN_PLACE = True   # False: float32 filters are packed per call as bfloat16's are (A/B runs)


def _pad_rows(x, xp, pt, pl):
    """xp = x placed at (pt, pl) in zeros (channels beyond x's zero too)."""
    N, H, W, C = x.shape
    Hp, Wp, Ce = xp.shape[1], xp.shape[2], xp.shape[3]
    for q in prange(N * Hp):
        n = q // Hp
        h = q - n * Hp
        row = xp[n, h]
        ih = h - pt
        if ih < 0 or ih >= H:
            row[:] = 0
            continue
        for w in range(Wp):
            iw = w - pl
            if iw < 0 or iw >= W:
                row[w, :] = 0
            else:
                for cc in range(C):
                    row[w, cc] = x[n, ih, iw, cc]
                for cc in range(C, Ce):
                    row[w, cc] = 0


_PAD = (njit(cache=True, nogil=True)(_pad_rows), jit.parallel(_pad_rows))


def _pad_copy(x, xp, pt, pl):
    _PAD[1 if xp.size >= 1 << 17 else 0](x, xp, pt, pl)


def _even(c, dtype):
    """Channels as stored for the product: bfloat16 pairs need an even count."""
    return c + (c & 1) if dtype == np.uint16 else c


def pack_filter(f):
    """A [KH, KW, C, O] bfloat16 (bits) or float32 filter as packed panels (panel_width(O)),
    bfloat16's C padded to even."""
    KH, KW, C, O = f.shape
    Ce = _even(C, f.dtype)
    if Ce != C:
        fe = np.zeros((KH, KW, Ce, O), f.dtype)
        fe[:, :, :C] = f
        f = fe
    return pack_b(np.ascontiguousarray(f).reshape(KH * KW * Ce, O), panel_width(O))


def conv2d(x, f, g, out, bias=None, relu=False, keep=False):
    """out[N, OH, OW, O] = the NHWC convolution of x[N, H, W, C] with f[KH, KW, C, O], bfloat16
    bits (uint16) or float32 in and out (out C-contiguous), geometry g (shape_fns.conv_ops.Window:
    strides, dilations, pads); padding is zeros, so the caller keeps non-finite filters with
    padding for another kernel (zeros times Inf). keep: the filter is a variable read by an
    inference program, so its packed panels are kept between calls (filter_cache)."""
    N, H, W, C = x.shape
    KH, KW, _, O = f.shape
    Ce = _even(C, x.dtype)
    Hp, Wp = H + g.pt + g.pb, W + g.pl + g.pr
    if Hp != H or Wp != W or Ce != C:
        xp = scratch((N, Hp, Wp, Ce), x.dtype, "bf16_x")
        _pad_copy(x, xp, g.pt, g.pl)
    else:
        xp = np.ascontiguousarray(x)
    offs = ((np.arange(KH, dtype=np.int64)[:, None] * (g.dh * Wp)
             + np.arange(KW, dtype=np.int64) * g.dw) * Ce).reshape(-1)
    c = out.reshape(N * g.oh * g.ow, O)
    if x.dtype == np.float32 and O in (16, 32, NR) and CONV_IN_PLACE:
        if c.shape[0]:   # the filter's rows read in place, as a product's B (_conv_ldb)
            z = (np.zeros(O, np.float32) if bias is None
                 else np.ascontiguousarray(bias, np.float32).reshape(-1))
            _CONV_LDB[1 if c.shape[0] * KH * KW * Ce * O >= PARALLEL_MIN else 0](
                xp, np.ascontiguousarray(f).reshape(KH * KW * C, O), offs, KW, g.oh, g.ow,
                g.sh, g.sw, g.dh, g.pt, H, c, z, int(relu), strided_width(O))
        return
    bp = _packed_filter(f) if keep else None
    if bp is None:
        bp = pack_filter(f)
    if c.shape[0]:
        _CONV[1 if c.shape[0] * KH * KW * Ce * O >= PARALLEL_MIN else 0](
            xp, bp, offs, KW, g.oh, g.ow, g.sh, g.sw, g.dh, g.pt, H, c, _bias(bias, bp),
            int(relu))


def _packed_filter(f):
    """f's packed panels from filter_cache (packed and kept on a miss), or None where f is not
    cacheable memory. Inside InceptionV3 at batch 1, packing its 29 wide filters per call took
    4.5 of 42 ms."""
    KH, KW, C, O = f.shape
    nbytes = KH * KW * _even(C, f.dtype) * (-(-O // NR) * NR) * f.itemsize
    return filter_cache.get(f, "packed", pack_filter, nbytes)


def _filter_nonfinite(f, keep):
    """_nonfinite(f), read from filter_cache for a kept filter (one pass over it per call
    otherwise: 1 of InceptionV3's 42 ms at batch 1)."""
    if keep:
        flag = filter_cache.get(f, "nonfinite", lambda w: np.array([_nonfinite(w)]), 1)
        if flag is not None:
            return bool(flag[0])
    return _nonfinite(f)


def _nonfinite(bits):
    """Whether bfloat16 bits (or float32 values) hold an Inf or NaN."""
    if bits.dtype == np.float32:
        return not np.isfinite(bits).all()
    return bool(((bits & np.uint16(0x7F80)) == np.uint16(0x7F80)).any())


def _bits(a):
    """bfloat16 as its bits (uint16); float32 as it is."""
    return a if a.dtype == np.float32 else a.view(np.uint16)


def conv_eligible(x_shape, f_shape, g, groups):
    """Whether conv2d runs this NHWC convolution: one group, 16 output channels or more (fewer
    leave most of a 32-column panel empty), nothing empty."""
    return (groups == 1 and f_shape[3] >= 16 and all(d > 0 for d in x_shape)
            and g.oh > 0 and g.ow > 0)


def conv2d_into(out, x, f, g, bias=None, relu=False, keep=False):
    """out (bfloat16, NHWC) = the convolution (+ bias, Relu: one rounding, as stock's fused
    oneDNN convolution), or False (the caller's kernel runs it): a non-finite filter with
    padding (zeros times Inf: stock's oneDNN skips the padding)."""
    xb, fb = _bits(x), _bits(f)
    if (g.pt or g.pb or g.pl or g.pr) and _filter_nonfinite(fb, keep):
        return False
    conv2d(xb, fb, g, _bits(out), bias=bias, relu=relu, keep=keep)
    return True


def _transpose(src, dst):
    """dst = src.T (2-D bits) in blocks of 32 destination rows: src's rows read along, each
    block of dst written while in L1 (numpy's strided copy of a 64x4096 transposed bfloat16
    array, a weight gradient's x^T: 0.46 ms, one cache line a value)."""
    K, M = src.shape
    for bi in prange((M + 31) // 32):
        i0 = bi * 32
        i1 = min(M, i0 + 32)
        for k in range(K):
            row = src[k]
            for i in range(i0, i1):
                dst[i, k] = row[i]


_TRANSPOSE = (njit(cache=True, nogil=True)(_transpose), jit.parallel(_transpose))


def _rows(a):
    """2-D bits with contiguous rows: as they are, a transposed array by blocks, else numpy's
    copy."""
    if a.flags.c_contiguous:
        return a
    if a.flags.f_contiguous and a.ndim == 2:
        out = np.empty(a.shape, a.dtype)
        _TRANSPOSE[1 if a.size >= 1 << 16 else 0](a.T, out)
        return out
    return np.ascontiguousarray(a)


def product_into(out, a, b, bias=None, relu=False):
    """out[M, N] (bfloat16) = a[M, K] @ b[K, N] (bfloat16, any strides) (+ bias, Relu: one
    rounding)."""
    M, K = a.shape
    ab = _rows(a.view(np.uint16))
    if K & 1:
        ap = np.zeros((M, K + 1), np.uint16)
        ap[:, :K] = ab
        ab = ap
    matmul(ab, pack_b(b.view(np.uint16), panel_width(b.shape[1])), out.view(np.uint16),
           bias=bias, relu=relu)


def backprop_input_into(dx, f, dy, g):
    """dx (bfloat16, NHWC) = Conv2DBackpropInput of a unit-stride convolution with geometry g:
    the convolution of dy, padded by the taps' reach less the forward padding, with the filter
    turned half a circle and its channels swapped; False where it does not apply (strides,
    cropping paddings, non-finite filters, few input channels: the caller's kernel runs it)."""
    KH, KW, C, O = f.shape
    N, H, W, _ = dx.shape
    fb = _bits(f)
    if g.sh != 1 or g.sw != 1 or C < 16 or not dx.size or _nonfinite(fb):
        return False
    pt, pl = (KH - 1) * g.dh - g.pt, (KW - 1) * g.dw - g.pl
    pb, pr = H + (KH - 1) * g.dh - g.oh - pt, W + (KW - 1) * g.dw - g.ow - pl
    if min(pt, pl, pb, pr) < 0 or dy.shape != (N, g.oh, g.ow, O):
        return False
    turned = np.ascontiguousarray(fb[::-1, ::-1].transpose(0, 1, 3, 2))
    g2 = Window()
    g2.kh, g2.kw, g2.sh, g2.sw, g2.dh, g2.dw, g2.oh, g2.ow = KH, KW, 1, 1, g.dh, g.dw, H, W
    g2.pt, g2.pb, g2.pl, g2.pr = pt, pb, pl, pr
    conv2d(_bits(dy), turned, g2, _bits(dx))
    return True


def _filter_grad(xt, bp, offs, KH, KW, dh, dw, acc, seg_block, nr):
    """acc[(kh, kw, ci), 64 * panels] += sum over pixels of xt (channels first, zero-padded,
    channels a multiple of MR: [C6, N, Hp, Wp]) at the tap times dy (packed in pairs of
    neighbouring pixels, one segment per output row at offs), float32: the segments in blocks
    of seg_block (their panel rows stay in cache while every tap and channel block reads them),
    each block's tiles over numba's threads (the order of the sums depends on the shapes only).
    nr: the panels' width (float32: strided_width; 64 for bfloat16)."""
    C6, Hp, Wp = xt.shape[0], xt.shape[2], xt.shape[3]
    plane = xt.shape[1] * Hp * Wp
    n_pan = bp.shape[0]
    nseg = offs.shape[0]
    kp = bp.shape[1] // nseg
    ldc = acc.strides[0] // 4
    cb = C6 // MR
    x0, b0, c0, o0 = xt.ctypes.data, bp.ctypes.data, acc.ctypes.data, offs.ctypes.data
    tasks = KH * KW * cb * n_pan
    for s0 in range(0, nseg, seg_block):
        ns = min(seg_block, nseg - s0)
        for t in prange(tasks):
            j = t // (KH * KW * cb)
            q = t - j * (KH * KW * cb)
            tap = q // cb
            ci = (q - tap * cb) * MR
            kh = tap // KW
            kw = tap - kh * KW
            pa = x0 + (ci * plane + kh * dh * Wp + kw * dw) * xt.itemsize
            pb = b0 + (j * nseg + s0) * kp * nr * 4
            pc = c0 + ((tap * C6 + ci) * ldc + j * nr) * 4
            if nr == NR:
                _acc6(xt, pa, plane, o0 + s0 * 8, ns, kp, pb, pc, ldc)
            else:   # float32 on 32- or 16-column panels (A's values adjacent: step 1)
                _strided_tile(xt, MR, nr, pa, plane, o0 + s0 * 8, ns, kp, pb, pc, ldc, 0, 0, 1)


_FGRAD = (njit(cache=True, nogil=True)(_filter_grad), jit.parallel(_filter_grad))


@functools.lru_cache(maxsize=None)
def _strided_set(b16=False):
    """Accumulating float32 tiles with A's values `step` apart (passed as `relu`): 1..MR rows,
    64-, 32- and 16-column panels (made when first typed, as _tile_set); b16: their panels of
    bfloat16 values."""
    return tuple(tuple(_tile(m, accumulate=True, nv=nv, f32=True, strided=True, b16=b16)
                       for m in range(1, MR + 1)) for nv in (4, 2, 1))


def _strided_tile(kind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
    """The accumulating float32 tile of mr rows (1..MR) with A's values `relu` apart."""


@overload(_strided_tile)
def _strided_typed(kind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
    return _dispatcher("strided_f32", *_strided_set())


def _strided_tile_b(kind, bkind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
    """_strided_tile with panels of bkind's dtype: float32, or bfloat16 bits (uint16)."""


@overload(_strided_tile_b)
def _strided_b_typed(kind, bkind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0,
                     relu):
    b16 = bkind.dtype == types.uint16
    call = njit(inline="always")(
        _dispatcher("strided_f32_b16" if b16 else "strided_f32_b", *_strided_set(b16)))

    def impl(kind, bkind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu):
        call(kind, mr, nr, pa, lda, o0, nseg, kp, pb, pc, ldc, ncols, z0, relu)
    return jit.named(impl, "_strided_b_b16" if b16 else "_strided_b_f32")


def _filter_grad_few(xp, bp, offs, KH, dh, parts, seg_block):
    """parts[b, (kh, kw, c), O] = the filter gradient over segment block b of a convolution
    with few input channels (float32, unit stride and width dilation): a tile's rows are the
    (kw, c) pairs of one filter row, adjacent in the padded NHWC input xp (lda 1, A's step C
    a pixel); a segment is an output row (its input row's offset at offs), its OW pixels a
    reduction over dy's rows in the panels bp (float32, or bfloat16 bits widened as loaded).
    Blocks of seg_block segments (fixed by the shapes) are summed apart and added in order by
    the caller."""
    Wp, C = xp.shape[2], xp.shape[3]
    R = parts.shape[1] // KH
    n_pan, nr = bp.shape[0], bp.shape[2]
    nseg = offs.shape[0]
    kp = bp.shape[1] // nseg
    nb = parts.shape[0]
    rt = (R + MR - 1) // MR
    ldc = parts.strides[1] // 4
    x0, b0, c0, o0 = xp.ctypes.data, bp.ctypes.data, parts.ctypes.data, offs.ctypes.data
    bsize = bp.itemsize
    for t in prange(nb * KH * rt * n_pan):
        b = t // (KH * rt * n_pan)
        q = t - b * (KH * rt * n_pan)
        kh = q // (rt * n_pan)
        q -= kh * (rt * n_pan)
        r0 = (q // n_pan) * MR
        j = q - (q // n_pan) * n_pan
        s0 = b * seg_block
        ns = min(seg_block, nseg - s0)
        _strided_tile_b(xp, bp, min(MR, R - r0), nr, x0 + (kh * dh * Wp * C + r0) * 4, 1,
                        o0 + s0 * 8, ns, kp, b0 + (j * bp.shape[1] + s0 * kp) * nr * bsize,
                        c0 + ((b * parts.shape[1] + kh * R + r0) * ldc + j * nr) * 4, ldc, 0, 0,
                        C)


def _scatter_input_grad(dy, bp, dx, KH, KW, dh, dw):
    """dx[n, oh + kh * dh, ow + kw * dw] += dy[n, oh, ow] @ f[kh, kw]^T for every tap (float32;
    a convolution without padding, unit strides; dx zeroed, C a multiple of the panels' width):
    a task owns one row of dx and one panel, and adds into it tap by tap (kh, kw), tiles of up
    to MR pixels of the dy row that tap reads, through the accumulating tile (dx's block
    loaded, the tap's O products added, stored). Every product lands in dx: none is a zero of
    padding, and nothing is copied."""
    N, OH, OW, O = dy.shape
    H, W, C = dx.shape[1], dx.shape[2], dx.shape[3]
    n_pan, kp, nr = bp.shape[0], bp.shape[1] // (KH * KW), bp.shape[2]
    offs = np.zeros(1, np.int64)
    y0, b0, x0, o0 = dy.ctypes.data, bp.ctypes.data, dx.ctypes.data, offs.ctypes.data
    rows = N * H
    for t in prange(rows * n_pan):
        j = t // rows
        q = t - j * rows
        n = q // H
        h = q - n * H
        for kh in range(KH):
            oh = h - kh * dh
            if oh < 0 or oh >= OH:
                continue
            for kw in range(KW):
                pb = b0 + (j * bp.shape[1] + (kh * KW + kw) * kp) * nr * 4
                for ow0 in range(0, OW, MR):
                    pa = y0 + ((n * OH + oh) * OW + ow0) * O * 4
                    pc = x0 + (((n * H + h) * W + ow0 + kw * dw) * C + j * nr) * 4
                    _strided_tile(dy, min(MR, OW - ow0), nr, pa, O, o0, 1, kp, pb, pc, C, 0,
                                  0, 1)


_SCATTER = (njit(cache=True, nogil=True)(_scatter_input_grad),
            jit.parallel(_scatter_input_grad))


def backprop_input_valid_into(dx, f, dy, g):
    """dx (float32 NHWC) = Conv2DBackpropInput of a unit-stride convolution without padding
    (VALID), by scattering each dy pixel's products to the dx pixels its taps read
    (_scatter_input_grad: no zero products of a padded dy, no padded copy); False where it
    does not apply (the caller's kernel runs it)."""
    KH, KW, C, O = f.shape
    N, H, W, _ = dx.shape
    nr = strided_width(C)
    if (dx.dtype != np.float32 or g.sh != 1 or g.sw != 1 or g.pt or g.pb or g.pl or g.pr
            or C % nr or C < 16 or not dx.flags.c_contiguous or not dx.size or not dy.size
            or dy.shape != (N, g.oh, g.ow, O)):
        return False
    turned = np.ascontiguousarray(f.transpose(0, 1, 3, 2)).reshape(KH * KW * O, C)
    bp = pack_b(turned, nr)
    dx[...] = 0
    _SCATTER[1 if dx.size * KH * KW * O >= PARALLEL_MIN else 0](
        np.ascontiguousarray(dy), bp, dx, KH, KW, g.dh, g.dw)
    return True


_FGRAD_FEW = (njit(cache=True, nogil=True)(_filter_grad_few),
              jit.parallel(_filter_grad_few))
FEW_SEGMENTS = 256   # output rows a block of the few-channel filter gradient sums
FEW_ROWS_MAX = 4 * MR   # (kw, c) rows of a filter row up to which it runs


def backprop_filter_few_into(df, x, dy, g, any_rows=False, dy_finite=False):
    """df (float32 [KH, KW, C, O]) = Conv2DBackpropFilter of a first layer (few input channels:
    KW * C rows, at most 4 tiles) with unit strides and width dilation (bfloat16 df, x and dy:
    x widened, dy read as bfloat16 by the tiles, the float32 sums rounded once); False where it
    does not apply (the caller's kernel runs it). Zero padding is a padded copy of x: a
    non-finite dy would meet it (zeros times Inf), so only finite dy with padding.
    any_rows: any number of input channels (a filter row's KW * C rows in tiles of MR; the
    input read in place, A's values a pixel apart), as one of the candidates conv_ops measures
    against the channels-first kernel (backprop_filter_into). dy_finite: the caller checked."""
    KH, KW, C, O = df.shape
    N, H, W, _ = x.shape
    if (g.sh != 1 or g.sw != 1 or g.dw != 1 or (KW * C > FEW_ROWS_MAX and not any_rows)
            or O < 16 or not df.size or not dy.size or dy.shape != (N, g.oh, g.ow, O)):
        return False
    if df.dtype.name == "bfloat16":   # bfloat16 in and out: the same float32 sums, one rounding
        if x.dtype != df.dtype or dy.dtype != df.dtype:
            return False
        acc = scratch(df.shape, np.float32, "bf16_df")
        xf = widen(x, scratch(x.shape, np.float32, "bf16_xf"))
        if not backprop_filter_few_into(acc, xf, dy.view(np.uint16), g, any_rows, dy_finite):
            return False
        narrow_into(df, acc)
        return True
    if x.dtype != np.float32:
        return False
    padded = g.pt or g.pb or g.pl or g.pr
    if padded and not dy_finite and _nonfinite(dy):
        return False
    Hp, Wp = H + g.pt + g.pb, W + g.pl + g.pr
    if padded:
        xp = scratch((N, Hp, Wp, C), np.float32, "bf16_x")
        _pad_copy(x, xp, g.pt, g.pl)
    else:
        xp = np.ascontiguousarray(x)
    dy2 = np.ascontiguousarray(dy).reshape(-1, O)
    nr = strided_width(O)
    bp = dy2.reshape(1, -1, O) if O == nr else pack_b(dy2, nr, single=True)
    offs = ((np.arange(N, dtype=np.int64)[:, None] * Hp
             + np.arange(g.oh, dtype=np.int64)) * (Wp * C)).reshape(-1)
    nb = (offs.shape[0] + FEW_SEGMENTS - 1) // FEW_SEGMENTS
    parts = scratch((nb, KH * KW * C, bp.shape[0] * nr), np.float32, "bf16_c")
    parts[...] = 0
    _FGRAD_FEW[1 if nb > 1 else 0](xp, bp, offs, KH, g.dh, parts, FEW_SEGMENTS)
    df[...] = parts.sum(axis=0)[:, :O].reshape(KH, KW, C, O)
    return True


def _channels_first(x, xt, pt, pl):
    """xt[c, n, pt + h, pl + w] = x[n, h, w, c], zeros around (and in channels beyond x's):
    one input row read contiguously per iteration, written to every channel's plane."""
    N, H, W, C = x.shape
    C6, Hp, Wp = xt.shape[0], xt.shape[2], xt.shape[3]
    for q in prange(N * Hp):
        n = q // Hp
        hp = q - n * Hp
        h = hp - pt
        if h < 0 or h >= H:
            for c in range(C6):
                xt[c, n, hp, :] = 0
            continue
        row = x[n, h]
        for c in range(C6):
            dst = xt[c, n, hp]
            for w in range(pl):
                dst[w] = 0
            for w in range(pl + W, Wp):
                dst[w] = 0
        for w in range(W):
            src = row[w]
            for c in range(C):
                xt[c, n, hp, pl + w] = src[c]
        for c in range(C, C6):
            for w in range(W):
                xt[c, n, hp, pl + w] = 0


_CFIRST = (njit(cache=True, nogil=True)(_channels_first), jit.parallel(_channels_first))


def backprop_filter_into(df, x, dy, g):
    """df (bfloat16 or float32 [KH, KW, C, O]) = Conv2DBackpropFilter of a unit-stride
    convolution with geometry g, reduced over pixels (bfloat16: in pairs of neighbouring output
    columns): the input channels first (zero-padded, a multiple of MR), dy packed as the
    panels, float32 sums (bfloat16: rounded once at the end); False where it does not apply
    (strides, an odd output width in bfloat16, few channels, non-finite bfloat16 input: the
    caller's kernel runs it). With padding, a non-finite dy meets the padding's zeros: the
    caller checks the result (conv_ops._check_padded)."""
    KH, KW, C, O = df.shape
    N, H, W, _ = x.shape
    xb, f32 = _bits(x), x.dtype == np.float32
    if (g.sh != 1 or g.sw != 1 or (g.ow & 1 and not f32) or C < 8 or O < (16 if f32 else 48)
            or not df.size
            or not dy.size or dy.shape != (N, g.oh, g.ow, O) or (not f32 and _nonfinite(xb))):
        return False
    Hp, Wp = H + g.pt + g.pb, W + g.pl + g.pr
    C6 = (C + MR - 1) // MR * MR
    xt = scratch((C6, N, Hp, Wp), xb.dtype, "bf16_x")
    _CFIRST[1 if xt.size >= 1 << 17 else 0](xb, xt, g.pt, g.pl)
    dy2 = np.ascontiguousarray(_bits(dy)).reshape(-1, O)
    nr = strided_width(O) if f32 else NR
    bp = dy2.reshape(1, -1, O) if f32 and O == nr else pack_b(dy2, nr)   # (dy: its one panel)
    offs = (np.arange(N, dtype=np.int64)[:, None] * (Hp * Wp)
            + np.arange(g.oh, dtype=np.int64) * Wp).reshape(-1)
    n_pan = bp.shape[0]
    acc = scratch((KH * KW * C6, n_pan * nr), np.float32, "bf16_c")
    acc[...] = 0
    kp = g.ow if f32 else g.ow // 2
    _FGRAD[1](xt, bp, offs, KH, KW, g.dh, g.dw, acc,
              max(1, (SEG_ROWS if f32 else SEG_PAIRS) // kp), nr)
    rows = acc.reshape(KH * KW, C6, n_pan * nr)[:, :C, :O]
    if f32:
        df[...] = rows.reshape(KH, KW, C, O)
    else:
        narrow_into(df.reshape(KH * KW * C, O), np.ascontiguousarray(rows).reshape(-1, O))
    return True


SEG_PAIRS = 1024   # panel rows (1024 x 256 bytes a panel) per block of the filter gradient
SEG_ROWS = 2048    # float32: 512 KiB of a panel per block (fewer parallel regions a call)
