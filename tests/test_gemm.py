"""kernels/cpu/gemm.py without TensorFlow: products on numba's thread team against a float64
result, bit-identical at one thread and at two, for row blocks, column blocks, transposed
operands, both float dtypes and the layouts that go back to np.matmul."""
import numba
import numpy as np
import pytest

from kernels.cpu import gemm

pytestmark = pytest.mark.skipif(not gemm.available(), reason="numpy's BLAS is not scipy-openblas")


@pytest.fixture(autouse=True)
def _fixed_rule(monkeypatch):
    """The kernels themselves, as the fixed rule picks them; the measured choice has its own
    tests below (they turn it back on in a fresh cache directory)."""
    monkeypatch.setattr(gemm, "CHOOSE", False)


def _at_threads(n, fn):
    old = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        return fn()
    finally:
        numba.set_num_threads(old)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M,K,N", [(3136, 64, 256), (49, 512, 2048), (97, 130, 33),
                                   (20, 300, 70), (1, 4096, 512)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_product_matches_float64_and_is_the_same_at_one_and_two_threads(dtype, M, K, N, ta, tb):
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(dtype)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(dtype)
    keep = a.copy(), b.copy()
    av, bv = (a.T if ta else a), (b.T if tb else b)
    outs = []
    for threads in (1, 2):
        out = np.full((M, N), np.nan, dtype)
        _at_threads(threads, lambda: gemm.matmul(av, bv, out))
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    exact = av.astype(np.float64) @ bv.astype(np.float64)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(outs[1], exact, rtol=tol, atol=tol * np.sqrt(K))
    np.testing.assert_array_equal(a, keep[0])
    np.testing.assert_array_equal(b, keep[1])


