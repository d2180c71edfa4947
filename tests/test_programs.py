"""tf.function on our runtime: programs match stock, control flow, state, errors, threads."""
import gc
import threading

import numpy as np
import pytest

import tf_backend
from integration import models
from tf_backend import executor, functions, numerics


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    executor.set_threads(request.param)
    yield request.param
    executor.set_threads(executor.default_threads())


def _both(fn, *args):
    """(stock outputs, our outputs, our ledger) for a tf.function called on args."""
    import tensorflow as tf
    tf_backend.disable()
    ref = [np.asarray(t) for t in tf.nest.flatten(fn(*args))]
    tf_backend.enable()
    tf_backend.reset_stats()
    try:
        ours = [np.asarray(t) for t in tf.nest.flatten(fn(*args))]
        stats = tf_backend.stats()
    finally:
        tf_backend.disable()
    return ref, ours, stats


def _compiled_calls(stats):
    return sum(f["calls"] for f in stats["functions"].values() if f.get("compiled"))


def _close(ours, ref, rtol=1e-5, atol=1e-6):
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)


def test_mlp_and_cnn_inference(tf, threads):
    import keras
    for name in ("small_mlp", "small_cnn"):
        m = models.build(name, keras)
        x, _ = models.sample_batch(m, 8)
        f = tf.function(lambda t: m(t))
        ref, ours, stats = _both(f, tf.constant(x))
        _close(ours, ref)
        assert _compiled_calls(stats) >= 1


def test_residual_block(tf, threads):
    rng = np.random.default_rng(0)
    w1 = tf.constant(rng.standard_normal((3, 3, 8, 8)).astype(np.float32) * 0.2)
    w2 = tf.constant(rng.standard_normal((3, 3, 8, 8)).astype(np.float32) * 0.2)

    @tf.function
    def block(x):
        y = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        y = tf.nn.conv2d(y, w2, 1, "SAME")
        return tf.nn.relu(x + y)

    ref, ours, stats = _both(block, tf.constant(rng.standard_normal((2, 8, 8, 8)).astype(np.float32)))
    _close(ours, ref, rtol=1e-4, atol=1e-5)
    fn = next(iter(stats["functions"].values()))
    assert fn["kernel_nodes"]["Conv2D"] == 2 and not fn["fallback_nodes"]


def test_control_flow_and_nested_calls(tf, threads):
    @tf.function
    def inner(x):
        return tf.nn.relu(x) * 2.0

    @tf.function
    def f(x, n):
        i = tf.constant(0)
        _, x = tf.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, inner(x) - 0.5), [i, x])
        if tf.reduce_sum(x) > 0:
            x = x + 1.0
        else:
            x = x - 1.0
        y = tf.switch_case(n % 3, [lambda: x * 2.0, lambda: x * 3.0, lambda: x * 4.0])
        return y

    x = tf.constant([[0.5, -1.0], [2.0, 0.25]])
    for n in (0, 1, 2, 5):
        ref, ours, stats = _both(f, x, tf.constant(n))
        _close(ours, ref)
        fn = next(iter(stats["functions"].values()))
        assert fn["compiled"] and fn["calls"] == 1, fn


def test_variables_updated_between_calls(tf, threads):
    v = tf.Variable(tf.ones((2, 2)))

    @tf.function
    def step(x):
        v.assign_add(x)
        return tf.reduce_sum(v * 2.0)

    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    tf_backend.disable()
    ref = [float(step(x)) for _ in range(3)] + [np.asarray(v)]
    v.assign(tf.ones((2, 2)))
    with tf_backend.enabled():
        ours = [float(step(x)) for _ in range(3)] + [np.asarray(v)]
        v.assign(tf.zeros((2, 2)))   # written outside the function: the next call must see it
        ours.append(float(step(x)))
    _close([np.asarray(o) for o in ours[:4]], [np.asarray(r) for r in ref])
    assert ours[4] == 20.0


def test_keras_fit_evaluate_predict(tf):
    import keras

    def train():
        m = models.build("small_mlp", keras, seed=0)
        x, y = models.sample_batch(m, 32, seed=1)
        m.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        h = m.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return (h.history["loss"], m.evaluate(x, y, batch_size=8, verbose=0),
                m.predict(x, batch_size=8, verbose=0), [np.asarray(w) for w in m.weights])

    tf_backend.disable()
    ref = train()
    tf_backend.enable()
    tf_backend.reset_stats()
    try:
        ours = train()
        stats = tf_backend.stats()
    finally:
        tf_backend.disable()
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5)
    np.testing.assert_allclose(ours[2], ref[2], rtol=1e-4, atol=1e-5)
    for a, b in zip(ours[3], ref[3]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert _compiled_calls(stats) >= 3
    assert not any(f.get("reason") for f in stats["functions"].values())


def test_gradient_tape_training_step(tf, threads):
    rng = np.random.default_rng(1)
    w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32))

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        return loss

    x = tf.constant(rng.standard_normal((8, 4)).astype(np.float32))
    y = tf.constant(rng.standard_normal((8, 3)).astype(np.float32))
    w0 = np.asarray(w)
    tf_backend.disable()
    ref = [float(train_step(x, y)) for _ in range(3)] + [np.asarray(w)]
    w.assign(w0)
    with tf_backend.enabled():
        ours = [float(train_step(x, y)) for _ in range(3)] + [np.asarray(w)]
    np.testing.assert_allclose(ours[:3], ref[:3], rtol=1e-5)
    np.testing.assert_allclose(ours[3], ref[3], rtol=1e-5)


