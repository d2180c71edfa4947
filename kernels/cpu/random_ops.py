"""CPU kernels: the stateless random ops Keras' layers call every step (Dropout's mask, noise
and augmentation layers), bit for bit TensorFlow's: Philox4x32-10 (Salmon et al., SC11) over
128-bit counters, as tensorflow/core/lib/random/philox_random.h, and its integer-to-[0, 1)
conversions (random_distributions.h: the mantissa bits of a number in [1, 2), minus one).

StatelessRandomUniformV2: element i of a float32/half/bfloat16 output is draw i % 4 of the
generator at counter + i // 4 (two draws per float64), whatever the sharding; the algorithm
input must be Philox (1) or auto-select (3, Philox on CPUs); anything else goes back to
TensorFlow, which raises its own error. StatelessRandomGetKeyCounter scrambles the seed with one
Philox call from a fixed key (GenerateKey in TensorFlow's stateless_random_ops.cc).
"""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import jit
from shape_fns import Unsupported

_MASK = np.uint64(0xFFFFFFFF)
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
PHILOX, AUTO_SELECT = 1, 3


def _philox(c0, c1, c2, c3, k0, k1):
    """Ten Philox4x32 rounds on a counter (four 32-bit words) under a key (two), raising the
    key between rounds. Words are carried in uint64 values below 2**32 (numba widens 32-bit
    arithmetic, so the masks keep them there)."""
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = (((p1 >> np.uint64(32)) ^ c1 ^ k0) & _MASK, p1 & _MASK,
                          ((p0 >> np.uint64(32)) ^ c3 ^ k1) & _MASK, p0 & _MASK)
        k0 = (k0 + _W0) & _MASK
        k1 = (k1 + _W1) & _MASK
    return c0, c1, c2, c3


_philox_j = njit(cache=True, nogil=True, inline="always")(_philox)


def _fill(out, lo, hi, k0, k1, kind):
    """out[i] <- uniform [0, 1) value i. kind 0: float32 (23 mantissa bits per draw), 1: float64
    (20 + 32 bits from two draws), 2: half (10 bits), 3: bfloat16 (7 bits); half and bfloat16
    values are exact in float32 and written as such. (lo, hi): the 128-bit counter. Whole
    groups without a carry in a branch-free parallel loop, then the last partial group (or
    every group when the low half of the counter wraps within the call). The rounds do not
    vectorise (64-bit products; AMD EPYC: 205K float32 values 0.74 ms on one thread, 0.38 on
    two, TensorFlow's kernel 0.64)."""
    n = out.size
    per = 2 if kind == 1 else 4
    bits = 23 if kind == 0 else (10 if kind == 2 else 7)
    mbits = np.uint32((1 << bits) - 1)
    scale = np.float32(1.0 / (1 << bits))
    full = n // per
    groups = (n + per - 1) // per
    vals = np.empty(4, np.uint64)
    # a counter below 2**64 - groups: no carry into the high half within this call
    if lo <= np.uint64(0xFFFFFFFFFFFFFFFF) - np.uint64(groups):
        h0, h1 = hi & _MASK, hi >> np.uint64(32)
        if kind == 1:
            o2 = out[:full * 2].reshape(full, 2)
            for g in prange(full):
                c = lo + np.uint64(g)
                r0, r1, r2, r3 = _philox_j(c & _MASK, c >> np.uint64(32), h0, h1, k0, k1)
                o2[g, 0] = ((r0 & np.uint64(0xFFFFF)) << np.uint64(32) | r1) * 2.0 ** -52
                o2[g, 1] = ((r2 & np.uint64(0xFFFFF)) << np.uint64(32) | r3) * 2.0 ** -52
        else:
            o4 = out[:full * 4].reshape(full, 4)
            for g in prange(full):
                c = lo + np.uint64(g)
                r0, r1, r2, r3 = _philox_j(c & _MASK, c >> np.uint64(32), h0, h1, k0, k1)
                o4[g, 0] = np.float32(np.uint32(r0) & mbits) * scale
                o4[g, 1] = np.float32(np.uint32(r1) & mbits) * scale
                o4[g, 2] = np.float32(np.uint32(r2) & mbits) * scale
                o4[g, 3] = np.float32(np.uint32(r3) & mbits) * scale
        first = full
    else:
        first = 0
    for g in range(first, groups):    # the partial group, or every group across a carry
        c_lo = lo + np.uint64(g)
        c_hi = hi + np.uint64(1) if c_lo < lo else hi
        vals[0], vals[1], vals[2], vals[3] = _philox_j(
            c_lo & _MASK, c_lo >> np.uint64(32), c_hi & _MASK, c_hi >> np.uint64(32), k0, k1)
        for j in range(per):
            i = g * per + j
            if i < n:
                if kind == 1:
                    out[i] = ((vals[2 * j] & np.uint64(0xFFFFF)) << np.uint64(32)
                              | vals[2 * j + 1]) * 2.0 ** -52
                else:
                    out[i] = np.float32(np.uint32(vals[j]) & mbits) * scale


# one compiled form for every size (a serial one too cost another 1.1 s of a first run's
# compiles, for Keras' initializers' small draws)
_fill_p = jit.parallel(_fill)
_KIND = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3}


def _key_counter(key, counter):
    k = int(key[0])
    lo, hi = int(counter[0]), int(counter[1])
    return (np.uint64(lo), np.uint64(hi), np.uint64(k & 0xFFFFFFFF), np.uint64(k >> 32))


@kernel("StatelessRandomUniformV2", dtypes=("float32", "float64", "float16", "bfloat16"),
        type_attr="dtype")
def uniform_v2(inputs, outputs, attrs):
    _, key, counter, alg = inputs
    out = outputs[0]
    if key.dtype != np.uint64 or counter.dtype != np.uint64 or key.shape != (1,) \
            or counter.shape != (2,) or int(alg) not in (PHILOX, AUTO_SELECT):
        raise Unsupported("key_counter_alg")
    if out.size == 0:
        return
    kind = _KIND[out.dtype.name]
    flat = out.reshape(-1)
    dst = flat if kind < 2 else np.empty(out.size, np.float32)
    _fill_p(dst, *_key_counter(key, counter), kind)
    if dst is not flat:
        flat[...] = dst        # exact: at most 10 mantissa bits


def _philox_py(c, k):
    """_philox on Python ints, for the seed's single scramble (calling the numba form from
    Python would compile another specialisation: 0.44 s of a first run, AMD EPYC)."""
    c0, c1, c2, c3 = c
    k0, k1 = k
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & 0xFFFFFFFF, (p0 >> 32) ^ c3 ^ k1,
                          p0 & 0xFFFFFFFF)
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c0, c1, c2, c3


@kernel("StatelessRandomGetKeyCounter", dtypes=("int32", "int64"), type_attr="Tseed")
def get_key_counter(inputs, outputs, attrs):
    s0, s1 = (int(v) & 0xFFFFFFFFFFFFFFFF for v in inputs[0].reshape(-1))
    m = _philox_py((s0 & 0xFFFFFFFF, s0 >> 32, s1 & 0xFFFFFFFF, s1 >> 32),
                   (0x3EC8F720, 0x02461E29))
    outputs[0][0] = m[0] | m[1] << 32
    outputs[1][0] = 0
    outputs[1][1] = m[2] | m[3] << 32