def test_layouts_blas_cannot_read_and_overlaps_go_to_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((300, 256)).astype(np.float32)
    b = rng.standard_normal((256, 200)).astype(np.float32)
    for av, bv in ((a[:, ::2], b[::2]), (a[::2], b), (a, b[:, ::-1])):
        out = np.empty((av.shape[0], bv.shape[1]), np.float32)
        gemm.matmul(av, bv, out)
        np.testing.assert_allclose(out, av.astype(np.float64) @ bv, rtol=1e-4, atol=1e-3)
    sq = rng.standard_normal((256, 256)).astype(np.float32)
    ref = sq.astype(np.float64) @ sq
    gemm.matmul(sq, sq.copy(), sq)                       # out is an input
    np.testing.assert_allclose(sq, ref, rtol=1e-4, atol=1e-3)
    out = np.empty((300, 400), np.float32)[:, :200]      # rows of the output not contiguous
    gemm.matmul(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_stacked_products_shared_out_among_threads():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 49, 256)).astype(np.float32)
    b = rng.standard_normal((16, 256, 256)).astype(np.float32)
    outs = []
    for threads in (1, 2):
        out = np.full((16, 49, 256), np.nan, np.float32)
        _at_threads(threads, lambda: gemm.matmul_stacked(a, b, out))
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_blas_thread_count_is_one_during_products_and_restored_after_many_threads():
    """OpenBLAS is held to one thread while a product runs and gets its own count back after,
    also when products on several threads overlap (in OpenBLAS 0.3.31 the "thread-local"
    setter is process-wide: per-thread set-and-restore from two threads left it at one)."""
    import threading
    get = gemm._threads["get"]
    before = get()
    assert before > 1 or numba.config.NUMBA_NUM_THREADS == 1, "run with OpenBLAS threads"
    seen = []
    real = gemm._one

    def spy(jobs, double):
        seen.append(get())
        return real(jobs, double)

    a = np.ones((256, 256), np.float32)
    out = np.empty_like(a)
    gemm._one, old = spy, gemm._one
    try:
        _at_threads(1, lambda: gemm.matmul(a, a, out))
    finally:
        gemm._one = old
    assert seen == [1] and get() == before

    def many():
        o = np.empty_like(a)
        for _ in range(200):
            _at_threads(1, lambda: gemm.matmul(a, a, o))

    threads = [threading.Thread(target=many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert get() == before and gemm._threads["holders"] == 0


def test_share_blas_gives_each_local_worker_its_share_and_holds_restore_to_it():
    """Workers of one cluster on this host (switch._share_host) run numpy's OpenBLAS on their
    share of its threads; a one-thread hold in progress restores to the share, not the old
    count."""
    if not gemm.available():
        pytest.skip("numpy's OpenBLAS symbols not found")
    get, set_ = gemm._threads["get"], gemm._threads["set"]
    before = get()
    try:
        set_(4)
        gemm.share_blas(2)
        assert get() == 2
        gemm.share_blas(1)                   # one worker on this host: unchanged
        assert get() == 2
        gemm.single_thread_enter()
        gemm.share_blas(4)                   # 2 // 4 -> at least one thread
        assert get() == 1
        gemm.single_thread_exit()
        assert get() == 1 and gemm._threads["holders"] == 0
        set_(4)
        gemm.single_thread_enter()
        gemm.share_blas(2)
        gemm.single_thread_exit()
        assert get() == 2
    finally:
        set_(before)


def test_products_from_several_threads_at_once():
    """Callers on several threads share numba's team (OpenMP regions from each thread): every
    product is right."""
    import threading
    rng = np.random.default_rng(3)
    cases = [(rng.standard_normal((m, k)).astype(np.float32),
              rng.standard_normal((k, n)).astype(np.float32))
             for m, k, n in [(300, 200, 100), (40, 500, 300), (128, 128, 128), (500, 64, 64)]]
    refs = [a.astype(np.float64) @ b for a, b in cases]
    bad = []

    def work(seed):
        for i in range(40):
            j = (seed + i) % len(cases)
            a, b = cases[j]
            out = np.empty((a.shape[0], b.shape[1]), np.float32)
            gemm.matmul(a, b, out)
            if not np.allclose(out, refs[j], rtol=1e-4, atol=1e-3):
                bad.append((seed, i))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def _foreign(a):
    """A read-only array over memory numpy does not own, as a view of a TensorFlow tensor is."""
    v = np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)
    assert not v.flags.writeable and isinstance(v.base.base, bytes)
    return v


@pytest.mark.parametrize("M,K,N", [(49, 700, 130), (1, 2048, 1000), (128, 64, 64), (7, 33, 150)])
def test_few_row_products_with_a_kept_weight_read_its_transpose(monkeypatch, M, K, N):
    """b_stays and b a read-only view of foreign memory: `_nt` multiplies by b's transpose,
    made once and kept in filter_cache; the result matches float64 and has the same bits at
    one and two threads. Our own (writable) weights are never kept: they go to BLAS."""
    from kernels.cpu import filter_cache
    filter_cache.clear()
    made, runs = [], []
    real_t, real_nt = gemm._transposed, gemm._nt_team
    monkeypatch.setattr(gemm, "_transposed", lambda b: (made.append(1), real_t(b))[1])
    monkeypatch.setattr(gemm, "_nt_team", lambda *args: (runs.append(1), real_nt(*args))[1])
    rng = np.random.default_rng(M * N)
    a = rng.standard_normal((M, K)).astype(np.float32)
    own = rng.standard_normal((K, N)).astype(np.float32)
    b = _foreign(own)
    exact = a.astype(np.float64) @ own.astype(np.float64)
    outs = []
    for threads in (1, 2, 2):
        out = np.full((M, N), np.nan, np.float32)
        _at_threads(threads, lambda: gemm.matmul(a, b, out, b_stays=True))
        outs.append(out)
    assert len(made) == 1 and len(runs) == 3 and filter_cache.entries("transposed") == 1
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[1], outs[2])
    np.testing.assert_allclose(outs[0], exact, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    out = np.empty((M, N), np.float32)
    gemm.matmul(a, own, out, b_stays=True)          # ours: not kept, BLAS
    gemm.matmul(a, b, out)                          # not said to stay: BLAS
    assert len(made) == 1 and len(runs) == 3 and filter_cache.entries() == 1
    np.testing.assert_allclose(out, exact, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    filter_cache.clear()


@pytest.mark.parametrize("M,K,N", [(1, 3000, 1100), (3, 777, 513), (8, 1024, 4096)])
def test_weights_too_large_to_keep_are_read_in_place(monkeypatch, M, K, N):
    """A kept weight whose transpose exceeds a quarter of the cache budget is never transposed
    nor kept (it would evict every other entry each call: VGG16's fc1): `_nn` reads it in its own
    layout; float64-exact within tolerance, the same bits at one and two threads, IEEE
    Inf/NaN kept, and the cache records the refusal."""
    from kernels.cpu import filter_cache
    filter_cache.clear()
    monkeypatch.setattr(filter_cache, "CACHE_BYTES", 4 * K * N * 4 - 1)
    made = []
    real_t = gemm._transposed
    monkeypatch.setattr(gemm, "_transposed", lambda b: (made.append(1), real_t(b))[1])
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((M, K)).astype(np.float32)
    a[0, 5] = np.inf
    own = rng.standard_normal((K, N)).astype(np.float32)
    own[7, 3] = np.nan
    b = _foreign(own)
    outs = []
    for threads in (1, 2):
        out = np.empty((M, N), np.float32)
        _at_threads(threads, lambda: gemm.matmul(a, b, out, b_stays=True))
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    ref = np.empty((M, N), np.float32)
    with np.errstate(all="ignore"):
        np.matmul(a, own, out=ref)
        exact = a.astype(np.float64) @ own.astype(np.float64)
    assert np.array_equal(np.isnan(outs[0]), np.isnan(ref))
    assert np.array_equal(np.isinf(outs[0]), np.isinf(ref))
    fin = np.isfinite(exact)
    np.testing.assert_allclose(outs[0][fin], exact[fin], rtol=1e-4, atol=1e-4 * np.sqrt(K))
    assert not made and filter_cache.entries() == 0
    assert filter_cache.stats()["events"]["transposed:oversized"] == 2
    filter_cache.clear()


def test_few_row_products_keep_ieee_inf_and_nan(monkeypatch):
    """No fast-math assumptions about Inf and NaN: they come out where a float64 product has
    them (0 * Inf = NaN, Inf + finite = Inf)."""
    runs = []
    real_nt = gemm._nt_team
    monkeypatch.setattr(gemm, "_nt_team", lambda *args: (runs.append(1), real_nt(*args))[1])
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 200)).astype(np.float32)
    bt = rng.standard_normal((20, 200)).astype(np.float32)
    a[2, 5] = np.inf
    a[4, 7] = np.nan
    bt[3] = 0
    bt[6, 9] = -np.inf
    out = np.empty((9, 20), np.float32)
    gemm.matmul(a, bt.T, out)
    assert runs, "not the few-row kernel"
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float64) @ bt.T.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(out[fin], ref[fin], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("ashape,bshape,ta,tb", [
    ((1, 128, 256), (256, 96), False, False),     # a Dense layer on a sequence: rows merged
    ((2, 3, 20, 30), (30, 40), False, False),
    ((1, 4, 128, 64), (1, 4, 64, 128), False, True),   # attention scores, b transposed
    ((4, 50, 30), (1, 30, 20), True, False),      # b broadcast over the batch
    ((3, 1, 10, 30), (1, 5, 30, 20), False, False),    # both broadcast: np.matmul
])
def test_batched_products_match_float64_on_one_and_two_threads(ashape, bshape, ta, tb):
    """gemm.matmul_nd: numpy's matmul broadcasting, transposed matrices, the same bits at one
    thread and at two; OpenBLAS is back at its own thread count after."""
    rng = np.random.default_rng(len(ashape) + ashape[-1])
    a = rng.standard_normal(ashape).astype(np.float32)
    b = rng.standard_normal(bshape).astype(np.float32)
    if ta:
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    if tb:
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    before = gemm._threads["get"]()
    outs = []
    for threads in (1, 2):
        out = np.full(exact.shape, np.nan, np.float32)
        _at_threads(threads, lambda: gemm.matmul_nd(a, b, out))
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], exact, rtol=1e-4, atol=1e-4 * np.sqrt(a.shape[-1]))
    assert gemm._threads["get"]() == before