def test_gradient_of_function_call_under_outer_tape(tf):
    """Forward-under-tape and backward functions both run as programs."""
    @tf.function
    def f(x):
        return tf.reduce_sum(tf.nn.sigmoid(x) * x)

    x = tf.constant([[0.5, -1.0], [2.0, 0.1]])

    def grad():
        with tf.GradientTape() as t:
            t.watch(x)
            y = f(x)
        return np.asarray(t.gradient(y, x))

    tf_backend.disable()
    ref = grad()
    with tf_backend.enabled():
        tf_backend.reset_stats()
        ours = grad()
        n = len(tf_backend.stats()["functions"])
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    assert n >= 2   # forward and backward functions


@pytest.mark.parametrize("body", ["scale", "matmul_var", "passthrough"])
def test_persistent_tape_through_a_function(tf, body):
    """A persistent tape takes the function's higher-order forward, whose outputs include an
    input passed through (the gradient reads it): our call must hand back a tensor of its own
    there, as TensorFlow's does (the input itself made the tape's record a cycle: "Invalid tape
    state"), and second-order gradients follow."""
    w = tf.Variable(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3))
    fns = {"scale": lambda a: tf.reduce_sum(a * 2.0),
           "matmul_var": lambda a: tf.reduce_sum(tf.matmul(a, w) ** 2),
           "passthrough": lambda a: (a, tf.reduce_sum(a * a))}
    f = tf.function(fns[body])
    x = tf.constant(np.linspace(0.5, 2, 12, dtype=np.float32).reshape(4, 3))

    def grads():
        with tf.GradientTape(persistent=True) as t2:
            t2.watch(x)
            with tf.GradientTape(persistent=True) as t1:
                t1.watch(x)
                y = f(x)
                y = y[1] + tf.reduce_sum(y[0]) if body == "passthrough" else y
            g = t1.gradient(y, x)
            g_again = t1.gradient(y, x)
        return [np.asarray(g), np.asarray(g_again), np.asarray(t2.gradient(g, x))]

    tf_backend.disable()
    ref = grads()
    with tf_backend.enabled():
        ours = grads()
    for o, r in zip(ours, ref):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)


