"""Each program pass on small functions: what it changes, and that results do not change."""
import contextlib
import re

import numpy as np
import pytest

import tf_backend
from tf_backend import functions, numerics
from tf_backend.program import lower, passes
from tf_backend.program.passes import const_fold, dce, fuse_elementwise, identity, shapes
from tests.harness import force_conv_forward


def _program(tf, fn, *args):
    cf = tf.function(fn).get_concrete_function(*args)
    prog = lower.lower(cf.graph, "test")
    return prog


def _run(tf, fn, *args, disable=""):
    import os
    old = os.environ.get("TF_BACKEND_DISABLE_PASSES")
    os.environ["TF_BACKEND_DISABLE_PASSES"] = disable
    functions.clear_cache()
    try:
        with tf_backend.enabled():
            return [np.asarray(t) for t in tf.nest.flatten(tf.function(fn)(*args))]
    finally:
        functions.clear_cache()
        if old is None:
            os.environ.pop("TF_BACKEND_DISABLE_PASSES")
        else:
            os.environ["TF_BACKEND_DISABLE_PASSES"] = old


def test_identity_pass_removes_aliases(tf):
    prog = _program(tf, lambda x: tf.identity(tf.identity(x) * 2.0), tf.ones(3))
    n_alias = sum(n.kind == "alias" for n in prog.nodes)
    assert n_alias >= 2
    identity.run(prog)
    prog.finalize()
    assert not any(n.kind == "alias" for n in prog.nodes)
    assert any("identity" in note for note in prog.notes)


def test_shapes_pass_sets_static_specs(tf):
    prog = _program(tf, lambda x: tf.matmul(x, x) + 1.0, tf.ones((4, 4)))
    shapes.run(prog)
    mm = next(n for n in prog.nodes if n.op == "MatMul")
    assert mm.out_specs[0].shape == (4, 4)


def test_const_fold_folds_constant_subgraphs(tf):
    def f(x):
        c = tf.constant([1.0, 2.0]) * 3.0 + tf.constant([0.5, 0.5])   # constant
        return x + c

    prog = _program(tf, f, tf.ones(2))
    before = len(prog.nodes)
    passes.optimize(prog)
    assert len(prog.nodes) < before
    assert any("const_fold" in note for note in prog.notes)
    ref = np.asarray(f(tf.ones(2)))
    np.testing.assert_array_equal(_run(tf, f, tf.ones(2))[0], ref)


def test_dce_keeps_effects_drops_dead_code(tf):
    v = tf.Variable(0.0)

    def f(x):
        unused = tf.exp(x) * 5.0  # noqa: F841 - dead
        v.assign_add(1.0)         # an effect: must stay
        return x + 1.0

    prog = _program(tf, f, tf.ones(2))
    identity.run(prog)
    prog.finalize()
    dce.run(prog)
    prog.finalize()
    ops = [n.op for n in prog.nodes]
    assert "Exp" not in ops and "AssignAddVariableOp" in ops


@pytest.mark.parametrize("shape,bshape", [((64, 33), (64, 33)), ((2, 128, 96), (2, 128, 1)),
                                          ((2, 128, 96), (96,)), ((300, 500), ())])
def test_fusion_matches_unfused_bit_for_bit_and_stock(tf, shape, bshape):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))
    b = tf.constant(rng.standard_normal(bshape).astype(np.float32))

    def f(x, b):
        y = 0.5 * x * (1.0 + tf.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
        return tf.nn.relu(y - b) * b + tf.sigmoid(x)

    fused = _run(tf, f, x, b)
    unfused = _run(tf, f, x, b, disable="fuse_elementwise")
    np.testing.assert_array_equal(fused[0], unfused[0])
    tf_backend.disable()
    ref = np.asarray(tf.function(f)(x, b))
    np.testing.assert_allclose(fused[0], ref, rtol=1e-5, atol=1e-6)
    prog = _program(tf, f, x, b)
    passes.optimize(prog)
    assert prog.fusions >= 1 and sum(n.kind == "fused" for n in prog.nodes) >= 1


@pytest.mark.parametrize("shape,bshape,axis,keep,op", [
    ((200, 500), (200, 500), 1, False, "sum"),        # the 2-branch benchmark's shape
    ((1, 128, 768), (1, 128, 1), -1, True, "mean"),   # layer-norm's variance
    ((3, 10000), (10000,), -1, False, "sum"),         # rows of more than one 4096-value block
    ((4, 6, 50), (), [1, 2], True, "mean"),           # two trailing axes
])
def test_reduce_fusion_gives_the_unfused_pairs_bits(tf, shape, bshape, axis, keep, op):
    """A chain whose only consumer is a Sum/Mean over trailing axes is one fused node; its
    result has the bits of the chain and the reduction run apart (and of stock, within
    float32 summation error), at one thread and at two; NaN and Inf propagate."""
    from tf_backend import executor
    rng = np.random.default_rng(1)
    xv = rng.standard_normal(shape).astype(np.float32)
    xv.reshape(-1)[7] = np.nan
    xv.reshape(-1)[-3] = np.inf
    x = tf.constant(xv)
    b = tf.constant(rng.standard_normal(bshape).astype(np.float32))
    red = tf.reduce_sum if op == "sum" else tf.reduce_mean

    def f(x, b):
        return red(tf.exp(x * 0.01) * tf.sin(x - b) + tf.square(b), axis=axis, keepdims=keep)

    prog = _program(tf, f, x, b)
    passes.optimize(prog)
    fused = [n for n in prog.nodes if n.kind == "fused"]
    assert [n.fused_ops[-1] for n in fused] == ["Sum" if op == "sum" else "Mean"], prog.dump()
    outs = []
    for threads in (1, 2):
        executor.set_threads(threads)
        try:
            outs.append(_run(tf, f, x, b)[0])
        finally:
            executor.set_threads(executor.default_threads())
    apart = _run(tf, f, x, b, disable="fuse_reduce")[0]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], apart)
    tf_backend.disable()
    ref = np.asarray(tf.function(f)(x, b))
    assert outs[0].shape == ref.shape and outs[0].dtype == ref.dtype
    n = np.prod(shape) // ref.size
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-6 * np.sqrt(n))


def test_fused_nodes_decline_part_by_part_while_their_compiles_run(tf, monkeypatch):
    """A fused node declines (kernels/cpu/deferred.py), so any compile below it may be deferred:
    while a fused reduction's loop compiles the pair runs unfused (our reduction: the fused
    loop's bits), and a part whose own compile is deferred runs on TensorFlow's kernel (stock's
    values, counted as `runtime:compiling`); a fused elementwise group run op by op likewise.
    Before, such a Deferred left the node failed."""
    from kernels.cpu.deferred import Deferred
    from tf_backend import devices, executor
    rng = np.random.default_rng(5)
    x = tf.constant(rng.standard_normal((6, 40)).astype(np.float32))
    b = tf.constant(rng.standard_normal((6, 40)).astype(np.float32))

    def node_of(fn, last):
        prog = _program(tf, fn, x, b)
        passes.optimize(prog)
        (node,) = [n for n in prog.nodes if n.kind == "fused" and n.fused_ops[-1] == last]
        vals = {**prog.consts, **dict(zip(prog.inputs, (np.asarray(x), np.asarray(b))))}
        return node, [vals[s] for s in node.inputs]

    def reduce_fn(x, b):
        return tf.reduce_mean(tf.square(x - b), axis=[1], keepdims=True)

    def chain_fn(x, b):
        return tf.exp(x * 0.5) - b

    def compiling(*a, **k):
        raise Deferred("compiling")

    node, arrays = node_of(reduce_fn, "Mean")
    assert node.fn.declines
    fused = node.fn(arrays, node.out_specs)[0]
    fusion = devices.library("fusion")
    monkeypatch.setattr(fusion, "run_rows_sum", compiling)
    np.testing.assert_array_equal(node.fn(arrays, node.out_specs)[0], fused)
    monkeypatch.setattr(executor, "run_kernel", compiling)
    tf_backend.reset_stats()
    on_tf = node.fn(arrays, node.out_specs)[0]
    assert "runtime:compiling" in tf_backend.stats()["ops"]["Mean"]["reasons"]
    node, arrays = node_of(chain_fn, "Sub")
    assert node.fn.declines
    monkeypatch.setattr(fusion, "plan", lambda *a: None)   # the group runs op by op
    tf_backend.reset_stats()
    chain = node.fn(arrays, node.out_specs)[0]
    assert "runtime:compiling" in tf_backend.stats()["ops"]["Exp"]["reasons"]
    monkeypatch.undo()
    tf_backend.disable()
    np.testing.assert_allclose(on_tf, np.asarray(reduce_fn(x, b)), rtol=1e-6, atol=1e-6)
    assert on_tf.shape == fused.shape and on_tf.dtype == fused.dtype
    np.testing.assert_allclose(chain, np.asarray(chain_fn(x, b)), rtol=1e-6, atol=1e-6)


def test_reduce_fusion_leaves_other_reductions_alone(tf):
    """Not fused: a reduction over leading axes, and a chain whose value is also used."""
    x = tf.ones((64, 96))

    def leading(x):
        return tf.reduce_sum(tf.exp(x) * 2.0, axis=0)

    def shared(x):
        y = tf.exp(x) * 2.0
        return tf.reduce_sum(y, axis=1), y

    for fn in (leading, shared):
        prog = _program(tf, fn, x)
        passes.optimize(prog)
        assert not any(n.fused_ops and n.fused_ops[-1] in ("Sum", "Mean")
                       for n in prog.nodes), prog.dump()
        tf_backend.disable()
        ref = [np.asarray(t) for t in tf.nest.flatten(tf.function(fn)(x))]
        for o, r in zip(_run(tf, fn, x), ref):
            np.testing.assert_allclose(o, r, rtol=1e-6)


def test_fusion_falls_back_unfused_for_general_broadcast(tf):
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 1, 4))
    b = tf.constant(np.arange(10, dtype=np.float32).reshape(5, 2))

    @tf.function(reduce_retracing=True)
    def f(x, b):
        return tf.nn.relu(x - 1.0) * 2.0 + tf.reduce_sum(b)

    tf_backend.disable()
    ref = np.asarray(f(x, b))
    with tf_backend.enabled():
        np.testing.assert_array_equal(np.asarray(f(x, b)), ref)