def test_numpy_fallback_runs_with_one_blas_thread(monkeypatch):
    """Products gemm cannot cut run np.matmul with OpenBLAS held to one thread (its own
    workers would spin after the call, taking the cores from numba's team)."""
    seen = []
    real = np.matmul

    class Spy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def matmul(*args, **kw):
            seen.append(gemm._threads["get"]())
            return real(*args, **kw)

    monkeypatch.setattr(gemm, "np", Spy())
    a = np.ones((3, 1, 64, 64), np.float32)
    b = np.ones((1, 5, 64, 64), np.float32)
    out = np.empty((3, 5, 64, 64), np.float32)
    gemm.matmul_nd(a, b, out)
    assert seen == [1]
    np.testing.assert_array_equal(out, 64.0)


def _fresh_choices(monkeypatch, tmp_path):
    monkeypatch.setenv("TF_BACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TF_BACKEND_AUTOTUNE", raising=False)
    monkeypatch.setattr(gemm, "CHOOSE", True)
    monkeypatch.setattr(gemm, "RECORD", True)   # conftest keeps the suite's own off disk
    monkeypatch.setattr(gemm, "_choices", {})
    monkeypatch.setattr(gemm, "_choice_file", {"table": None})


def test_kernel_choice_is_measured_once_recorded_and_reused(monkeypatch, tmp_path):
    """A product more than one kernel can run (here `_nt` on b's transposed layout, the team's
    BLAS blocks, np.matmul) is measured on first use into a scratch output, the choice kept
    for the process and on disk per CPU; a later process loads it instead of measuring, and
    TF_BACKEND_AUTOTUNE=measure measures again. The output holds the chosen kernel's bits."""
    import json
    _fresh_choices(monkeypatch, tmp_path)
    measured = []
    real = gemm._measure
    monkeypatch.setattr(gemm, "_measure",
                        lambda *args: measured.append(args[-1]) or real(*args))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 256)).astype(np.float32)
    bt = rng.standard_normal((96, 256)).astype(np.float32)
    outs = []
    for _ in range(3):
        out = np.full((64, 96), np.nan, np.float32)
        gemm.matmul(a, bt.T, out)
        outs.append(out)
    assert measured == [["nt", "team", "blas"]]
    np.testing.assert_array_equal(outs[0], outs[2])
    table = json.loads((tmp_path / "gemm_choice.json").read_text())
    (host,) = table
    assert "pool=" in host
    (name, choice), = table[host].items()
    assert name == "f|64|256|96|True|False|1" and choice in ("nt", "team", "blas")
    # the choice's own kernel wrote the user's output
    ref = np.empty((64, 96), np.float32)
    {"nt": lambda: gemm._nt_team(a, bt, ref),
     "team": lambda: gemm._run(gemm._one, gemm._team_jobs(a, bt.T, ref, 64, 256, 96), False),
     "blas": lambda: gemm.numpy_matmul(a, bt.T, ref)}[choice]()
    np.testing.assert_array_equal(outs[0], ref)
    # a new process: the recorded choice (here forced to BLAS) is loaded, not measured
    table[host][name] = "blas"
    (tmp_path / "gemm_choice.json").write_text(json.dumps(table))
    monkeypatch.setattr(gemm, "_choices", {})
    monkeypatch.setattr(gemm, "_choice_file", {"table": None})
    ran_nt, real_nt = [], gemm._nt_team
    monkeypatch.setattr(gemm, "_nt_team", lambda *args: ran_nt.append(1))
    out = np.empty((64, 96), np.float32)
    gemm.matmul(a, bt.T, out)
    assert measured == [["nt", "team", "blas"]] and not ran_nt
    np.testing.assert_allclose(out, a.astype(np.float64) @ bt.T, rtol=1e-4, atol=1e-3)
    # TF_BACKEND_AUTOTUNE=measure: measured again
    monkeypatch.setenv("TF_BACKEND_AUTOTUNE", "measure")
    monkeypatch.setattr(gemm, "_choices", {})
    monkeypatch.setattr(gemm, "_choice_file", {"table": None})
    monkeypatch.setattr(gemm, "_nt_team", real_nt)
    gemm.matmul(a, bt.T, np.empty((64, 96), np.float32))
    assert len(measured) == 2