def test_shapes_change_between_calls(tf, threads):
    @tf.function(reduce_retracing=True)
    def f(x):
        return tf.reduce_sum(tf.nn.relu(x) * 2.0, axis=-1)

    for shape in [(2, 3), (5, 3), (4, 7), (1, 1)]:
        x = tf.constant(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
        ref, ours, _ = _both(f, x)
        _close(ours, ref)


def test_runtime_error_names_node_and_line_and_calls_keep_working(tf, threads):
    @tf.function
    def f(x, n):
        y = x * 2.0
        return tf.reshape(y, tf.stack([n, -1]))

    x = tf.ones((3, 3))
    tf_backend.disable()
    with pytest.raises(tf.errors.InvalidArgumentError):
        f(x, tf.constant(4))
    with tf_backend.enabled():
        with pytest.raises(tf.errors.InvalidArgumentError) as ei:
            f(x, tf.constant(4))
        msg = str(ei.value)
        assert "'Reshape'" in msg and "float32[3,3]" in msg and "test_programs.py" in msg
        assert np.asarray(f(x, tf.constant(3))).shape == (3, 3)


def test_long_program_driver_in_parts_error_late_and_shallow_tensorflow_stack(tf):
    """A program longer than one driver part (driver.CHUNK nodes) runs part after part; a node
    failing in a late part is reported as in a short program, and later calls work. TensorFlow's nodes run below enough short frames that the stack
    TensorFlow captures for each eager op holds none of the caller's frames."""
    import sys
    from tf_backend import tf_adapter as tfa
    from tf_backend.program import driver

    v = tf.Variable(np.ones((4, 4), np.float32))
    depth = {}
    real = tfa.execute_stock

    def spy(op, *a):
        if op == "AssignAddVariableOp":
            f = sys._getframe(1)
            names = []
            for _ in range(tfa.STACK_CAPTURE_FRAMES):
                if f is None:
                    break
                names.append(f.f_code.co_name)
                f = f.f_back
            depth["names"] = names
        return real(op, *a)

    @tf.function
    def f(x, n):
        for _ in range(2 * driver.CHUNK):
            x = tf.transpose(tf.math.cumsum(x, axis=1))
        v.assign_add(x)
        return x, tf.reshape(x, tf.stack([n, -1]))

    x = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) / 100)
    tf_backend.disable()
    ref = [np.asarray(t) for t in f(x, tf.constant(2))]
    v.assign(np.ones((4, 4), np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError):
        f(x, tf.constant(3))
    v.assign(np.ones((4, 4), np.float32))
    functions.clear_cache()
    import unittest.mock as mock
    with tf_backend.enabled(), mock.patch.object(tfa, "execute_stock", spy):
        with pytest.raises(tf.errors.InvalidArgumentError) as ei:
            f(x, tf.constant(3))
        assert "'Reshape'" in str(ei.value)
        v.assign(np.ones((4, 4), np.float32))
        got = [np.asarray(t) for t in f(x, tf.constant(2))]
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    prog = next(c.program for c in functions._cache.values() if "__inference_f" in c.name)
    assert prog.driver.source.count("def _part") >= 3
    # the frames TensorFlow would capture are ours: the caller (this test) is beyond them
    assert "test_long_program_driver_in_parts_error_late_and_shallow_tensorflow_stack" \
        not in depth["names"] and "_pad" in depth["names"], depth


def test_driver_code_is_kept_in_the_cache_directory(tf, monkeypatch):
    """A generated driver's code object is compiled once and kept under <cache dir>/drivers:
    the same program in a later process (here: the function cache cleared) loads it instead of
    compiling its source, with the same results; an unreadable file is compiled again."""
    import builtins
    import os

    import kernels
    from tf_backend.program import driver

    @tf.function
    def f(x):
        for _ in range(5):
            x = tf.tanh(tf.matmul(x, x)) + 1.0
        return x

    x = tf.constant(np.eye(4, dtype=np.float32) / 3)
    compiled = []

    def spy(src, filename, mode, *a, **k):
        if filename.startswith("<driver"):
            compiled.append(filename)
        return builtins.compile(src, filename, mode, *a, **k)
    monkeypatch.setattr(driver, "compile", spy, raising=False)
    results = []
    for _ in range(3):
        functions.clear_cache()
        compiled.clear()
        with tf_backend.enabled():
            for _ in range(3):
                got = f(x)
        results.append((np.asarray(got), list(compiled)))
        prog = next(c.program for c in functions._cache.values() if "__inference_f" in c.name)
        src = prog.driver.source
        kept = os.path.join(kernels.cache_dir(), driver.cached_name(src, f"<driver {prog.name}>"))
        assert os.path.exists(kept)
        if len(results) == 2:   # the next process finds an unreadable file
            with open(kept, "wb") as fh:
                fh.write(b"not code")
    assert "def drive(vals, failed):" in src
    np.testing.assert_array_equal(results[1][0], results[0][0])
    np.testing.assert_array_equal(results[2][0], results[0][0])
    # (the first run compiles unless an earlier run of this test left the file)
    assert results[1][1] == [], results
    assert len(results[2][1]) == 1, results


def test_jit_compile_functions_are_left_to_xla(tf):
    @tf.function(jit_compile=True)
    def f(x):
        return x * 2.0 + 1.0

    with tf_backend.enabled():
        tf_backend.reset_stats()
        np.testing.assert_allclose(np.asarray(f(tf.ones(3))), [3.0, 3.0, 3.0])
        assert tf_backend.stats()["functions"] == {}


def test_tracing_and_disabled_mode_are_stock(tf):
    with tf_backend.enabled():
        @tf.function
        def outer(x):
            return inner(x) + 1.0

        @tf.function
        def inner(x):
            return x * 3.0

        tf_backend.reset_stats()
        np.testing.assert_allclose(np.asarray(outer(tf.ones(2))), [4.0, 4.0])
        fns = tf_backend.stats()["functions"]
        assert len(fns) == 1, fns   # inner is inlined into outer's program, not called
    functions.clear_cache()


def _two_branch(tf, seed):
    """A tf.function with two independent products (heavy where products do not split)."""
    rng = np.random.default_rng(seed)
    a = tf.constant(rng.standard_normal((256, 256)).astype(np.float32))
    b = tf.constant(rng.standard_normal((256, 256)).astype(np.float32))

    @tf.function
    def two_branch(a, b):
        left = tf.nn.relu(tf.matmul(a, b)) * 0.5
        right = tf.tanh(tf.matmul(b, a)) + 1.0
        return tf.reduce_sum(left @ right, axis=0)

    return two_branch, a, b


@pytest.mark.parametrize("splitting_serial", [True, False], ids=["small-machine", "concurrent"])
def test_results_identical_single_and_multi_threaded(tf, monkeypatch, splitting_serial):
    """Bit for bit at 1, 2 and 4 threads: with the branches' chains split over numba's team one
    after the other (small machines) and with the branches run concurrently."""
    from tf_backend.program.passes import schedule
    monkeypatch.setattr(schedule, "SERIAL_SPLITTING", splitting_serial)
    functions.clear_cache()
    two_branch, a, b = _two_branch(tf, 5)
    outs = []
    with tf_backend.enabled():
        for n in (1, 2, 4, 1):
            executor.set_threads(n)
            outs.append(np.asarray(two_branch(a, b)))
    executor.set_threads(executor.default_threads())
    progs = [c.program for c in functions._cache.values() if c.program is not None]
    assert [p.parallel for p in progs] == [not splitting_serial]
    functions.clear_cache()
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])


def _only_program():
    (prog,) = [c.program for c in functions._cache.values() if c.program is not None]
    return prog


def test_concurrency_stays_only_where_it_measures_faster(tf, monkeypatch):
    """A program with independent heavy nodes runs serially for its first SCHEDULE_AFTER calls,
    then concurrently and serially in turn (the first of each way warms up), then the faster
    way for good; the ledger's `schedule` says which; the results are the same bits either
    way."""
    from tf_backend.program.passes import schedule
    monkeypatch.setattr(schedule, "SERIAL_SPLITTING", False)
    functions.clear_cache()
    executor.set_threads(2)
    two_branch, a, b = _two_branch(tf, 6)
    ways = []
    real = executor._schedule_trial
    monkeypatch.setattr(executor, "_schedule_trial",
                        lambda prog, trial, conc, s: (ways.append(conc),
                                                      real(prog, trial, conc, s)))
    n = 2 * (executor.SCHEDULE_RUNS + 1)
    try:
        with tf_backend.enabled():
            outs = [np.asarray(two_branch(a, b)) for _ in range(executor.SCHEDULE_AFTER)]
            assert ways == [] and _only_program().schedule_trial == executor.SCHEDULE_AFTER
            outs += [np.asarray(two_branch(a, b)) for _ in range(n + 3)]
            stats = tf_backend.stats()
    finally:
        executor.set_threads(executor.default_threads())
    prog = _only_program()
    functions.clear_cache()
    assert prog.notes and ways == [True, False] * (executor.SCHEDULE_RUNS + 1), prog.dump()
    assert prog.schedule_trial is False
    (chosen,) = [v for k, v in stats["schedule"].items() if "two_branch" in k]
    assert chosen["concurrent"] == prog.parallel and chosen["serial_over_concurrent"] > 0
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])