def test_dump_writes_before_and_after(tf, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_BACKEND_DUMP", str(tmp_path))
    functions.clear_cache()

    @tf.function
    def f(x):
        return tf.nn.relu(tf.identity(x) * 2.0 + 1.0)

    with tf_backend.enabled():
        f(tf.ones(4))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith(".before.txt") for n in files) and any(n.endswith(".after.txt") for n in files)
    after = next(p for p in tmp_path.iterdir() if p.name.endswith(".after.txt")).read_text()
    assert "fused[" in after and "program __inference_f" in after


def test_epilogue_fuses_matmul_bias_activation_residual(tf):
    rng = np.random.default_rng(2)
    x = tf.constant(rng.standard_normal((16, 32)).astype(np.float32))
    w = tf.constant(rng.standard_normal((32, 32)).astype(np.float32) * 0.2)
    b = tf.constant(rng.standard_normal(32).astype(np.float32))

    def f(x):
        return tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b)) + x

    prog = _program(tf, f, x)
    passes.optimize(prog)
    kinds = [(n.kind, n.op) for n in prog.nodes]
    assert ("fused", "MatMul+epilogue") in kinds, kinds
    assert len(prog.nodes) == 1
    ours = _run(tf, f, x)[0]
    plain = _run(tf, f, x, disable="canonicalize,fuse_elementwise,epilogue,inplace")[0]
    np.testing.assert_array_equal(ours, plain)
    tf_backend.disable()
    np.testing.assert_allclose(ours, np.asarray(tf.function(f)(x)), rtol=1e-5, atol=1e-5)


def test_epilogue_producer_declining_at_run_time_falls_back_for_that_call(tf):
    """A Conv2D that declines its values at run time (an Inf in the filter with padding: oneDNN
    skips padded taps, im2col would make NaN) runs on TensorFlow's kernel inside the fused node,
    the epilogue still on ours; counted in the ledger with its reason; the next call is ours."""
    x = tf.constant(np.ones((1, 5, 5, 2), np.float32))
    b = tf.constant(np.full(4, -2.0, np.float32))
    bad = np.ones((3, 3, 2, 4), np.float32)
    bad[0, 0, 0, 0] = np.inf

    def f(x, w):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))

    prog = _program(tf, f, x, tf.constant(bad))
    passes.optimize(prog)
    assert ("fused", "Conv2D+epilogue") in [(n.kind, n.op) for n in prog.nodes]
    fn = tf.function(f)
    ref = [np.asarray(fn(x, tf.constant(w))) for w in (bad, np.ones_like(bad))]
    functions.clear_cache()
    tf_backend.reset_stats()
    with tf_backend.enabled():
        ours = [np.asarray(fn(x, tf.constant(w))) for w in (bad, np.ones_like(bad))]
        conv = tf_backend.stats()["ops"]["Conv2D"]
    for o, r in zip(ours, ref):
        np.testing.assert_array_equal(o, r)
    assert conv["reasons"] == {"runtime:nonfinite_with_padding": 1}, conv


def test_batch_norm_inference_becomes_fused_affine(tf):
    rng = np.random.default_rng(3)
    x = tf.constant(rng.standard_normal((2, 6, 6, 8)).astype(np.float32))
    filt = tf.constant(rng.standard_normal((3, 3, 8, 8)).astype(np.float32) * 0.2)
    scale, offset = [tf.constant(rng.random(8).astype(np.float32) + 0.5) for _ in range(2)]
    mean = tf.constant(rng.standard_normal(8).astype(np.float32))
    var = tf.constant(rng.random(8).astype(np.float32) + 0.1)

    def f(x):
        y = tf.nn.conv2d(x, filt, 1, "SAME")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(y, scale, offset, mean, var, epsilon=1e-3,
                                                   is_training=False)
        return tf.nn.relu(y)

    prog = _program(tf, f, x)
    passes.optimize(prog)
    assert [n.op for n in prog.nodes] == ["Conv2D+epilogue"], prog.dump()
    assert any("FusedBatchNormV3 -> affine" in note for note in prog.notes)
    ours = _run(tf, f, x)[0]
    tf_backend.disable()
    np.testing.assert_allclose(ours, np.asarray(tf.function(f)(x)), rtol=1e-4, atol=1e-5)


def test_inplace_reuses_dead_buffers(tf):
    rng = np.random.default_rng(4)
    a = tf.constant(rng.standard_normal((64, 64)).astype(np.float32))

    def f(a):
        y = tf.matmul(a, a)
        z = tf.reduce_sum(y, axis=0)                      # keeps y alive past the fusion
        return tf.exp(y) * 2.0 + tf.nn.relu(y), z

    prog = _program(tf, f, a)
    passes.optimize(prog)
    ours = _run(tf, f, a)
    tf_backend.disable()
    ref = [np.asarray(t) for t in tf.function(f)(a)]
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-4, atol=1e-3)

    def g(a):
        return tf.nn.relu(tf.exp(tf.transpose(a)) * 3.0 - 1.0)   # writes over the transpose

    prog = _program(tf, g, a)
    passes.optimize(prog)
    assert any(n.inplace is not None for n in prog.nodes), prog.dump()
    got = _run(tf, g, a)[0]
    tf_backend.disable()
    np.testing.assert_allclose(got, np.asarray(tf.function(g)(a)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("alias", [0, 2])
def test_fused_loop_in_place_variant_is_bit_identical(alias):
    """The in-place variant reads the aliased input through `out` (vectorisable) and gives the
    same bits as writing a fresh buffer, with per-column and per-row reads around it."""
    from kernels.cpu import fusion
    rng = np.random.default_rng(7)
    steps = [("AddV2", (("in", 0), ("in", 1)), ()), ("Mul", (("t", 0), ("in", 2)), ()),
             ("Sub", (("t", 1), ("in", 3)), ()), ("Relu", (("t", 2),), ())]
    shapes = [(6, 64), (64,), (6, 64), (6, 1)]
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    pats, rows, cols = fusion.plan(shapes, (6, 64))
    assert pats == ["f", "i", "f", "o"]
    ref = np.empty((6, 64), np.float32)
    fusion.run(fusion.build(np.float32, 4, steps, pats), xs, ref, rows, cols)
    ins = [x.copy() for x in xs]
    out = ins[alias]
    assert fusion.alias_of(ins, out) == alias
    fusion.run(fusion.build(np.float32, 4, steps, pats, alias), ins, out, rows, cols, alias=alias)
    np.testing.assert_array_equal(out, ref)
    for k, x in enumerate(xs):
        if k != alias:
            np.testing.assert_array_equal(ins[k], x)       # the other inputs untouched
    with pytest.raises(ValueError):
        fusion.build(np.float32, 4, steps, pats, 1)       # a per-column input cannot be out


@pytest.mark.parametrize("flat", [False, True])
def test_fused_parallel_loop_is_bit_identical_to_serial(flat):
    """The parallel kernel (the serial loop on one block of rows per thread) gives the serial
    kernel's bits: per-column, per-row, scalar and full inputs, odd row counts, subnormal
    inputs and results flushed to zero in every thread, in place too."""
    from kernels.cpu import fusion
    rng = np.random.default_rng(8)
    steps = [("AddV2", (("in", 0), ("in", 1)), ()), ("Mul", (("t", 0), ("in", 2)), ()),
             ("Sub", (("t", 1), ("in", 3)), ()), ("Relu", (("t", 2),), ())]
    out_shape = (1001,) if flat else (37, 64)
    shapes = ([(1001,), (1,), (1001,), (1001,)] if flat
              else [(37, 64), (64,), (37, 64), (37, 1)])
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    xs[0].reshape(-1)[::7] = np.float32(1e-39)                # subnormal inputs
    xs[2].reshape(-1)[::5] = np.float32(1e-20)                # subnormal products
    pats, rows, cols = fusion.plan(shapes, out_shape)
    assert all(p in "fs" for p in pats) == flat
    for alias in (None, 0):
        loop, ploop = fusion.build(np.float32, 4, steps, pats, alias)
        outs = []
        for threads in (None, 2, 3):
            ins = [x.copy() for x in xs]
            out = ins[0] if alias == 0 else np.empty(out_shape, np.float32)
            args = [a.reshape(-1) for k, a in enumerate(ins) if k != alias]
            if threads is None:
                loop(*args, out.reshape(-1), rows, cols)
            else:
                ploop(*args, out.reshape(-1), rows, cols, threads)
            outs.append(out)
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])
        assert not np.any((outs[0] != 0) & (np.abs(outs[0]) < np.finfo(np.float32).tiny))


def test_schedule_marks_only_programs_with_independent_heavy_nodes(tf):
    a = tf.ones((512, 1024))

    def two_branch(a):      # two big scans (serial kernels), neither depending on the other
        return tf.math.cumsum(a, axis=1) + tf.math.cumsum(a * 2.0, axis=0)

    def chain(a):
        return tf.math.cumsum(tf.math.cumsum(a, axis=1), axis=0)

    def small(a):           # independent, but each cheaper than handing it to a worker
        b = a[:64, :1024]
        return tf.math.cumsum(b, axis=1) + tf.math.cumsum(b * 2.0, axis=0)

    for fn, want in ((two_branch, True), (chain, False), (small, False)):
        p = _program(tf, fn, a)
        passes.optimize(p)
        assert p.parallel is want, fn.__name__


def test_schedule_keeps_self_splitting_nodes_serial_on_small_machines(tf, monkeypatch):
    """Two independent GEMMs, or two elementwise chains big enough for numba's team: concurrent
    only where they do not already use every core by themselves."""
    from tf_backend.program.passes import schedule
    a = tf.ones((512, 512))

    def two_gemms(a):
        return tf.matmul(a, a), tf.matmul(a * 2.0, a)

    def two_chains(a):
        return tf.exp(a * 0.01) * tf.sin(a), tf.cos(a * 0.5) + tf.sin(a)

    def two_summed_chains(a):    # fuse_reduce: small outputs, the loops run over the inputs
        return (tf.reduce_sum(tf.exp(a * 0.01) * tf.sin(a), axis=1)
                + tf.reduce_sum(tf.cos(a * 0.5) + tf.sin(a), axis=1))

    for fn, op in ((two_gemms, "MatMul"), (two_chains, "Fused"), (two_summed_chains, "Fused")):
        for serial in (True, False):
            monkeypatch.setattr(schedule, "SERIAL_SPLITTING", serial)
            p = _program(tf, fn, a)
            passes.optimize(p)
            assert p.parallel is not serial, (fn.__name__, serial)
            assert [n.heavy for n in p.nodes if n.op.startswith(op)] == [not serial] * 2


