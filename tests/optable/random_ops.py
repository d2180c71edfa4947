"""Stateless random ops (kernels/cpu/random_ops.py): bit for bit stock's Philox draws, for
seeds of both dtypes (negative halves included), shapes with a partial last group, empty
outputs, explicit keys and counters whose low half wraps during the call."""
import numpy as np
import tensorflow as tf

from . import OpCase

R = tf.raw_ops
FLOATS = ("float32", "float64", "float16", "bfloat16")
SEEDS = [(0, 0), (1, 2), (-1, 7), (2**31 - 1, -2**31), (123456, 654321)]
SHAPES = [[5], [3, 7], [2, 0], [1], [4097], [64, 1600]]


def _uniform(shape, seed, dt):
    return tf.random.stateless_uniform(shape, seed, dtype=tf.as_dtype(dt))


def _uniform_samples(dt, rng):
    out = []
    for i, seed in enumerate(SEEDS):
        sdt = np.int32 if i % 2 else np.int64
        for shape in SHAPES[i % 2::2] + [SHAPES[i]]:
            out.append((shape, np.array(seed, sdt), np.dtype(dt).name))
    return out


def _raw(shape, key, counter, alg, dt):
    return R.StatelessRandomUniformV2(shape=shape, key=key, counter=counter, alg=alg,
                                      dtype=tf.as_dtype(dt))


def _raw_samples(dt, rng):
    k = np.array([987654321987], np.uint64)
    name = np.dtype(dt).name
    return [([11], k, np.array(c, np.uint64), alg, name)
            for c, alg in (([2**64 - 1, 5], 1), ([2**64 - 3, 2**64 - 1], 3), ([7, 0], 1),
                           ([2**63, 2**32 + 1], 3))]


def _key_counter(seed):
    return list(R.StatelessRandomGetKeyCounter(seed=seed))


CASES = [
    OpCase("StatelessRandomUniformV2", "StatelessRandomUniformV2", _uniform, _uniform_samples,
           dtypes=FLOATS, kind="exact",
           errors=lambda dt: [([-1, 3], np.array([1, 2], np.int32), np.dtype(dt).name)]),
    OpCase("StatelessRandomUniformV2_raw", "StatelessRandomUniformV2", _raw, _raw_samples,
           dtypes=FLOATS, kind="exact",
           errors=lambda dt: [([3], np.array([1], np.uint64), np.array([1, 2], np.uint64), 2,
                               np.dtype(dt).name),
                              ([3], np.array([1, 2], np.uint64), np.array([1, 2], np.uint64), 1,
                               np.dtype(dt).name)]),
    OpCase("StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounter", _key_counter,
           lambda dt, rng: [(np.array(s, dt),) for s in SEEDS]
           + [(rng.integers(-2**31, 2**31, 2).astype(dt),) for _ in range(4)],
           dtypes=("int32", "int64"), kind="exact",
           errors=lambda dt: [(np.array([1, 2, 3], dt),), (np.array([[1, 2]], dt),)]),
]