def test_stress_many_threads_bounded_memory(tf):
    import tracemalloc

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.nn.relu(x @ x) + 1.0)

    @tf.function
    def g(x):
        return tf.reduce_max(tf.tanh(x) * 3.0)

    xs = [tf.constant(np.full((32, 32), i / 100, np.float32)) for i in range(4)]
    tf_backend.disable()
    want = {(k, i): float(fn(x)) for k, fn in (("f", f), ("g", g)) for i, x in enumerate(xs)}
    errors = []

    def worker(seed, iters):
        rng = np.random.default_rng(seed)
        for _ in range(iters):
            i = int(rng.integers(4))
            k = "f" if rng.random() < 0.5 else "g"
            got = float((f if k == "f" else g)(xs[i]))
            if abs(got - want[(k, i)]) > 1e-4 * max(1.0, abs(want[(k, i)])):
                errors.append((k, i, got, want[(k, i)]))

    with tf_backend.enabled():
        worker(0, 50)  # warm up: compile both
        gc.collect()
        tracemalloc.start()
        ts = [threading.Thread(target=worker, args=(s, 150)) for s in range(6)]
        [t.start() for t in ts]
        [t.join(timeout=120) for t in ts]
        assert not any(t.is_alive() for t in ts), "deadlock: a worker did not finish"
        first, _ = tracemalloc.get_traced_memory()
        ts = [threading.Thread(target=worker, args=(s, 150)) for s in range(6, 12)]
        [t.start() for t in ts]
        [t.join(timeout=120) for t in ts]
        gc.collect()
        second, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert not errors, errors[:5]
    assert second - first < 2_000_000, f"memory grew by {second - first} bytes over 900 calls"


def test_strict_mode_refuses_functions_with_eligible_fallback_nodes(tf):
    @tf.function
    def f(x):
        return tf.math.special.bessel_i0e(x) + 1.0

    @tf.function
    def g(x):
        v = tf.Variable(1.0) if False else None  # noqa: F841
        return x * 2.0

    with tf_backend.enabled("strict"):
        with pytest.raises(tf.errors.UnimplementedError, match=r"BesselI0e \(not_registered\)"):
            f(tf.ones(2))
        np.testing.assert_allclose(np.asarray(g(tf.ones(2))), [2.0, 2.0])