def test_concurrent_heavy_nodes_leave_blas_thread_count_alone(tf, monkeypatch):
    """Concurrent branches (elementwise and, where BLAS nodes may be heavy, GEMMs) give stock's
    results and leave numpy's BLAS with its thread count (once changed from two threads at
    once, OpenBLAS stayed at one thread: every later GEMM at half speed)."""
    from threadpoolctl import threadpool_info

    from tf_backend import executor
    from tf_backend.program.passes import schedule

    def blas_threads():   # every OpenBLAS loaded (numpy's, and scipy's where Keras loaded it)
        return {i["filepath"]: i["num_threads"] for i in threadpool_info()
                if i["internal_api"] == "openblas"}

    rng = np.random.default_rng(0)
    x, y = [tf.constant(rng.standard_normal((200, 500)).astype(np.float32)) for _ in range(2)]
    w = tf.constant(rng.standard_normal((500, 300)).astype(np.float32))

    def f(x, y):
        a = tf.reduce_sum(tf.exp(x * 0.01) * tf.sin(x) + tf.cos(x * 0.5), axis=1)
        c = tf.reduce_sum(tf.exp(y * 0.01) * tf.sin(y) + tf.cos(y * 0.5), axis=1)
        return a + c, tf.matmul(x, w) + tf.matmul(y * 2.0, w)

    before = blas_threads()
    assert before, "no OpenBLAS found"
    fn = tf.function(f)
    ref = [np.asarray(t) for t in fn(x, y)]
    executor.set_threads(2)
    try:
        for serial in (True, False):
            monkeypatch.setattr(schedule, "SERIAL_SPLITTING", serial)
            functions.clear_cache()
            with tf_backend.enabled():
                for _ in range(20):
                    got = [np.asarray(t) for t in fn(x, y)]
            for g, r in zip(got, ref):
                np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-4)
            after = blas_threads()
            assert {k: after[k] for k in before} == before
    finally:
        executor.set_threads(executor.default_threads())
        functions.clear_cache()


def test_heavy_blas_node_beside_another_is_held_to_one_thread():
    """Beside another heavy node a BLAS-backed node runs with numba's (thread-local) count and
    numpy's OpenBLAS at one thread; both are restored on exit, OpenBLAS once no node holds it."""
    import threading
    import types

    import numba

    from kernels.cpu import gemm as blas
    from tf_backend import executor
    if not blas.available():
        pytest.skip("numpy's BLAS is not scipy-openblas")
    get = blas._threads["get"]
    before = get()
    gemm, ew = types.SimpleNamespace(op="Conv2D+epilogue"), types.SimpleNamespace(op="Fused")
    seen = {}

    def other():
        alone = executor._heavy_enter(gemm)           # the only heavy node: BLAS keeps its threads
        seen["alone"] = alone
        seen["blas_alone"] = get()
        executor._heavy_exit(alone)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        seen["numba_before"] = numba.get_num_threads()
        first = executor._heavy_enter(ew)
        second = executor._heavy_enter(gemm)          # beside it: one thread
        seen["beside"] = second
        seen["numba_inside"] = numba.get_num_threads()
        seen["blas_inside"] = get()
        executor._heavy_exit(second)
        seen["blas_after"] = get()
        seen["numba_after"] = numba.get_num_threads()
        executor._heavy_exit(first)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["alone"] is None and seen["beside"] is not None
    assert seen["blas_alone"] == before and seen["blas_inside"] == 1
    assert seen["blas_after"] == before and get() == before
    assert seen["numba_inside"] == 1 and seen["numba_after"] == seen["numba_before"]
    assert executor._heavy["active"] == 0


def test_batch_reads_one_call_for_inference_reads_only(tf):
    """Inference: every ReadVariableOp becomes one TensorFlow call; values follow assignments
    made between calls. A program that writes a variable keeps its reads in program order."""
    from tf_backend.program.passes import batch_reads
    rng = np.random.default_rng(3)
    w = tf.Variable(rng.standard_normal((8, 4)).astype(np.float32))
    b = tf.Variable(rng.standard_normal((4,)).astype(np.float32))
    k = tf.Variable(3, dtype=tf.int32)
    x = tf.constant(rng.standard_normal((2, 8)).astype(np.float32))

    def f(x):
        return tf.nn.relu(tf.matmul(x, w) + b) * tf.cast(k, tf.float32)

    prog = _program(tf, f, x)
    passes.optimize(prog)
    reads = [n for n in prog.nodes if n.kind == "reads"]
    assert len(reads) == 1 and len(reads[0].outputs) == 3, prog.dump()
    assert not any(n.kind == "stock" for n in prog.nodes), prog.dump()

    fn = tf.function(f)
    tf_backend.disable()
    ref = np.asarray(fn(x))
    functions.clear_cache()
    with tf_backend.enabled():
        np.testing.assert_allclose(np.asarray(fn(x)), ref, rtol=1e-6)
        w.assign(w * 2.0)
        k.assign(5)
        got = np.asarray(fn(x))
    tf_backend.disable()
    np.testing.assert_allclose(got, np.asarray(fn(x)), rtol=1e-6)
    assert not np.allclose(got, ref)

    def g(x):
        y = tf.matmul(x, w) + b
        b.assign_add(tf.ones_like(b))                    # a write: reads stay in order
        return y + b

    prog = _program(tf, g, x)
    batch_reads.run(prog)
    assert not any(n.kind == "reads" for n in prog.nodes)
    functions.clear_cache()
    b0 = b.numpy()
    with tf_backend.enabled():
        got = np.asarray(tf.function(g)(x))
    b.assign(b0)
    tf_backend.disable()
    # products summed in another order than stock's (oneDNN's or Eigen's, by CPU)
    np.testing.assert_allclose(got, np.asarray(tf.function(g)(x)), rtol=1e-5, atol=1e-5)


def test_read_variables_one_kernel_same_values_copies_and_errors_as_stock(tf):
    """tf_adapter.read_variables uses `_ReadVariablesOp` on this TensorFlow: the values of each
    variable; a copy-on-read variable (after a sparse update) read as a copy that later
    in-place updates leave alone; an uninitialized handle or a wrong dtype raise stock
    ReadVariableOp's error class and message."""
    from tf_backend import tf_adapter as tfa
    assert tfa._multi_read_ok()
    f32, i32 = tf.float32.as_datatype_enum, tf.int32.as_datatype_enum
    a = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    k = tf.Variable(7, dtype=tf.int32)
    c = tf.Variable(np.zeros(4, np.float32))
    c.scatter_nd_update([[1]], [5.0])                    # copy-on-read from now on
    calls = []
    orig = tfa.execute_stock

    def spy(op, *rest):
        calls.append(op)
        return orig(op, *rest)

    tfa.execute_stock = spy
    try:
        got = tfa.read_variables([a.handle, k.handle, c.handle], [f32, i32, f32])
    finally:
        tfa.execute_stock = orig
    assert calls == ["_ReadVariablesOp"]
    np.testing.assert_array_equal(got[0].numpy(), a.numpy())
    assert got[1].numpy() == 7 and got[1].dtype == tf.int32
    held = got[2].numpy().copy()
    c.scatter_nd_update([[2]], [9.0])
    np.testing.assert_array_equal(got[2].numpy(), held)
    np.testing.assert_array_equal(c.numpy(), [0, 5, 9, 0])

    uninit = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2],
                                    shared_name="tfb_read_variables_uninit")
    for handles, enums in (([a.handle, uninit], [f32, f32]), ([a.handle, k.handle], [f32, f32])):
        with pytest.raises(tf.errors.OpError) as ours:
            tfa.read_variables(handles, enums)
        with pytest.raises(tf.errors.OpError) as stock:
            for h, e in zip(handles, enums):
                tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.dtypes.as_dtype(e))
        assert type(ours.value) is type(stock.value)
        def core(e):      # the message without TensorFlow's function/op location decorations
            return re.sub(r"^\{\{function_node [^}]*\}\} ", "", e.message).split("\n")[0]
        assert core(stock.value).split(" [Op:")[0] == core(ours.value).split(" [Op:")[0]


def test_inplace_never_writes_a_buffer_still_read_through_a_view(tf):
    """exp(reshape(a)) may not reuse a's buffer while `a` is read again (found by the program
    exporter's tests: the reshape is a zero-copy view of a)."""
    rng = np.random.default_rng(5)
    x = tf.constant(rng.standard_normal((4, 8)).astype(np.float32))
    w = tf.constant(rng.standard_normal((8, 8)).astype(np.float32))

    def f(x):
        a = tf.matmul(x, w)
        c = tf.exp(tf.reshape(a, [-1]))
        return c, a * 3.0

    def g(x):                                       # the view is the only reader: reuse is fine
        return tf.exp(tf.reshape(tf.matmul(x, w), [-1])) * 2.0

    for fn in (f, g):
        got = _run(tf, fn, x)
        tf_backend.disable()
        ref = [np.asarray(t) for t in tf.nest.flatten(tf.function(fn)(x))]
        for o, r in zip(got, ref):
            np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)
    prog = _program(tf, g, x)
    passes.optimize(prog)
    assert any(n.inplace is not None for n in prog.nodes), prog.dump()


def _bn_vars(tf, rng, c):
    mk = lambda v: tf.Variable(v.astype(np.float32))  # noqa: E731
    return (mk(rng.random(c) + 0.5), mk(rng.standard_normal(c)), mk(rng.standard_normal(c)),
            mk(rng.random(c) + 0.1))