def test_kernel_choice_never_writes_inputs_and_keeps_thread_independent_bits(monkeypatch,
                                                                            tmp_path):
    """Measuring writes only a scratch output; the chosen kernel gives the same bits at one and
    two threads, whichever thread count the measurement ran at."""
    _fresh_choices(monkeypatch, tmp_path)
    rng = np.random.default_rng(6)
    for M, K, N in ((8, 512, 512), (64, 64, 256), (128, 784, 512)):
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        keep = a.copy(), b.copy()
        outs = []
        for threads in (1, 2):
            out = np.full((M, N), np.nan, np.float32)
            _at_threads(threads, lambda: gemm.matmul(a, b, out))
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])
        np.testing.assert_array_equal(a, keep[0])
        np.testing.assert_array_equal(b, keep[1])
        np.testing.assert_allclose(outs[0], a.astype(np.float64) @ b, rtol=1e-4,
                                   atol=1e-4 * np.sqrt(K))
    assert gemm.choice_stats()["shapes"] >= 2   # the largest has the team alone (SOLO_MAX)


def test_float32_tiles_reading_b_in_place_are_a_candidate(monkeypatch, tmp_path):
    """On AVX-512F the float32 tiles reading B in place (bf16_gemm.matmul_f32_into) join the
    measured choice for products whose B rows are contiguous and N a multiple of 16; chosen,
    they write the user's output: IEEE Inf and NaN kept, the same bits at one and two threads,
    inputs untouched. A transposed B is no candidate."""
    from kernels.cpu import bf16_gemm
    if not bf16_gemm.runs_f32():
        pytest.skip("the float32 tiles need AVX-512F")
    _fresh_choices(monkeypatch, tmp_path)
    measured = []
    monkeypatch.setattr(gemm, "_measure", lambda *args: measured.append(args[-1]) or "tiles")
    ran, real = [], gemm._tiles_into
    monkeypatch.setattr(gemm, "_tiles_into", lambda *args: ran.append(1) or real(*args))
    rng = np.random.default_rng(11)
    a = rng.standard_normal((70, 300)).astype(np.float32)
    b = rng.standard_normal((300, 96)).astype(np.float32)
    a[3, 7], a[5, 0], b[9, 40] = np.inf, np.nan, -np.inf
    keep = a.copy(), b.copy()
    outs = []
    for threads in (1, 2):
        out = np.full((70, 96), np.nan, np.float32)
        _at_threads(threads, lambda: gemm.matmul(a, b, out))
        outs.append(out)
    assert measured[0][-1] == "tiles" and ran
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(a, keep[0])
    np.testing.assert_array_equal(b, keep[1])
    with np.errstate(invalid="ignore", over="ignore"):
        exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(outs[0]), np.isnan(exact))
    fin = np.isfinite(exact)
    np.testing.assert_array_equal(outs[0][~fin & ~np.isnan(exact)], exact[~fin & ~np.isnan(exact)])
    np.testing.assert_allclose(outs[0][fin], exact[fin], rtol=1e-4, atol=1e-4 * np.sqrt(300))
    measured.clear()
    gemm.matmul(a, np.ascontiguousarray(b.T).T, np.empty((70, 96), np.float32))
    assert measured and "tiles" not in measured[0]