def test_programs_specialise_per_input_shape(tf, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_BACKEND_DUMP", str(tmp_path))
    functions.clear_cache()

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    def f(x):
        return tf.nn.relu(x * 2.0 - 1.0) + tf.reduce_mean(x)

    with tf_backend.enabled():
        for rows in (3, 5, 3):
            x = tf.constant(np.linspace(-1, 1, rows * 8, dtype=np.float32).reshape(rows, 8))
            got = np.asarray(f(x))
            tf_backend.disable()
            # x * 2 - 1 + mean cancels towards zero: the reduction contract's atol, not rtol alone
            assert numerics.compare(got, np.asarray(f(x)), "reduction", rows * 8) is None
            tf_backend.enable()
        c = next(iter(functions._cache.values()))
        assert c.dynamic == (0,) and set(c.specialized) == {((3, 8),), ((5, 8),)}
    spec = [p for p in tmp_path.iterdir() if "specialized" in p.name and p.suffix == ".txt"]
    assert len(spec) == 2 and "[3,8]" in spec[0].read_text() + spec[1].read_text()
    drivers = [p for p in tmp_path.iterdir() if p.name.endswith(".driver.py")]
    assert len(drivers) == 3 and all("def drive(vals, failed):" in p.read_text() for p in drivers)
    functions.clear_cache()


def test_specialisations_optimise_clones_of_one_lowering(tf, monkeypatch):
    """A function with dynamic inputs is lowered once: each specialisation optimises a clone of
    that program (its nodes, sub-programs and control edges new), so the pristine one stays as
    lowered for the next shape. A while loop with a captured variable and a control edge; each
    batch size against stock, then the first size again."""
    from tf_backend.program import lower
    functions.clear_cache()
    lowered = []
    orig = lower.lower
    monkeypatch.setattr(lower, "lower", lambda g, n: lowered.append(n) or orig(g, n))
    v = tf.Variable(np.linspace(-1, 1, 8, dtype=np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    def f(x):
        def body(i, acc):
            return i + 1, tf.tanh(acc * v + 0.5)
        with tf.control_dependencies([v.assign_add(tf.fill([8], 0.0))]):
            n = tf.shape(x)[0]
        return tf.while_loop(lambda i, acc: i < n, body, (0, x))[1] + tf.reduce_sum(x)

    for rows in (3, 5, 3):
        x = tf.constant(np.linspace(-1, 1, rows * 8, dtype=np.float32).reshape(rows, 8))
        ref, ours, _ = _both(f, x)
        _close(ours, ref)
    c = next(iter(functions._cache.values()))
    assert set(c.specialized) == {((3, 8),), ((5, 8),)} and c.lowered is not None
    assert sum(n == c.name for n in lowered) == 1, lowered   # the outer function, once
    progs = [c.lowered, c.program, *c.specialized.values()]
    ids = [{id(n) for n in p.nodes} for p in progs]
    assert all(not (a & b) for i, a in enumerate(ids) for b in ids[i + 1:])
    whiles = [[n for n in p.nodes if n.kind == "while"] for p in progs]
    assert all(len(w) == 1 for w in whiles)
    subs = [id(sub) for w in whiles for sub in w[0].subs]
    assert len(set(subs)) == len(subs)   # each program its own loop bodies
    assert not any(getattr(sub, "nested", False) for sub in whiles[0][0].subs)  # never optimised
    functions.clear_cache()


def _non_topological(graph):
    """Ops of graph (in get_operations() order) that read a tensor made by a later op."""
    pos = {op.name: i for i, op in enumerate(graph.get_operations())}
    return [op.name for i, op in enumerate(graph.get_operations())
            if any(pos[t.op.name] > i for t in op.inputs)]


def test_while_gradient_accumulators_lower_in_dependency_order(tf, threads):
    """while_v2's gradient adds accumulator inputs, created after the forward While op, to that
    op: get_operations() is then not a dependency order (Keras LSTM training). Lowering orders the
    ops topologically, so the function runs as a program and matches stock."""
    from tf_backend.program import lower
    v = tf.Variable(np.linspace(-0.5, 0.5, 16, dtype=np.float32).reshape(4, 4))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            _, h = tf.while_loop(lambda i, h: i < 3,
                                 lambda i, h: (i + 1, tf.tanh(tf.matmul(h, v))), (0, x))
            loss = tf.reduce_sum(h * h)
        g = tape.gradient(loss, v)
        v.assign_sub(0.1 * g)
        return loss, g

    x = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    graph = step.get_concrete_function(x).graph
    assert _non_topological(graph), "precondition: creation order is not dependency order"
    order = lower.topological_order(graph)
    pos = {op.name: i for i, op in enumerate(order)}
    assert len(order) == len(graph.get_operations())
    for op in order:
        assert all(pos[t.op.name] < pos[op.name] for t in op.inputs)
        assert all(pos[c.name] < pos[op.name] for c in op.control_inputs)
    w0 = np.asarray(v)
    tf_backend.disable()
    ref = [np.asarray(t) for t in step(x)] + [np.asarray(v)]
    v.assign(w0)
    with tf_backend.enabled():
        tf_backend.reset_stats()
        ours = [np.asarray(t) for t in step(x)] + [np.asarray(v)]
        stats = tf_backend.stats()
    _close(ours, ref, rtol=1e-5, atol=1e-6)
    fn = next(iter(stats["functions"].values()))
    assert fn["compiled"] and not fn.get("reason"), fn
    assert fn["kernel_nodes"].get("MatMul") and fn["kernel_nodes"].get("Tanh"), fn


def test_topological_order_keeps_graph_order_and_refuses_cycles(tf):
    """A graph already in dependency order keeps its op order exactly; otherwise stateful ops keep
    their relative order and every data/control edge points forward (auto control deps make the
    output Identity wait on a NoOp created after it); a cycle makes the function Unlowerable."""
    from tf_backend.program import lower
    v = tf.Variable(1.0)
    spec = tf.TensorSpec((), tf.float32)

    pure = tf.function(lambda x: tf.tanh(x * 2.0) + 1.0).get_concrete_function(spec).graph
    assert lower.topological_order(pure) == pure.get_operations()

    def f(x):
        v.assign_add(x)
        a = x * 2.0
        v.assign_add(a)
        return a + v.read_value()

    graph = tf.function(f).get_concrete_function(spec).graph
    order = lower.topological_order(graph)
    pos = {op.name: i for i, op in enumerate(order)}
    for op in order:
        assert all(pos[t.op.name] < pos[op.name] for t in op.inputs)
        assert all(pos[c.name] < pos[op.name] for c in op.control_inputs)
    stateful = [op.name for op in graph.get_operations() if op.op_def.is_stateful]
    assert [op.name for op in order if op.op_def.is_stateful] == stateful
    with graph.as_default():
        mul = next(op for op in graph.get_operations() if op.type == "Mul")
        add = next(op for op in graph.get_operations() if op.type == "AddV2")
        mul._add_control_input(add)   # test-only private API: add reads mul; now mul waits on add
    with pytest.raises(lower.Unlowerable) as ei:
        lower.lower(graph, "f")
    assert ei.value.reason.startswith("cycle:")


def test_mirrored_strategy_two_cpus_matches_stock_and_never_hangs():
    """MirroredStrategy over two logical CPU devices: fit (8 steps), evaluate and predict give
    stock's losses, weights and predictions. The train function holds CollectiveReduceV2, which
    only works in TF's graph executor: it runs whole on TensorFlow (ledger reason
    collective:...); evaluate and predict (ops on CPU:0 and CPU:1) run as our programs."""
    import subprocess
    import sys
    code = """
import numpy as np, tensorflow as tf, keras, tf_backend
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
def train():
    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(2)])
        m.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    w0 = [np.asarray(w) for w in m.weights]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = rng.integers(0, 2, 32).astype(np.int32)
    h = m.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    ev = m.evaluate(x, y, batch_size=8, verbose=0)
    pred = m.predict(x, batch_size=8, verbose=0)
    ws = [np.asarray(w) for w in m.weights]
    assert any(not np.array_equal(a, b) for a, b in zip(ws, w0))   # it trained
    return h.history["loss"], ev, pred, ws
ref = train()
tf_backend.enable()
tf_backend.reset_stats()
ours = train()
st = tf_backend.stats()
tf_backend.disable()
np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5)
np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5)
np.testing.assert_allclose(ours[2], ref[2], rtol=1e-5, atol=1e-6)
for a, b in zip(ours[3], ref[3]):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
fns = st["functions"].values()
whole = sorted({f["reason"] for f in fns if not f.get("compiled")})
assert whole and all(r.startswith("collective:") for r in whole), whole
compiled = [f for f in fns if f.get("compiled") and f["calls"] > 0]
assert len(compiled) >= 2, st["functions"]
assert sum(f["kernel_nodes"].get("MatMul", 0) for f in compiled) >= 4, compiled
assert st["ops"]["MatMul"]["backend"] >= 16, st["ops"].get("MatMul")
print("OK", whole)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400,
                       env=dict(__import__("os").environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK" in r.stdout


def test_channels_first_stock_ops_run_the_function_whole(tf):
    """CPU Conv3D has no NCDHW kernel: only Grappler's layout rewrite makes such a graph valid
    (Keras' conv_3d tests), so lowering refuses it and the function runs whole on TensorFlow."""
    from tf_backend.program import lower
    w = tf.ones((2, 2, 2, 2, 3))

    def f(x):
        return tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "VALID", data_format="NCDHW") * 2.0

    graph = tf.function(f).get_concrete_function(tf.TensorSpec((1, 2, 4, 4, 4))).graph
    with pytest.raises(lower.Unlowerable) as ei:
        lower.lower(graph, "f")
    assert ei.value.reason == "layout:Conv3D:NCDHW"


def test_slow_path_accepts_attrs_none(backend, tf):
    from tf_backend import tf_adapter as tfa
    from tensorflow.python.eager import context   # test-only: call the patched entry point
    t = tf.constant([True, False])
    ctx = context.context()
    out = tfa.pywrap().TFE_Py_Execute(ctx._handle, None, "LogicalNot", [t], None, 1)
    np.testing.assert_array_equal(np.asarray(out[0]), [False, True])
    assert backend.stats()["ops"]["LogicalNot"]["backend"] == 1


def test_nested_jit_compile_call_is_one_xla_node_inside_our_program(tf):
    """Keras runs grouped convolutions in a nested jit_compile function; CPU TensorFlow has no
    grouped Conv3D kernel without XLA, so inlining that call (or running the PartitionedCall op
    as a stock node) fails where stock succeeds. The call is one TensorFlow node that executes
    the function by name (XLA compiles it, as in stock); the rest of the enclosing function
    runs on our kernels, and the ledger names the reason."""
    inner = tf.function(lambda x, w: tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "VALID"),
                        jit_compile=True)

    @tf.function
    def outer(x, w):
        return tf.nn.relu(inner(x, w) * 2.0 - 1.0)

    x = tf.constant(np.random.default_rng(0).standard_normal((1, 4, 4, 4, 4)).astype(np.float32))
    w = tf.constant(np.ones((2, 2, 2, 2, 4), np.float32))    # 2 input channels of 4: 2 groups
    tf_backend.disable()
    ref = outer(x, w).numpy()
    tf_backend.reset_stats()
    with tf_backend.enabled():
        got = outer(x, w).numpy()
        got2 = outer(x, w).numpy()
        stats = tf_backend.stats()
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got2, ref)
    fns = stats["functions"]
    assert [f.get("reason") for f in fns.values()] == [None], fns
    call = [o for op, o in stats["ops"].items() if "PartitionedCall" in op]
    assert call and call[0]["reasons"] == {"xla_must_compile": 2}, stats["ops"]
    assert stats["ops"]["Relu"]["backend"] == 2 and stats["ops"]["Mul"]["backend"] == 2


def test_keras_grouped_convolution_model_runs_on_our_runtime(tf):
    """A Keras model with a grouped Conv2D (Keras wraps it in a jit_compile function): predict
    and a few fit steps match stock, the grouped convolution runs as XLA's node and the dense
    layers, activations and optimizer on our kernels."""
    import keras
    rng = np.random.default_rng(1)
    X = rng.standard_normal((32, 8, 8, 4)).astype(np.float32)
    Y = rng.integers(0, 3, 32)

    def build():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((8, 8, 4)),
                              keras.layers.Conv2D(8, 3, groups=2, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
        m.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    tf_backend.disable()
    m = build()
    ref_p = m.predict(X, verbose=0)
    ref_h = m.fit(X, Y, batch_size=16, epochs=2, verbose=0).history["loss"]
    tf_backend.reset_stats()
    with tf_backend.enabled():
        m = build()
        got_p = m.predict(X, verbose=0)
        got_h = m.fit(X, Y, batch_size=16, epochs=2, verbose=0).history["loss"]
        stats = tf_backend.stats()
    np.testing.assert_allclose(got_p, ref_p, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_h, ref_h, rtol=1e-4, atol=1e-5)
    assert not any(f.get("reason") == "xla_must_compile" for f in stats["functions"].values())
    reasons = {r for o in stats["ops"].values() for r in o["reasons"]}
    assert "xla_must_compile" in reasons, stats["ops"]
    assert stats["ops"]["MatMul"]["backend"] > 0


def test_values_dropped_after_their_last_use(tf, monkeypatch):
    """A long chain keeps only the values still to be used (and the program's inputs, outputs
    and constants), so intermediates are freed as TensorFlow's executor frees them; with
    DROP_DEAD off every value lives to the end of the call."""
    x = tf.constant(np.arange(64, dtype=np.float32).reshape(8, 8))

    @tf.function
    def chain(x):
        for _ in range(12):
            x = tf.transpose(tf.math.cumsum(x, axis=1))   # unfusable kernels
        return x

    tf_backend.disable()
    ref = np.asarray(chain(x))
    live = []
    real = executor.step

    def spy(node, vals, failed):
        real(node, vals, failed)
        live.append(sum(getattr(v, "shape", None) == (8, 8) for v in vals))   # not constants

    monkeypatch.setattr(executor, "step", spy)
    monkeypatch.setattr(executor, "DRIVERS", False)   # the interpreter, node by node
    peaks = {}
    for drop in (True, False):
        monkeypatch.setattr(executor, "DROP_DEAD", drop)
        live.clear()
        with tf_backend.enabled():
            np.testing.assert_array_equal(np.asarray(chain(x)), ref)
        peaks[drop] = max(live)
    assert peaks[True] <= 3 and peaks[False] >= 20, peaks
    # the generated driver drops the same values at the same nodes
    monkeypatch.setattr(executor, "DRIVERS", True)
    monkeypatch.setattr(executor, "DROP_DEAD", True)
    functions.clear_cache()
    with tf_backend.enabled():
        np.testing.assert_array_equal(np.asarray(chain(x)), ref)
    prog = next(c.program for c in functions._cache.values() if "chain" in c.name)
    src = prog.driver.source
    assert sum(len(d) for d in prog.drops) == src.count("] = None") >= 20
    assert src.count("del i") >= 12      # a node's locals let go of its inputs too
    for n in prog.nodes:
        for s in prog.drops[n.id]:
            assert f"vals[{s}] = None" in src.split(f"# #{n.id} ")[1].split("# #")[0]


def test_xla_compile_clusters_inside_a_function_run_as_tensorflow_does(tf):
    """tf.xla.experimental.compile inside a tf.function: its marker ops (XlaClusterOutput) only
    mean something to TensorFlow's graph rewriting, so the function runs on TensorFlow, with the
    reason in the ledger (it used to fail: no kernel for XlaClusterOutput)."""
    @tf.function
    def f(x):
        return tf.xla.experimental.compile(lambda: tf.nn.relu(x) * 2.0)[0]

    x = tf.constant([1.0, -1.0])
    ref = f(x).numpy()
    functions.clear_cache()
    with tf_backend.enabled():
        tf_backend.reset_stats()
        np.testing.assert_array_equal(f(x).numpy(), ref)
        fns = tf_backend.stats()["functions"]
    assert [fn["reason"] for fn in fns.values()] == ["xla_cluster:XlaClusterOutput"], fns


def test_seeded_random_ops_in_a_function_have_their_own_state(tf):
    """A stateful random op inside a function has its own kernel (and generator state) in stock:
    seeded, its first draw equals a fresh eager call's, and calls of the function and of the
    eager op each continue their own sequence. Ours: the node runs through a TensorFlow function
    of its own, not the eager kernel cache the user's eager calls share."""
    def run():
        tf.random.set_seed(0)
        init = lambda: tf.random.uniform([3], seed=42)            # noqa: E731
        drop = tf.function(lambda x: tf.nn.dropout(x, 0.5, seed=7))
        f = tf.function(init)
        out = [init(), f(), init(), f(), drop(tf.ones([8])), drop(tf.ones([8]))]
        return [np.asarray(t) for t in out]

    ref = run()
    functions.clear_cache()
    with tf_backend.enabled():
        tf_backend.reset_stats()
        got = run()
        fb = tf_backend.stats()["ops"]["RandomUniform"]["fallback"]
    np.testing.assert_array_equal(ref[0], ref[1])                  # stock: fresh state each
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)
    assert fb >= 4


def test_random_state_is_one_per_function_across_shape_specialisations(tf):
    """Stock runs one concrete function for every input shape of a [None] signature, so a
    random op's state continues from call to call whatever the shape; our per-shape programs
    share that op's kernel (keyed by function and op name), not one each."""
    def run():
        tf.random.set_seed(1)
        f = tf.function(lambda x: tf.random.shuffle(x, seed=3),
                        input_signature=[tf.TensorSpec([None], tf.int32)])
        return [f(tf.range(n)).numpy().tolist() for n in (4, 6, 4, 6)]

    ref = run()
    functions.clear_cache()
    with tf_backend.enabled():
        got = run()
    assert got == ref


def test_loop_invariant_reads_once_per_loop_run_and_never_past_a_write(tf):
    """A While body reading a variable the loop does not write reads it once per loop run (on
    its first iteration; a loop that runs zero times reads nothing); a loop that writes a
    variable reads every iteration. Both give stock's results."""
    w = tf.Variable(np.arange(4, dtype=np.float32).reshape(2, 2))
    c = tf.Variable(0.0)

    @tf.function
    def invariant(x, n):
        return tf.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tf.tanh(h @ w)), (0, x))[1]

    @tf.function
    def writes(n):
        def body(i, acc):
            c.assign_add(1.0)
            return i + 1, acc + c.read_value()
        return tf.while_loop(lambda i, a: i < n, body, (0, 0.0))[1]

    x = tf.constant(np.ones((3, 2), np.float32))
    ref = [invariant(x, 5).numpy(), invariant(x, 0).numpy()]
    c.assign(0.0)
    ref_w = writes(4).numpy()
    functions.clear_cache()
    with tf_backend.enabled():
        got = [invariant(x, 5).numpy(), invariant(x, 0).numpy()]
        c.assign(0.0)
        got_w = writes(4).numpy()
        progs = {k: v.program for k, v in functions._cache.items() if v.program is not None}
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-6)
    assert got_w == ref_w == 10.0
    notes = {name[0]: " ".join(p.notes) for name, p in progs.items()}
    assert any("loop_reads: 1" in n for k, n in notes.items() if "invariant" in k), notes
    assert not any("loop_reads" in n for k, n in notes.items() if "writes" in k), notes