def test_memo_computes_weight_derived_values_once_per_weight_change(tf, monkeypatch):
    """Per-channel values computed from variables only (Keras-style batch-norm parameters,
    a reshaped bias) are rerun only when a variable's buffer changes: after assign,
    assign_add, an optimizer step and a scatter update (copy-on-read), results follow stock."""
    from tf_backend import executor
    from tf_backend.program.passes import memo
    rng = np.random.default_rng(11)
    gamma, beta, mean, var = _bn_vars(tf, rng, 8)
    filt = tf.Variable(rng.standard_normal((3, 3, 4, 8)).astype(np.float32) * 0.3)
    bias = tf.Variable(rng.standard_normal(8).astype(np.float32))
    x = tf.constant(rng.standard_normal((1, 6, 6, 4)).astype(np.float32))

    def f(x):
        y = tf.nn.conv2d(x, filt, 1, "SAME") + tf.squeeze(tf.reshape(bias, [1, 1, 1, 8]))
        inv = tf.math.rsqrt(tf.reshape(var, [1, 1, 1, 8]) + 1e-3) * tf.reshape(gamma, [1, 1, 1, 8])
        return tf.nn.relu(y * inv + (tf.reshape(beta, [1, 1, 1, 8])
                                     - tf.reshape(mean, [1, 1, 1, 8]) * inv))

    prog = _program(tf, f, x)
    passes.optimize(prog)
    memos = [n for n in prog.nodes if n.kind == "memo"]
    assert len(memos) == 1, prog.dump()
    inner = {n.op for n in memos[0].attrs["nodes"]}
    assert "Reshape" in inner and "Squeeze" in inner, prog.dump()
    assert any(op == "Reshape" for op, (n, _) in prog.op_counts.items()), "ledger lost them"
    assert "Conv2D+epilogue" in [n.op for n in prog.nodes]

    ran = []
    orig = executor.step

    def counting(node, vals, failed):
        ran.append(node.op)
        return orig(node, vals, failed)

    monkeypatch.setattr(executor, "step", counting)
    fn = tf.function(f)

    def check(tag):
        with tf_backend.enabled():
            ours = np.asarray(fn(x))
        tf_backend.disable()
        np.testing.assert_allclose(ours, np.asarray(fn(x)), rtol=1e-5, atol=1e-5, err_msg=tag)
        return ours

    functions.clear_cache()
    first = check("first call")
    ran.clear()
    check("unchanged weights")
    assert "Squeeze" not in ran and "Reshape" not in ran, ran      # a hit: nothing recomputed
    gamma.assign(gamma * 3.0)
    ran.clear()
    second = check("after assign")
    assert "Reshape" in ran
    assert not np.allclose(first, second)
    bias.assign_add(tf.ones(8))
    check("after assign_add")
    opt = tf.keras.optimizers.SGD(0.5) if hasattr(tf, "keras") else None
    if opt is not None:
        opt.apply_gradients([(tf.ones(8), beta)])
        check("after an optimizer step")
    mean.scatter_nd_update([[0], [5]], [4.0, -4.0])     # puts the variable in copy-on-read mode
    check("after a scatter update")
    check("again, copy-on-read")

    assert memo.MIN_NODES >= 2


def test_memo_error_in_a_weight_derived_node_names_that_node(tf):
    """A failing node inside the memo region raises the stock error class naming the node,
    and the next call (weights fixed) works."""
    rng = np.random.default_rng(2)
    _, beta, mean, var = _bn_vars(tf, rng, 6)
    gamma = tf.Variable(rng.random(6).astype(np.float32), shape=tf.TensorShape([None]))
    x = tf.constant(rng.standard_normal((2, 3, 3, 6)).astype(np.float32))

    def f(x):
        g = tf.reshape(gamma, [1, 1, 1, 6])
        return x * tf.reshape(var, [1, 1, 1, 6]) * g + tf.reshape(beta + mean, [1, 1, 1, 6]) + g

    prog = _program(tf, f, x)
    passes.optimize(prog)
    assert any(n.kind == "memo" for n in prog.nodes), prog.dump()
    fn = tf.function(f)
    functions.clear_cache()
    with tf_backend.enabled():
        ok = np.asarray(fn(x))
        gamma.assign(np.ones(7, np.float32))
        with pytest.raises(tf.errors.InvalidArgumentError, match="Reshape") as e:
            fn(x)
        assert "7 values" in str(e.value)
        gamma.assign(np.ones(6, np.float32))
        again = np.asarray(fn(x))
    tf_backend.disable()
    np.testing.assert_allclose(again, np.asarray(fn(x)), rtol=1e-5, atol=1e-6)
    assert not np.allclose(ok, again)


@pytest.mark.parametrize("case", ["conv3x3", "conv1x1_7x7", "matmul", "conv5x5_packed",
                                  "depthwise"])
def test_kept_weight_forms_follow_variable_updates(tf, monkeypatch, case):
    """An inference program's weight variable has its derived form (a 3x3 filter's Winograd
    transform; a few-row product's transposed weight, in a 1x1 convolution and in a MatMul;
    a wide filter's packed panels on the float32 tiles; a depthwise filter's tiled taps) made
    once and kept; assign, assign_add and an optimizer step all show in the next call.
    Eager calls and a training function (it writes a variable) never keep one."""
    from kernels.cpu import bf16_gemm, filter_cache
    rng = np.random.default_rng(4)
    if case == "conv5x5_packed" and not bf16_gemm.runs_f32():
        pytest.skip("no AVX-512F: float32 convolutions run as im2col + BLAS here")
    if case in ("conv5x5_packed", "depthwise"):
        kind = "packed" if case == "conv5x5_packed" else "dw_tiled"
        c, o = (16, 96) if case == "conv5x5_packed" else (32, 1)
        n = 25 * c
        filt = tf.Variable(rng.uniform(-1, 1, (5, 5, c, o)).astype(np.float32))
        bias = tf.Variable(rng.uniform(-1, 1, c * o if o == 1 else o).astype(np.float32))
        x = tf.constant(rng.uniform(-1, 1, (1, 20, 20, c)).astype(np.float32))
    elif case == "matmul":
        kind, n = "transposed", 300
        filt = tf.Variable(rng.uniform(-1, 1, (300, 64)).astype(np.float32))
        bias = tf.Variable(rng.uniform(-1, 1, 64).astype(np.float32))
        x = tf.constant(rng.uniform(-1, 1, (8, 300)).astype(np.float32))
    else:
        k = 3 if case == "conv3x3" else 1
        c = 128 if k == 3 else 16   # (conv_ops keeps Winograd transforms of deep layers)
        kind, n = ("winograd" if k == 3 else "transposed"), k * k * c
        filt = tf.Variable(rng.uniform(-1, 1, (k, k, c, 64)).astype(np.float32))
        bias = tf.Variable(rng.uniform(-1, 1, 64).astype(np.float32))
        x = tf.constant(rng.uniform(-1, 1, (1, 20 if k == 3 else 7, 20 if k == 3 else 7, c))
                        .astype(np.float32))
    step_var = tf.Variable(0.0)
    if case == "conv3x3":   # the kept form is Winograd's (im2col, measured faster, keeps none)
        force_conv_forward(monkeypatch, x.shape, filt.shape, "winograd")

    def f(x):
        if case == "matmul":
            return tf.matmul(x, filt) + bias
        if case == "depthwise":
            return tf.nn.depthwise_conv2d(x, filt, [1, 1, 1, 1], "SAME") + bias
        return tf.nn.conv2d(x, filt, 1, "SAME") + bias

    def train(x):
        step_var.assign_add(1.0)
        return f(x)

    prog = _program(tf, f, x)
    passes.optimize(prog)
    convs = [n for n in prog.nodes if n.op.startswith(("Conv2D", "MatMul", "Depthwise"))]
    assert convs and any(n.kind == "reads" for n in prog.nodes), prog.dump()
    fn, tr = tf.function(f), tf.function(train)
    filter_cache.clear()
    functions.clear_cache()
    tol = dict(rtol=1e-4, atol=1e-4 * np.sqrt(n) / 10)
    with tf_backend.enabled():
        f(x)
        tr(x)
    assert not filter_cache.entries(), "an eager call or a training function cached a filter"
    opt = tf.keras.optimizers.SGD(0.1)
    for step in range(4):
        with tf_backend.enabled():
            ours, eager = np.asarray(fn(x)), np.asarray(f(x))
        # the filter cached before the update stays (until evicted) beside the new one
        assert filter_cache.entries(kind) == (1 if step == 0 else 2), "filter not cached"
        tf_backend.disable()
        ref = np.asarray(fn(x))
        np.testing.assert_allclose(ours, ref, **tol)
        np.testing.assert_allclose(eager, ref, **tol)
        filter_cache.clear()
        with tf_backend.enabled():
            fn(x)                   # cache the filter the update below must not write in place
        if step == 0:
            filt.assign(filt * -2.0)
        elif step == 1:
            filt.assign_add(tf.ones_like(filt))
        elif step == 2:
            opt.apply_gradients([(tf.ones_like(filt), filt)])
    filter_cache.clear()


def test_clear_caches_drops_programs_filter_transforms_and_buffers(tf, monkeypatch):
    """clear_caches empties every cache of ours (compiled programs with their memo states,
    Winograd transforms holding filter views, the buffer pool); the next call compiles again
    and gives the same result."""
    from kernels.cpu import filter_cache
    from tf_backend import alloc
    rng = np.random.default_rng(6)
    filt = tf.Variable(rng.uniform(-1, 1, (3, 3, 128, 16)).astype(np.float32))
    bias = tf.Variable(rng.uniform(-1, 1, 16).astype(np.float32))
    x = tf.constant(rng.uniform(-1, 1, (1, 20, 20, 128)).astype(np.float32))
    fn = tf.function(lambda x: tf.nn.conv2d(x, filt, 1, "SAME") + bias)
    force_conv_forward(monkeypatch, x.shape, filt.shape, "winograd")
    functions.clear_cache()
    with tf_backend.enabled():
        first = np.asarray(fn(x))
    alloc.empty((512, 1024), np.float32)      # a pooled buffer (>= alloc.POOL_MIN)
    assert filter_cache.entries() and functions._cache and alloc.pool_stats()[0]
    tf_backend.clear_caches()
    assert not filter_cache.entries() and not functions._cache and alloc.pool_stats() == (0, 0)
    with tf_backend.enabled():
        again = np.asarray(fn(x))
    np.testing.assert_array_equal(first, again)
    assert filter_cache.entries() and functions._cache
    tf_backend.clear_caches()