def _batch_fn(tf, seed):
    """A tf.function reading a [?, 6] batch from an iterator, and a maker of iterators over 10
    rows in batches of 4, 4, 2."""
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal((10, 6)).astype(np.float32)
    w = tf.constant(rng.standard_normal((6, 3)).astype(np.float32))

    @tf.function
    def batch_step(it):
        x = next(it)
        h = tf.nn.relu(tf.matmul(x, w) + 1.0)
        return tf.reduce_sum(h * h, axis=1), tf.transpose(h) * 2.0

    return batch_step, lambda: iter(tf.data.Dataset.from_tensor_slices(xv).batch(4))


def test_driver_runs_nodes_with_run_time_shapes_inline(tf, monkeypatch):
    """Kernel and fused nodes whose output shapes are known only at run time (a batch from a
    dataset iterator inside the function, as in Keras fit, past the specialisations' limit)
    run in the generated driver, sized by their shape functions, not through the interpreter's
    step; results are stock's, for each batch size the iterator yields, and a kernel error is
    still stock's error class."""
    monkeypatch.setattr(functions, "MAX_SPECIALIZED", 0)   # the generic program runs
    f, data = _batch_fn(tf, 5)
    tf_backend.disable()
    it = data()
    ref = [[np.asarray(t) for t in f(it)] for _ in range(3)]
    functions.clear_cache()
    with tf_backend.enabled():
        it = data()
        got = [[np.asarray(t) for t in f(it)] for _ in range(3)]
        prog = next(c.program for c in functions._cache.values() if c.program is not None)
    src = (prog.driver or executor._driver(prog)).source
    assert "RUNK(" in src, src
    assert not any(n.kind in ("kernel", "fused") and f"STEP(N{n.id}," in src
                   for n in prog.nodes), src
    for g, r in zip(got, ref):
        _close(g, r)
    assert [g[1].shape for g in got] == [(3, 4), (3, 4), (3, 2)]

    @tf.function
    def bad(it):
        return tf.reshape(next(it), [7, -1])
    with tf_backend.enabled():
        with pytest.raises(tf.errors.InvalidArgumentError):
            bad(data())


def test_a_batch_from_an_iterator_selects_a_specialised_program(tf):
    """A function reading its batch from an iterator (a Keras fit, evaluate or predict step):
    IteratorGetNext runs in front of the program (lower.hoist_prologue) and each batch shape
    gets a program with static shapes everywhere, as a function input would; results, the
    last partial batch and the exhausted iterator's error are stock's, and the ledger counts
    the hoisted op as TensorFlow's, once per call."""
    hoisted, data = _batch_fn(tf, 9)
    tf_backend.disable()
    it = data()
    ref = [[np.asarray(t) for t in hoisted(it)] for _ in range(3)]
    with pytest.raises(tf.errors.OutOfRangeError):
        hoisted(it)
    functions.clear_cache()
    tf_backend.reset_stats()
    with tf_backend.enabled():
        it = data()
        got = [[np.asarray(t) for t in hoisted(it)] for _ in range(3)]
        with pytest.raises(tf.errors.OutOfRangeError):
            hoisted(it)
        c = next(c for c in functions._cache.values() if "batch_step" in c.name)
        stats = tf_backend.stats()
    for g, r in zip(got, ref):
        _close(g, r)
    assert [n.op for n, _ in c.prologue] == ["IteratorGetNext"]
    assert not any(n.op == "IteratorGetNext" for n in c.program.nodes)
    assert sorted(c.specialized) == [((2, 6),), ((4, 6),)]
    for prog in c.specialized.values():
        assert prog.prologue and all(prog.slot_specs[s].fully_defined for s in prog.inputs
                                     if prog.slot_specs[s].dtype.kind != "O")
        assert all(n.out_specs is not None for n in prog.nodes if n.kind == "kernel")
    assert stats["ops"]["IteratorGetNext"]["fallback"] == 3