def test_one_executor_thread_means_one_numba_thread_in_programs(tf, monkeypatch):
    """set_threads(1): the program's kernels (here the GEMM team) run on one thread; the caller's
    numba count is back afterwards. With more threads the team may use numba's pool."""
    import numba

    from kernels.cpu import gemm
    from tf_backend import executor
    seen = []
    orig = gemm.matmul

    def spy(a, b, out, b_stays=False):
        seen.append(numba.get_num_threads())
        return orig(a, b, out, b_stays)

    monkeypatch.setattr(gemm, "matmul", spy)
    rng = np.random.default_rng(10)
    x = tf.constant(rng.standard_normal((256, 256)).astype(np.float32))
    w = tf.constant(rng.standard_normal((256, 256)).astype(np.float32))
    before = numba.get_num_threads()
    try:
        for n in (1, 2):
            executor.set_threads(n)
            got = _run(tf, lambda x: tf.nn.relu(tf.matmul(x, w)), x)[0]
            assert numba.get_num_threads() == before
        np.testing.assert_allclose(got, np.maximum(x.numpy() @ w.numpy(), 0), rtol=1e-4,
                                   atol=1e-3)
    finally:
        executor.set_threads(executor.default_threads())
    assert seen[0] == 1 and seen[-1] == before


def test_group_stock_runs_tensorflow_nodes_together_and_keeps_results(tf):
    """An SGD step interleaves our products with TensorFlow's reads and assignments; after
    group_stock the reads come first and the assignments run back to back at the end (each
    variable's effects in program order; different variables' need none), with stock's
    results."""
    rng = np.random.default_rng(3)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((8, 6), (6,), (6, 4), (4,))]

    def make():
        ws = [tf.Variable(v) for v in init]

        def step(x):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, ws[0]) + ws[1])
                loss = tf.reduce_sum(tf.matmul(h, ws[2]) + ws[3])
            for w, g in zip(ws, tape.gradient(loss, ws)):
                w.assign_sub(0.1 * g)
            return loss
        return ws, step

    x = tf.constant(rng.standard_normal((5, 8)).astype(np.float32))
    ws, step = make()
    prog = _program(tf, step, x)
    passes.optimize(prog)
    nodes = list(prog.counted_nodes())   # a stock_runs group's nodes in its place
    kinds = ["tf" if n.kind in ("stock", "reads") else "ours" for n in nodes]
    # (computed_updates: each AssignSubVariableOp is an AssignVariableOp of a value we compute)
    assigns = [n.name for n in nodes if n.op in ("AssignSubVariableOp", "AssignVariableOp")]
    assert len(assigns) == 4
    first = kinds.index("ours")
    # (the last bias's gradient is a constant: its assignment needs none of our nodes, yet it
    # waits for the others rather than joining the reads)
    assert all(n.op == "ReadVariableOp" for n in nodes[:first] if n.kind == "stock")
    tail = kinds[len(kinds) - len(assigns):]
    assert tail == ["tf"] * len(assigns), kinds          # the assignments run together, last
    assert any(note.startswith("group_stock") for note in prog.notes)

    sws, sstep = make()
    stock = [float(tf.function(sstep)(x)) for _ in range(3)]
    functions.clear_cache()
    with tf_backend.enabled():
        ours = [float(tf.function(step)(x)) for _ in range(3)]
    np.testing.assert_allclose(ours, stock, rtol=1e-5)
    for a, b in zip(ws, sws):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_read_runs_one_call_per_run_in_a_program_that_writes(tf):
    """A training step's consecutive reads become one `reads` node per run; a read after an
    update of the same variable is answered by the program (forward_writes); results,
    variables and the ledger's read counts (one per TensorFlow read left) are stock's."""
    rng = np.random.default_rng(5)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((8, 6), (6,), (6, 4), (4,))]

    def make():
        ws = [tf.Variable(v) for v in init]
        m = tf.Variable(np.zeros((6, 4), np.float32))

        def step(x):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, ws[0]) + ws[1])
                loss = tf.reduce_sum(tf.matmul(h, ws[2]) + ws[3])
            grads = tape.gradient(loss, ws)
            m.assign_add(0.5 * grads[2] - 0.1 * m)   # a slot updated, then read again
            for w, g in zip(ws, grads):
                w.assign_sub(0.1 * g)
            ws[2].assign_sub(0.01 * m)
            return loss + tf.reduce_sum(m)
        return ws, m, step

    x = tf.constant(rng.standard_normal((5, 8)).astype(np.float32))
    ws, m, step = make()
    prog = _program(tf, step, x)
    passes.optimize(prog)
    runs = [n for n in prog.nodes if n.kind == "reads"]
    assert runs and max(len(n.outputs) for n in runs) >= 4, prog.dump()
    assert any(note.startswith("read_runs") for note in prog.notes)
    # the read of m after its assign_add is answered by the program (forward_writes): an
    # alias of m's first read plus the update, computed before the assignment
    # (stock_runs may put the assignments and reads in one TensorFlow call: its nodes counted
    # in its place)
    nodes = list(prog.counted_nodes())
    index = {id(n): i for i, n in enumerate(nodes)}
    add = next(n for n in nodes if n.op == "AssignAddVariableOp")
    forwarded = [n for n in nodes if n.name.endswith("/forwarded")]
    assert len(forwarded) == 1 and forwarded[0].op == "AddV2", prog.dump()
    assert any(note.startswith("forward_writes") for note in prog.notes)
    later_reads = [n for n in nodes if n.kind in ("reads", "stock")
                   and n.op == "ReadVariableOp" and add.inputs[0] in n.inputs
                   and index[id(n)] > index[id(add)]]
    assert not later_reads, prog.dump()

    sws, sm, sstep = make()
    stock = [float(tf.function(sstep)(x)) for _ in range(3)]
    functions.clear_cache()
    tf_backend.reset_stats()
    with tf_backend.enabled():
        ours = [float(tf.function(step)(x)) for _ in range(3)]
    np.testing.assert_allclose(ours, stock, rtol=1e-5)
    for a, b in zip(ws + [m], sws + [sm]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    # every read still counted, one per variable read, on TensorFlow
    reads = tf_backend.stats()["ops"]["ReadVariableOp"]
    left = sum(len(n.outputs) if n.kind == "reads" else 1 for n in nodes
               if n.kind in ("reads", "stock") and n.op == "ReadVariableOp")
    assert reads.get("fallback", 0) == 3 * left, reads


def test_stock_runs_variable_ops_in_one_call_with_stock_results(tf):
    """An Adam-like step's assignments and the reads between them (a slot read back after its
    update, a weight's shape) become TensorFlow groups, one call each, their ops in program
    order: results, variables and the ledger's per-op counts are stock's, and a failing
    assignment inside a group raises TensorFlow's error class."""
    rng = np.random.default_rng(11)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((64, 128), (128,), (128, 8))]

    def make():
        ws = [tf.Variable(v) for v in init]
        ms = [tf.Variable(np.zeros_like(v)) for v in init]
        step_n = tf.Variable(np.int64(0))

        def step(x):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, ws[0]) + ws[1])
                loss = tf.reduce_mean(tf.matmul(h, ws[2]))
            grads = tape.gradient(loss, ws)
            step_n.assign_add(1)
            for w, m, g in zip(ws, ms, grads):
                m.assign_add(0.1 * (g - m))
                w.assign_sub(0.01 * m / (1.0 + tf.cast(step_n, tf.float32)))
            shape = tf.raw_ops.VariableShape(input=ws[0].handle)
            return loss, shape, ws[2].read_value()
        return ws, ms, step_n, step

    x = tf.constant(rng.standard_normal((16, 64)).astype(np.float32))
    ws, ms, n, step = make()
    prog = _program(tf, step, x)
    passes.optimize(prog)
    groups = [g for g in prog.nodes if "group" in g.attrs]
    assert groups and any(note.startswith("stock_runs") for note in prog.notes), prog.dump()
    members = [m.op for g in groups for m in g.attrs["nodes"]]
    assert members.count("AssignAddVariableOp") >= 2, members
    # (group_stock: the slots' updates and read-backs run as one TensorFlow run, the weights'
    # updates, which wait on our kernels reading the slots, as the next one, back to back)
    # (computed_updates: a weight's update may be an AssignVariableOp of the value our kernels
    # computed; it keeps its node's name)
    kinds = [("sub" if "AssignSubVariableOp" in n.name else "tf")
             if n.kind in ("stock", "reads") else "ours" for n in prog.counted_nodes()]
    first, last = kinds.index("sub"), len(kinds) - 1 - kinds[::-1].index("sub")
    assert "ours" not in kinds[first:last], kinds
    # no variable op of a group is also left outside it
    assert not any(g in prog.nodes for grp in groups for g in grp.attrs["nodes"])

    sws, sms, sn, sstep = make()
    ref = [[np.asarray(t) for t in tf.function(sstep)(x)] for _ in range(3)]
    # the pass changes no bits: the same program without it
    uws, ums, un, ustep = make()
    unpassed = [_run(tf, ustep, x, disable="stock_runs") for _ in range(3)]
    functions.clear_cache()
    tf_backend.reset_stats()
    with tf_backend.enabled():
        got = [[np.asarray(t) for t in tf.function(step)(x)] for _ in range(3)]
    for g, u, r in zip(got, unpassed, ref):
        for a, b, c in zip(g, u, r):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-4)   # our products' rounding
    for a, b, c in zip(ws + ms + [n], uws + ums + [un], sws + sms + [sn]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-4, atol=1e-6)
    ops = tf_backend.stats()["ops"]
    # per call: ws[2] and the small slots, read again, keep their updates (forward_writes
    # answers the reads); ws[0], ws[1] and ms[0] (8192 elements) are assigned their values
    assert ops["AssignSubVariableOp"].get("fallback", 0) == 1 * 3, ops["AssignSubVariableOp"]
    assert ops["AssignAddVariableOp"].get("fallback", 0) == 3 * 3, ops["AssignAddVariableOp"]
    assert ops["AssignVariableOp"].get("fallback", 0) == 3 * 3, ops["AssignVariableOp"]
    # a group whose function cannot be built runs its ops one by one, with the same results
    from tf_backend import tf_adapter

    refused = []

    def refuse(group):
        refused.append(group)
        raise ValueError("no function for this group")
    fws, fms, fn_, fstep = make()
    functions.clear_cache()
    tf_adapter._group_fdefs.clear()
    tf_adapter._groups_here.clear()
    old = tf_adapter._group_fdef
    tf_adapter._group_fdef = refuse
    try:
        with tf_backend.enabled():
            alone = [[np.asarray(t) for t in tf.function(fstep)(x)] for _ in range(3)]
    finally:
        tf_adapter._group_fdef = old
        tf_adapter._group_fdefs.clear()
        tf_adapter._groups_here.clear()
    assert len(refused) == len(groups)   # each group tried once, then its ops alone
    for g, a in zip(got, alone):
        for p, q in zip(g, a):
            np.testing.assert_array_equal(p, q)
    for a, b in zip(ws + ms + [n], fws + fms + [fn_]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert ops["AssignAddVariableOp"].get("fallback", 0) == 3 * 3, ops["AssignAddVariableOp"]

    v = tf.Variable(np.zeros((2, 3), np.float32))
    w = tf.Variable(np.zeros((2, 3), np.float32))

    us = [tf.Variable(np.zeros((2, 3), np.float32)) for _ in range(3)]

    def bad(y):
        v.assign_add(tf.ones((2, 3)))
        w.assign_add(y)          # wrong shape at run time, inside the group
        v.assign_sub(tf.ones((2, 3)))
        for u in us:
            u.assign_add(tf.ones((2, 3)))
        return tf.constant(1.0)
    sig = [tf.TensorSpec([None, None], tf.float32)]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(bad, input_signature=sig)(tf.ones((3, 4)))
    functions.clear_cache()
    with tf_backend.enabled():
        prog = _program(tf, bad, tf.TensorSpec([None, None], tf.float32))
        passes.optimize(prog)
        assert any("group" in g.attrs for g in prog.nodes), prog.dump()
        with pytest.raises(tf.errors.InvalidArgumentError, match="AssignAddVariableOp"):
            tf.function(bad, input_signature=sig)(tf.ones((3, 4)))


def test_forward_writes_reads_after_updates_match_stock(tf):
    """Reads after assign_add/assign_sub are answered by the program and equal stock's; a read
    after assign(), or after another op on the handle (a gather), stays a TensorFlow read; an
    update of the wrong shape still fails with TensorFlow's error."""
    rng = np.random.default_rng(9)
    init = rng.standard_normal((4, 3)).astype(np.float32)

    def make():
        v = tf.Variable(init)
        n = tf.Variable(np.int64(5))

        def step(x):
            a = v.read_value()
            v.assign_add(x)
            b = v.read_value()                 # forwarded: a + x
            v.assign_sub(0.5 * b)
            c = v.read_value()                 # forwarded: b - 0.5 b
            g = tf.gather(v, [2, 0])           # ResourceGather: the handle's value is forgotten
            d = v.read_value()                 # a TensorFlow read again
            v.assign(c * 3.0)
            e = v.read_value()                 # after assign(): a TensorFlow read
            n.assign_add(2)
            return a, b, c, g, d, e, n.read_value()
        return v, n, step

    x = tf.constant(rng.standard_normal((4, 3)).astype(np.float32))
    v, n, step = make()
    prog = _program(tf, step, x)
    passes.optimize(prog)
    aliases = [m for m in prog.nodes if m.kind == "alias" and m.name.endswith("ReadVariableOp")]
    assert any(note.startswith("forward_writes: 2 ") for note in prog.notes), prog.notes
    sv, sn, sstep = make()
    ref = [[np.asarray(t) for t in tf.function(sstep)(x)] for _ in range(2)]
    functions.clear_cache()
    with tf_backend.enabled():
        got = [[np.asarray(t) for t in tf.function(step)(x)] for _ in range(2)]
        def bad(y):
            r = v.read_value()
            v.assign_add(y)
            return r + v.read_value()
        sig = [tf.TensorSpec([None, None], tf.float32)]
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.function(bad, input_signature=sig)(tf.ones((3, 4)))
    for g, r in zip(got, ref):
        for a, b in zip(g, r):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(v.numpy(), sv.numpy())
    assert n.numpy() == sn.numpy() == 9
    assert len(aliases) >= 2


# In-place loops share their templates across ops; what differs is the op's scalar function and
# how it is inlined (elementwise.ensure_helpers: numba's inliner for those that branch, LLVM's
# for the others). The default run checks one or two ops of every such kind: plain (AddV2, Mul,
# Relu), branching (DivNoNan, Maximum on integers, Xlogy), with an attribute (LeakyRelu), with a
# divisor check (FloorMod), a shift (LeftShift). Every op: -m slow (the 22 ops this sample had
# cost 59 s of a cold default run, nearly all of it compiling).
_IN_PLACE_SAMPLE = ("AddV2", "Mul", "Relu", "DivNoNan", "Maximum", "Xlogy", "LeakyRelu",
                    "FloorMod", "LeftShift")


def test_elementwise_kernels_in_place_give_the_fresh_outputs_bits():
    """In-place elementwise loops of the sampled ops (_IN_PLACE_SAMPLE) give a fresh output's
    bits; see _check_in_place."""
    assert _check_in_place(_IN_PLACE_SAMPLE) > 2 * len(_IN_PLACE_SAMPLE)


@pytest.mark.slow
def test_every_elementwise_kernel_in_place_gives_the_fresh_outputs_bits():
    from kernels.elementwise_table import TABLE
    assert _check_in_place(sorted(TABLE)) > 100


def _check_in_place(names):
    """Each op of `names` (float32, int32) run with its output being an input (in-place reuse:
    the loops over one array) gives the bits of a fresh output (NaN signs aside); the other input
    is left alone. Inputs include NaN, Inf, zeros and subnormals; a scalar operand on either side,
    and operands by rows (block loops); the parallel loops for two ops. Returns the number of
    in-place runs checked."""
    import kernels
    from kernels.elementwise_table import TABLE
    kernels.load("cpu")
    rng = np.random.default_rng(3)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-42, 0.5, -2.0, 3.0])
    checked = 0
    for name in names:
        e = TABLE[name]
        for dt in e.dtypes:
            dt = np.dtype(dt)
            if dt not in (np.float32, np.int32):    # one loop template for every dtype
                continue
            kdef, _ = kernels.lookup(name, "cpu", {"T": dt, **{p: 0.2 for p in e.params}})
            if kdef is None:
                continue
            attrs = {"T": dt, **{p: 0.2 for p in e.params}}

            def make(n=300):
                if dt.kind == "f":
                    v = np.concatenate([special, rng.standard_normal(n - len(special)) * 3])
                else:
                    v = rng.integers(1, 5, n)
                return v.astype(dt)

            args = [make() for _ in range(e.arity)]
            cases = [args] if e.arity == 1 else [
                args, [args[0], make()[:1].reshape(())], [make()[:1].reshape(()), args[1]],
                # block loops: a partial operand along the rows, or one value per row
                [args[0].reshape(30, 10), make()[:10]], [make()[:30].reshape(30, 1),
                                                         args[1].reshape(30, 10)]]
            for ins in cases:
                try:
                    fresh = np.empty(np.broadcast_shapes(*(a.shape for a in ins)),
                                     _out_dtype(e, dt))
                    kdef.fn([a.copy() for a in ins], [fresh], attrs)
                except Exception:  # noqa: BLE001 - an op's own check (e.g. integer division)
                    continue
                for k, a in enumerate(ins):
                    if a.shape != fresh.shape or a.dtype != fresh.dtype:
                        continue
                    mine = [x.copy() for x in ins]
                    kdef.fn(mine, [mine[k]], attrs)
                    # the same bits, but a NaN's sign (a vectorised loop may make another NaN)
                    got, want = mine[k], fresh.copy()
                    if dt.kind == "f":
                        nan = np.isnan(want)
                        assert np.array_equal(np.isnan(got), nan), (name, dt, k)
                        got, want = np.where(nan, 0, got), np.where(nan, 0, want)
                    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8),
                                                  err_msg=(name, dt, k))
                    for j, x in enumerate(ins):
                        if j != k:
                            np.testing.assert_array_equal(mine[j], x)
                    checked += 1
    # the parallel loops (from elementwise.PARALLEL_MIN elements, on a thread numba gives
    # more than one: pytest-xdist workers have one), flat and by blocks
    import numba
    from kernels.cpu import elementwise
    n = elementwise.PARALLEL_MIN
    before = numba.get_num_threads()
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    try:
        for name in ("AddV2", "Mul"):
            kdef, _ = kernels.lookup(name, "cpu", {"T": np.dtype(np.float32)})
            a = rng.standard_normal((n // 64 + 1, 64)).astype(np.float32)
            for other in (rng.standard_normal(a.shape), rng.standard_normal(64),
                          rng.standard_normal((a.shape[0], 1))):
                b = other.astype(np.float32)
                fresh = np.empty(a.shape, np.float32)
                kdef.fn([a, b], [fresh], {"T": np.dtype(np.float32)})
                mine = a.copy()
                kdef.fn([mine, b], [mine], {"T": np.dtype(np.float32)})
                np.testing.assert_array_equal(mine, fresh)
                checked += 1
    finally:
        numba.set_num_threads(before)
    return checked


def _out_dtype(e, dt):
    return np.dtype(bool) if e.out == "bool" else dt


def test_split_pieces_are_views_where_tensorflow_shares_the_buffer(tf):
    """Split/SplitV along the first dimension (or after leading 1s) hand out views of the input
    (TensorFlow's SplitOp shares the buffer there); other splits copy. In-place reuse writes a
    piece only when nothing else reads the split's input; every call (interpreted first, then
    the generated driver) gives stock's values."""
    from tf_backend import executor
    x = tf.constant(np.arange(48, dtype=np.float32).reshape(12, 4))

    def f(x, n):
        y = x * 2.0
        a, b, c = tf.split(y, [2, 4, 6])                  # views of y, read by nothing else
        d, e = tf.split(x * 0.5 + 1.0, 2, axis=1)         # across rows: copies
        p, q = tf.split(tf.reshape(y, [1, 48]), 2, axis=1)  # after a leading 1: views
        return a + 1.0, b * 3.0, c - n, d + 1.0, e, p - 5.0, q, tf.split(x, [3, -1])[1] * n

    args = (x, tf.constant(2.0))
    tf_backend.disable()
    ref = [np.asarray(t) for t in tf.function(f)(*args)]
    functions.clear_cache()
    with tf_backend.enabled():
        g = tf.function(f)
        for _ in range(4):
            got = [np.asarray(t) for t in g(*args)]
            for o, r in zip(got, ref):
                np.testing.assert_array_equal(o, r)
    functions.clear_cache()
    y = np.arange(24, dtype=np.float32).reshape(6, 4)
    pieces = executor._view(_split_node(tf, y, [1, 5], 0), [y, np.array([1, 5]), np.array(0)])
    assert all(np.shares_memory(p, y) for p in pieces)
    pieces = executor._view(_split_node(tf, y, [1, 3], 1), [y, np.array([1, 3]), np.array(1)])
    assert not any(np.shares_memory(p, y) for p in pieces)
    np.testing.assert_array_equal(np.concatenate(pieces, axis=1), y)


def _split_node(tf, y, sizes, axis):
    def f(y):
        return tf.split(y, sizes, axis=axis)
    prog = _program(tf, f, tf.constant(y))
    passes.optimize(prog)
    return next(n for n in prog.nodes if n.op == "SplitV")


def test_epilogue_with_an_unknown_batch_inside_the_function(tf, monkeypatch):
    """Shapes known only at run time (a batch from IteratorGetNext, past the specialisations'
    limit): the product and its epilogue still fuse (a float32 Conv2D's bias + Relu in the
    tiles where they run), and an epilogue whose other input broadcasts the product to a
    bigger shape writes a new array."""
    monkeypatch.setattr(functions, "MAX_SPECIALIZED", 0)   # the generic program runs
    from kernels.cpu import conv_ops
    ran = []
    real = conv_ops.conv_bias_relu
    monkeypatch.setattr(conv_ops, "conv_bias_relu", lambda *a: ran.append(real(*a)) or ran[-1])
    rng = np.random.default_rng(7)
    xv = rng.standard_normal((6, 18, 18, 8)).astype(np.float32)
    f = tf.constant(rng.standard_normal((3, 3, 8, 32)).astype(np.float32))
    b = tf.constant(rng.standard_normal(32).astype(np.float32))

    def conv(it):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(next(it), f, 1, "VALID"), b))

    def data(v, n):
        return iter(tf.data.Dataset.from_tensor_slices(v).batch(n).repeat())
    ours = _run(tf, conv, data(xv, 4))[0]
    np.testing.assert_allclose(ours, tf.function(conv)(data(xv, 4)).numpy(), rtol=1e-5,
                               atol=1e-5)
    from kernels.cpu import bf16_gemm
    assert ours.shape == (4, 16, 16, 32) and (True in ran) == bf16_gemm.runs_f32()
    a = rng.standard_normal((1, 5)).astype(np.float32)
    w = tf.constant(rng.standard_normal((5, 4)).astype(np.float32))
    y = rng.standard_normal((3, 4)).astype(np.float32)

    def grow(ia, iy):   # [?, 4] + [?, 4]: batch 1 + batch 3 -> [3, 4]
        return tf.matmul(next(ia), w) + next(iy)
    got = _run(tf, grow, data(a, 1), data(y, 3))[0]
    np.testing.assert_allclose(got, tf.function(grow)(data(a, 1), data(y, 3)).numpy(),
                               rtol=1e-6)
    assert got.shape == (3, 4)


def test_stock_runs_leave_a_big_update_its_own_eager_call(tf):
    """An update over GROUP_MAX_ELEMENTS or more stays outside the groups (TensorFlow splits
    it over its intra-op pool, which inside a graph function also costs a hand-off to another
    thread); the small ones around it still group."""
    from tf_backend.program.passes import stock_runs
    big = tf.Variable(np.zeros((stock_runs.GROUP_MAX_ELEMENTS // 64, 64), np.float32))
    small = [tf.Variable(np.zeros(8, np.float32)) for _ in range(stock_runs.MIN_OPS)]

    def step(x):
        big.assign_sub(tf.fill(big.shape, x))
        for v in small:
            v.assign_add(tf.fill([8], x))
        return x + 1.0

    x = tf.constant(0.5)
    prog = _program(tf, step, x)
    passes.optimize(prog)
    groups = [g for g in prog.nodes if "group" in g.attrs]
    grouped = [m for g in groups for m in g.attrs["nodes"]]
    assert groups and all(m.op == "AssignAddVariableOp" for m in grouped), prog.dump()
    assert any(n.op == "AssignSubVariableOp" for n in prog.nodes), prog.dump()
    functions.clear_cache()
    with tf_backend.enabled():
        tf.function(step)(x)
    assert big.numpy()[0, 0] == -0.5 and all(v.numpy()[0] == 0.5 for v in small)


@pytest.mark.parametrize("chosen", ["tiles", "team"])
def test_float32_dense_relu_takes_bias_and_relu_in_the_tiles(tf, monkeypatch, chosen):
    """A float32 MatMul + bias + Relu whose product gemm's measured choice runs on the float32
    tiles gets the bias and Relu as each tile is stored (one pass over the output); where
    another kernel is chosen, the three kernels run in turn. Results are the unfused kernels'
    bits either way (a NaN row stays NaN through the Relu, as our Relu kernel and stock's
    eager Relu keep it; stock's function fuses the three into one kernel whose Relu makes it
    0) and stock's elsewhere."""
    from kernels.cpu import bf16_gemm, gemm
    if not bf16_gemm.runs_f32():
        pytest.skip("the float32 tiles need AVX-512F")
    monkeypatch.setattr(gemm, "CHOOSE", True)
    monkeypatch.setattr(gemm, "RECORD", False)
    monkeypatch.setattr(gemm, "_choices", {})
    monkeypatch.setattr(gemm, "_choice_file", {"table": {}})
    monkeypatch.setattr(gemm, "_measure", lambda *args: chosen if chosen in args[-1] else
                        args[-1][0])
    fused = []
    real = bf16_gemm.matmul_f32_into
    monkeypatch.setattr(bf16_gemm, "matmul_f32_into",
                        lambda out, a, b, bias=None, relu=False:
                        (fused.append(relu), real(out, a, b, bias, relu))[1])
    rng = np.random.default_rng(21)
    w = tf.constant(rng.standard_normal((96, 48)).astype(np.float32))
    b = tf.constant(rng.standard_normal(48).astype(np.float32))
    xv = rng.standard_normal((40, 96)).astype(np.float32)
    xv[3, 5] = np.nan

    def dense(x):
        return tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b))
    x = tf.constant(xv)
    ours = _run(tf, dense, x)[0]
    assert (True in fused) == (chosen == "tiles")
    plain = _run(tf, dense, x, disable="epilogue")[0]
    np.testing.assert_array_equal(ours, plain)
    ref = tf.function(dense)(x).numpy()
    ok = ~np.isnan(xv).any(axis=1)
    assert np.isnan(ours[~ok]).all()
    np.testing.assert_allclose(ours[ok], ref[ok], rtol=1e-5, atol=1e-5)


def test_group_stock_orders_effects_per_variable_and_others_against_all(tf):
    """group_stock may move a variable's assignment past another variable's (TensorFlow's
    automatic control dependencies order one resource's ops, not different ones'), but a
    TensorFlow node that is not a variable op of the program's handles (here a
    stateful random op) keeps its place against every effect; results are stock's."""
    def make():
        a, b = tf.Variable(np.ones(3, np.float32)), tf.Variable(np.zeros(3, np.float32))

        def step(x):
            a.assign_add(tf.exp(x) * 2.0)                  # waits on our kernels
            b.assign(tf.constant([1.0, 2.0, 3.0]))         # needs none of them
            r = tf.random.stateless_uniform([3], seed=[1, 2])
            seeded = tf.raw_ops.RandomUniform(shape=[3], dtype=tf.float32, seed=7, seed2=3)
            b.assign_add(seeded * 0.0 + r)
            return a.read_value() + b.read_value()
        return a, b, step

    x = tf.constant(np.arange(3, dtype=np.float32))
    a, b, step = make()
    prog = _program(tf, step, x)
    passes.optimize(prog)
    nodes = list(prog.counted_nodes())
    pos = {n.name: i for i, n in enumerate(nodes)}
    effects = [n for n in nodes if n.kind == "stock" and n.op in (
        "AssignAddVariableOp", "AssignVariableOp", "RandomUniform")]
    rnd = next(n for n in effects if n.op == "RandomUniform")
    assigns = [n for n in effects if n is not rnd]
    before = [n for n in assigns if n.name in ("AssignAddVariableOp", "AssignVariableOp")]
    after = [n for n in assigns if n not in before]
    assert before and after, [n.name for n in nodes]
    assert all(pos[n.name] < pos[rnd.name] for n in before), [n.name for n in nodes]
    assert all(pos[n.name] > pos[rnd.name] for n in after), [n.name for n in nodes]

    sa, sb, sstep = make()
    ref = [np.asarray(tf.function(sstep)(x)) for _ in range(2)]
    functions.clear_cache()
    with tf_backend.enabled():
        got = [np.asarray(tf.function(step)(x)) for _ in range(2)]
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), sa.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), sb.numpy(), rtol=1e-6)