def test_graph_attrs_from_node_def_match_get_attr():
    """Lowering reads a graph op's attrs from its NodeDef (tf_adapter._graph_attr_values): the
    values equal Operation.get_attr's for every attr kind a graph has (types, lists of types,
    shapes, lists of shapes, ints, strings, lists of ints, tensors, functions), and the raw and
    canonical forms follow from them (a shape attr canonical as a list, unknown rank None)."""
    import tensorflow as tf
    from tf_backend import tf_adapter as tfa

    @tf.function
    def f(x, k):
        y = tf.nn.conv2d(x, k, [1, 1, 1, 1], "SAME", dilations=[1, 1, 1, 1])
        y = tf.ensure_shape(y, [2, 5, 5, 3])
        y = tf.cond(tf.reduce_sum(y) > 0, lambda: y * 2.0, lambda: y)
        s = tf.strings.as_string(tf.reduce_sum(y))
        return tf.raw_ops.IdentityN(input=[y, s]), tf.constant([[1.0, 2.0]])

    g = f.get_concrete_function(tf.TensorSpec([2, 5, 5, 4]), tf.TensorSpec([3, 3, 4, 3])).graph
    seen = set()
    for op in g.get_operations():
        values = tfa._graph_attr_values(op)
        assert [n for n, _, _ in values] == [a.name for a in op.op_def.attr
                                             if a.name in op.node_def.attr]
        for name, kind, v in values:
            want = op.get_attr(name)
            seen.add(kind)
            if kind == "shape":
                assert v == tf.TensorShape(want), (op.type, name)
            else:
                assert v == want, (op.type, name)
    assert {"type", "list(type)", "shape", "list(shape)", "int", "string", "list(int)",
            "tensor", "func"} <= seen, seen
    ensure = next(op for op in g.get_operations() if op.type == "EnsureShape")
    assert tfa.graph_op_attrs(ensure)["shape"] == [2, 5, 5, 3]
    assert dict(zip(*[iter(tfa.raw_attrs(ensure))] * 2))["shape"] == [2, 5, 5, 3]
    const = next(op for op in g.get_operations() if op.type == "Const"
                 and op.outputs[0].shape == (1, 2))
    np.testing.assert_array_equal(tfa.const_value(const), [[1.0, 2.0]])
    assert tfa.graph_op_def(ensure) is tfa.graph_op_def(ensure)