def test_transpose_undoing_a_transpose_is_its_input(tf):
    from tf_backend.program.passes import canonicalize
    x = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))

    def undo(x):
        t = tf.transpose(x, [1, 0, 2])
        return tf.transpose(t, [1, 0, 2]) * 2.0, tf.transpose(tf.transpose(x, [2, 0, 1]),
                                                            [1, 2, 0])

    def keep(x):   # not inverses; and a first transpose someone else reads stays
        t = tf.transpose(x, [1, 0, 2])
        return tf.transpose(t, [0, 2, 1]), tf.transpose(t, [1, 0, 2]) + t[0, 0, 0]

    prog = _program(tf, undo, x)
    identity.run(prog)
    canonicalize.run(prog)
    dce.run(prog)
    prog.finalize()
    assert not any(n.op == "Transpose" for n in prog.nodes)
    for fn in (undo, keep):
        want = [t.numpy() for t in tf.function(fn)(x)]
        for a, b in zip(_run(tf, fn, x), want):
            np.testing.assert_array_equal(a, b)
    prog = _program(tf, keep, x)
    identity.run(prog)
    canonicalize.run(prog)
    dce.run(prog)
    prog.finalize()
    assert sum(n.op == "Transpose" for n in prog.nodes) == 2


def test_transposes_fold_into_products_flags(tf):
    from tf_backend.program.passes import canonicalize
    rng = np.random.default_rng(3)
    w = tf.constant(rng.standard_normal((5, 5)).astype(np.float32))
    x = tf.constant(rng.standard_normal((5, 5)).astype(np.float32))
    b3 = tf.constant(rng.standard_normal((2, 6, 3)).astype(np.float64))

    def fold(x, b3):
        y = x
        for _ in range(3):   # a chain: each transpose becomes the next product's transpose_a
            y = tf.transpose(tf.matmul(y, w))
        z = tf.matmul(w, tf.transpose(x), transpose_b=True)   # a flag flips back to False
        q = tf.linalg.matmul(tf.transpose(b3, [0, 2, 1]), b3)
        r = tf.linalg.matmul(b3, tf.transpose(b3, [0, 2, 1]))
        t = tf.transpose(b3, [0, 2, 1])
        s = tf.linalg.matmul(t, t, adjoint_a=True)   # both operands read one transpose
        return y, z, q, r, s

    def keep(x, b3):   # a transpose another node reads stays; other perms are not folded
        t = tf.transpose(x)
        return (tf.matmul(t, w), t * 2.0,
                tf.linalg.matmul(tf.transpose(b3, [2, 1, 0]), tf.ones((3, 2, 4), tf.float64)))

    def transposes(fn):
        prog = _program(tf, fn, x, b3)
        identity.run(prog)
        canonicalize.run(prog)
        dce.run(prog)
        prog.finalize()
        return sum(n.op == "Transpose" for n in prog.nodes)

    assert transposes(fold) == 1   # the chain's last one is an output
    assert transposes(keep) == 2
    for fn in (fold, keep):
        want = [t.numpy() for t in tf.function(fn)(x, b3)]
        for a, b in zip(_run(tf, fn, x, b3), want):   # (the chain: three products' rounding)
            assert numerics.compare(a, b, "reduction", reduction_len=6 ** 3) is None


def test_stacked_list_of_a_tensor_shares_its_rows_read_only(tf):
    """TensorListFromTensor keeps the tensor as the list's buffer (its items made only when
    asked for); a Stack of it reads that buffer: a consumer writing in place must not write
    through it (the list is read after)."""
    x = tf.constant(np.arange(24, dtype=np.float32).reshape(4, 6))

    def fn(x):
        ta = tf.TensorArray(tf.float32, size=4).unstack(x * 1.0)
        s = ta.stack()
        y = tf.nn.relu(s - 5.0)   # may run in place on a dead input buffer
        return y, ta.read(2), ta.stack()

    want = [t.numpy() for t in tf.function(fn)(x)]
    for a, b in zip(_run(tf, fn, x), want):
        np.testing.assert_array_equal(a, b)


def test_computed_updates_assign_the_value_the_program_computes(tf):
    """An SGD step's `w.assign_sub(lr * g)` on a variable the step read becomes an
    AssignVariableOp of `w - lr * g`, computed by the weight gradient's product (its epilogue):
    the variables are bit-equal to the same program without the pass, and stock's within the
    products' rounding, over steps; a value the user read before a step keeps its value (the
    variable takes our new buffer, it does not write the old one); a small variable the step
    reads again keeps its update (forward_writes answers the read); an update whose shape is
    known only at run time stays on TensorFlow, with its error for a wrong shape."""
    rng = np.random.default_rng(12)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((32, 16), (16,), (16, 4))]

    def make():
        ws = [tf.Variable(v) for v in init]

        def step(x):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, ws[0]) + ws[1])
                loss = tf.reduce_mean(tf.matmul(h, ws[2]))
            for w, g in zip(ws, tape.gradient(loss, ws)):
                w.assign_sub(0.1 * g)
            return loss, ws[1].read_value()
        return ws, step

    x = tf.constant(rng.standard_normal((8, 32)).astype(np.float32))
    ws, step = make()
    prog = _program(tf, step, x)
    passes.optimize(prog)
    ops = [n.op for n in prog.counted_nodes() if n.kind == "stock"]
    assert ops.count("AssignVariableOp") == 2 and ops.count("AssignSubVariableOp") == 1, ops
    inner = prog.nodes + [m for n in prog.nodes for m in n.attrs.get("nodes", ())]
    assert any(n.kind == "fused" and tuple(n.fused_ops) == ("MatMul", "Mul", "Sub")
               for n in inner), prog.dump()
    assert any(note.startswith("computed_updates: 2") for note in prog.notes)

    sws, sstep = make()
    sf = tf.function(sstep)
    stock = [[np.asarray(t) for t in sf(x)] for _ in range(4)]
    uws, ustep = make()
    unpassed = [_run(tf, ustep, x, disable="computed_updates") for _ in range(4)]
    functions.clear_cache()
    with tf_backend.enabled():
        f = tf.function(step)
        before = ws[0].read_value()
        kept = before.numpy().copy()
        got = [[np.asarray(t) for t in f(x)] for _ in range(4)]
        np.testing.assert_array_equal(before.numpy(), kept)
        assert not np.array_equal(ws[0].numpy(), kept)
    for g, u, s in zip(got, unpassed, stock):
        for a, b, c in zip(g, u, s):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    for a, b, c in zip(ws, uws, sws):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-5, atol=1e-6)

    v = tf.Variable(np.zeros((2, 3), np.float32))

    def dynamic(y):
        tf.identity(v.read_value())
        v.assign_sub(y)
        return tf.constant(1.0)
    sig = [tf.TensorSpec([None, None], tf.float32)]
    functions.clear_cache()
    with tf_backend.enabled():
        g = tf.function(dynamic, input_signature=sig)
        g(tf.ones((2, 3)))
        np.testing.assert_array_equal(v.numpy(), -np.ones((2, 3), np.float32))
        with pytest.raises(tf.errors.InvalidArgumentError, match="AssignSubVariableOp"):
            g(tf.ones((3, 4)))

    def twice(a, b, y):     # one variable as two arguments: b's update lands between a's
        r = a.read_value() * 1.0
        b.assign_add(y)
        a.assign_sub(r * 0.5)
        return r
    got = []
    for on in (False, True):
        u = tf.Variable(np.ones((4, 4), np.float32))
        functions.clear_cache()
        with tf_backend.enabled() if on else contextlib.nullcontext():
            h = tf.function(twice)
            for _ in range(3):
                h(u, u, tf.ones((4, 4)))
        got.append(u.numpy())
    np.testing.assert_array_equal(got[1], got[0])


def test_group_functions_are_kept_in_the_cache_directory(tf):
    """A group's FunctionDef is traced once and kept under <cache dir>/tf_groups: a process
    that meets the same group reads it instead of tracing (here: the in-memory tables cleared,
    tracing refused), with the same results; an unreadable file is traced again and replaced."""
    import glob
    import os

    import kernels
    from tf_backend import tf_adapter

    def make():
        vs = [tf.Variable(np.zeros((3,), np.float32)) for _ in range(7)]

        def step(x):
            for v in vs:
                v.assign_add(x)
            return x * 2.0
        return vs, step

    def fresh():
        tf_adapter._group_fdefs.clear()
        tf_adapter._groups_here.clear()
        functions.clear_cache()

    x = tf.constant(np.arange(3, dtype=np.float32))
    vs, step = make()
    fresh()
    with tf_backend.enabled():
        tf.function(step)(x)
    assert [v.numpy().tolist() for v in vs] == [[0.0, 1.0, 2.0]] * 7
    names = [f.signature.name for f in tf_adapter._group_fdefs.values() if f is not None]
    assert names and all(n.startswith("__tfb_group_") for n in names)
    files = [os.path.join(kernels.cache_dir(), "tf_groups", n[len("__tfb_group_"):] + ".pb")
             for n in names]
    assert all(os.path.exists(p) for p in files)

    traced = []
    old = tf_adapter._traced_group_fdef

    def refuse(group):
        traced.append(group)
        raise ValueError("traced")
    tf_adapter._traced_group_fdef = refuse
    try:
        vs2, step2 = make()
        fresh()
        with tf_backend.enabled():
            tf.function(step2)(x)
        assert not traced
        assert [v.numpy().tolist() for v in vs2] == [[0.0, 1.0, 2.0]] * 7
    finally:
        tf_adapter._traced_group_fdef = old
    with open(files[0], "wb") as f:
        f.write(b"not a FunctionDef")
    vs3, step3 = make()
    fresh()
    with tf_backend.enabled():
        tf.function(step3)(x)
    assert [v.numpy().tolist() for v in vs3] == [[0.0, 1.0, 2.0]] * 7
    with open(files[0], "rb") as f:
        assert f.read() != b"not a FunctionDef"
    fresh()


def test_inference_between_training_steps_sees_the_assigned_values(tf):
    """computed_updates hands TensorFlow our arrays as the variables' buffers, and the pool
    reuses a buffer once nothing references it: an inference function whose derived weights
    are kept between calls by buffer address (filter_cache: its product's transposed weight)
    and that runs every other training step must still see each step's values."""
    rng = np.random.default_rng(13)
    w = tf.Variable(rng.standard_normal((3, 3, 8, 16)).astype(np.float32) * 0.1)
    b = tf.Variable(rng.standard_normal((16,)).astype(np.float32))
    d = tf.Variable(rng.standard_normal((16 * 8 * 8, 4)).astype(np.float32) * 0.01)
    x = tf.constant(rng.standard_normal((2, 8, 8, 8)).astype(np.float32))

    def net(x):
        h = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + tf.reshape(b, [1, 1, 1, 16]))
        return tf.matmul(tf.reshape(h, [2, -1]), d)

    def train(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(x) - 1.0) ** 2)
        for v, g in zip((w, b, d), tape.gradient(loss, (w, b, d))):
            v.assign_sub(0.1 * g)
        return loss

    from kernels.cpu import filter_cache
    kept_before = filter_cache._stats["transposed:kept"]
    functions.clear_cache()
    with tf_backend.enabled():
        step, infer = tf.function(train), tf.function(net)
        seen = []
        for i in range(12):
            step(x)
            if i % 2:
                got = infer(x).numpy()
                tf_backend.disable()
                ref = tf.function(net)(x).numpy()   # stock, on the variables as they are now
                tf_backend.enable()
                np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
                assert not any(np.array_equal(got, s) for s in seen)   # the weights moved
                seen.append(got)
    progs = {c.name: c.program for c in functions._cache.values()}
    train_prog = next(p for n, p in progs.items() if "__inference_train" in n)
    infer_prog = next(p for n, p in progs.items() if "__inference_net" in n)
    assert any(note.startswith("computed_updates: 3") for note in train_prog.notes)
    # the inference product kept its weight's transpose, anew for each step's buffer
    assert filter_cache._stats["transposed:kept"] - kept_before >= len(seen), infer_prog.dump()
