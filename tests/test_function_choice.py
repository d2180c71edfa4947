"""Whole-function choice by measurement (functions.CHOICE): once settled, a compiled function's
calls alternate between our executor and TensorFlow's run of it; the faster stays, in the
ledger with both medians. The suite runs with the choice off (conftest.py); these tests turn
it on."""
import json

import numpy as np
import pytest
import tensorflow as tf

import tf_backend
from tf_backend import functions, ledger


@pytest.fixture
def measuring(monkeypatch, tmp_path):
    from tf_backend import choices
    # a choice TensorFlow wins is recorded in the cache directory (choices.py): one per test
    monkeypatch.setenv("TF_BACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(choices, "_table", choices.kernels.CacheTable(choices.TABLE))
    monkeypatch.setattr(functions, "CHOICE", "measure")
    monkeypatch.setattr(functions, "CHOICE_RUNS", 3)
    tf_backend.enable()
    yield
    tf_backend.disable()


def _calls(f, x, n):
    return [f(x).numpy() for _ in range(n)]


def _trial_calls(trials=1):
    """Calls enough to settle a small function and finish `trials` trials (the first after
    CHOICE_AFTER calls on our executor; blocks of CHOICE_BLOCK per side, the first call of
    each untimed; TensorFlow's choice takes CHOICE_CONFIRM_TENSORFLOW trials)."""
    per_block = functions.CHOICE_BLOCK - 1
    one = 2 * functions.CHOICE_BLOCK * -(-functions.CHOICE_RUNS // per_block) + 2
    return functions.CHOICE_AFTER + trials * (one + functions.CHOICE_BLOCK) + 4


def _tf_trials():
    return _trial_calls(functions.CHOICE_CONFIRM_TENSORFLOW)


def _choice(name_part):
    fs = tf_backend.stats()["functions"]
    got = [f for k, f in fs.items() if name_part in k and f.get("choice")]
    return got[-1] if got else None


@pytest.mark.parametrize("forced", ["tensorflow", "ours"])
def test_the_faster_side_runs_the_function_and_results_stay_stock(measuring, monkeypatch, forced):
    tf_backend.disable()
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4))

    @tf.function
    def choice_probe(x):
        return tf.nn.relu(tf.matmul(x, w) - 3.0)

    x = tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    ref = choice_probe(x).numpy()
    tf_backend.enable()
    # the measured medians decide: make the other side look slower
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e9 if forced == "tensorflow" else 1e-9)
    tf_backend.reset_stats()   # _choice reads this test's function only
    outs = _calls(choice_probe, x, _tf_trials())
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-6)
    got = _choice("choice_probe")
    assert got is not None and got["choice"]["runs"] == forced
    assert got["choice"]["ours_ms"] > 0 and got["choice"]["tensorflow_ms"] > 0
    tf_backend.reset_stats()
    _calls(choice_probe, x, 3)
    f = [v for k, v in tf_backend.stats()["functions"].items() if "choice_probe" in k][-1]
    assert (f["fallback_calls"], f["calls"]) == ((3, 0) if forced == "tensorflow" else (0, 3))


def test_functions_with_kernel_state_stay_on_our_executor(measuring, monkeypatch):
    """A seeded stateful random op keeps its state in its kernel: alternating between ours and
    TensorFlow's function would repeat draws."""
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e9)

    @tf.function
    def seeded(x):
        return x + tf.random.uniform([4], seed=1)

    x = tf.zeros([4])
    draws = _calls(seeded, x, _trial_calls())
    assert len({d.tobytes() for d in draws}) == len(draws)
    assert _choice("seeded") is None


def _probe():
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4))

    @tf.function
    def probe(x):
        return tf.nn.relu(tf.matmul(x, w) - 3.0)

    return probe, tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))


def _sides(monkeypatch):
    """The side each call ran on, in order ("tf" / "ours"), from the ledger's call counts."""
    seen = []
    orig = ledger.function_called

    def called(name, fallback):
        if "probe" in name:
            seen.append("tf" if fallback else "ours")
        orig(name, fallback)

    monkeypatch.setattr(ledger, "function_called", called)
    return seen


def test_trial_runs_each_side_in_blocks(measuring, monkeypatch):
    """Each side runs CHOICE_BLOCK calls in a row while measuring (TensorFlow timed right
    after our kernels ran slower than alone: the choice leaned to ours)."""
    probe, x = _probe()
    seen = _sides(monkeypatch)
    _calls(probe, x, _trial_calls())
    assert _choice("probe") is not None
    first = seen.index("tf")
    blk = functions.CHOICE_BLOCK
    trial = seen[first:first + 2 * blk]
    assert trial == ["tf"] * blk + ["ours"] * blk


def test_a_function_called_a_few_times_runs_on_our_executor_only(measuring, monkeypatch):
    """No trial before CHOICE_AFTER calls on our executor: Keras' predict of a few batches
    would pay TensorFlow's first runs of its step beside ours and end before the trial."""
    probe, x = _probe()
    seen = _sides(monkeypatch)
    _calls(probe, x, functions.CHOICE_AFTER)
    assert seen == ["ours"] * functions.CHOICE_AFTER
    _calls(probe, x, _trial_calls() - functions.CHOICE_AFTER)
    assert "tf" in seen and _choice("probe") is not None


def test_a_choice_of_ours_is_measured_again(measuring, monkeypatch):
    """A trial taken while the machine was busy can keep a function on our executor wrongly:
    it is measured again after CHOICE_RECHECK calls (then 10x as many); TensorFlow's choice
    is final."""
    monkeypatch.setattr(functions, "CHOICE_RECHECK", 3)
    probe, x = _probe()
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e-9)   # first trial: ours
    _calls(probe, x, _trial_calls())
    got = _choice("probe")
    assert got["choice"]["runs"] == "ours" and got["choice"]["trials"] == 1
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e9)    # measured again: TensorFlow
    _calls(probe, x, 3 + _trial_calls())
    got = _choice("probe")
    assert got["choice"]["runs"] == "tensorflow" and got["choice"]["trials"] == 2
    seen = _sides(monkeypatch)
    _calls(probe, x, 40)
    assert seen == ["tf"] * 40


def test_tensorflows_choice_is_noted_on_the_function_until_caches_or_mode_change(
        measuring, monkeypatch):
    probe, x = _probe()
    ref = probe(x).numpy()
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e9)
    _calls(probe, x, _tf_trials())
    assert _choice("probe")["choice"]["runs"] == "tensorflow"
    seen = _sides(monkeypatch)
    _calls(probe, x, 2)
    assert seen == ["tf", "tf"]
    # a disabled backend counts nothing, whatever the note says
    tf_backend.disable()
    np.testing.assert_array_equal(probe(x).numpy(), ref)
    assert seen == ["tf", "tf"]
    tf_backend.enable()
    # programs compiled again: the note names a program that is gone (and lets it go), so
    # ours runs first
    import gc
    import weakref
    prog = weakref.ref(functions._last[0])
    functions._last[0] = None
    functions.clear_cache()
    gc.collect()
    assert prog() is None
    monkeypatch.setattr(functions, "CHOICE", "off")
    np.testing.assert_array_equal(probe(x).numpy(), ref)
    assert seen[-1] == "ours"


@pytest.fixture
def choice_records(measuring, tmp_path):
    return tmp_path


def _probe_stats():
    return [v for k, v in tf_backend.stats()["functions"].items() if "probe" in k][-1]


def test_tensorflows_choice_is_recorded_for_the_next_process(monkeypatch, choice_records):
    """A function TensorFlow won is not compiled again by a later process (a cleared cache and
    a re-read record stand for one): TensorFlow runs it from its first call, the ledger says
    the choice was recorded, results stay stock's. "remeasure" ignores the record, and a change
    to our sources (the key's code digest) does too."""
    from tf_backend import choices
    f, x = _probe()
    tf_backend.disable()
    ref = f(x).numpy()
    tf_backend.enable()
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e9)   # TensorFlow wins the trials
    _calls(f, x, _tf_trials())
    assert (choice_records / choices.TABLE).exists()
    table = json.loads((choice_records / choices.TABLE).read_text())
    assert [v["runs"] for v in table.values()] == ["tensorflow"]

    functions.clear_cache()
    choices.forget()
    tf_backend.reset_stats()
    outs = _calls(f, x, 3)
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-6)
    got = _probe_stats()
    assert got["reason"] == functions.RECORDED and not got["compiled"]
    assert got["choice"]["recorded"] and got["choice"]["runs"] == "tensorflow"
    assert (got["calls"], got["fallback_calls"]) == (0, 3)

    monkeypatch.setattr(functions, "CHOICE", "remeasure")
    functions.clear_cache()
    tf_backend.reset_stats()
    _calls(f, x, 1)
    assert _probe_stats()["compiled"]

    monkeypatch.setattr(functions, "CHOICE", "measure")
    monkeypatch.setattr(choices, "_code", ["another version of our code"])
    functions.clear_cache()
    tf_backend.reset_stats()
    _calls(f, x, 1)
    assert _probe_stats()["compiled"]


def test_our_executors_choice_is_recorded_and_the_next_process_skips_the_trial(
        monkeypatch, choice_records):
    """A function our executor won runs on it from the first call in a later process (a
    cleared cache and a re-read record stand for one): no trial, so none of its calls on
    TensorFlow (whose first run is its graph optimisation), measured again after
    CHOICE_RECHECK calls; results stay stock's."""
    from tf_backend import choices
    f, x = _probe()
    tf_backend.disable()
    ref = f(x).numpy()
    tf_backend.enable()
    monkeypatch.setattr(functions, "CHOICE_MARGIN", 1e-9)   # our executor wins
    _calls(f, x, _trial_calls())
    assert _choice("probe")["choice"]["runs"] == "ours"
    table = json.loads((choice_records / choices.TABLE).read_text())
    assert [v["runs"] for v in table.values()] == ["ours"]

    functions.clear_cache()
    choices.forget()
    tf_backend.reset_stats()
    outs = _calls(f, x, _trial_calls())
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-6)
    got = _probe_stats()
    assert got["compiled"] and got["choice"]["recorded"] and got["choice"]["runs"] == "ours"
    assert (got["calls"], got["fallback_calls"]) == (len(outs), 0)
    (c,) = [c for k, c in functions._cache.items() if "probe" in k[0]]
    assert c.program.choice_recheck == functions.CHOICE_RECHECK


def test_a_records_key_does_not_depend_on_the_function_counter():
    """Nested functions' names end in a process-wide counter: the same function traced after
    other functions (ours or TensorFlow's) gets the same key."""
    from tf_backend import choices

    def make():
        @tf.function
        def loop(x):
            return tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0), (0, x))[1]
        return loop

    x = tf.constant([1.0, 2.0])
    g1 = make().get_concrete_function(x).graph
    tf.function(lambda y: y + 1.0).get_concrete_function(x)   # moves the counter
    g2 = make().get_concrete_function(x).graph
    names = [[f.signature.name for f in g.as_graph_def().library.function] for g in (g1, g2)]
    assert names[0] != names[1]
    assert choices.key(g1, [x]) == choices.key(g2, [x]) is not None
    g3 = tf.function(lambda y: tf.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, v * 2.0),
                                             (0, y))[1]).get_concrete_function(x).graph
    assert choices.key(g3, [x]) != choices.key(g1, [x])

    def grad_fn():   # a custom gradient's op type ends in a process-wide uid
        @tf.custom_gradient
        def clip(v):
            return tf.identity(v), lambda dy: tf.clip_by_value(dy, -1.0, 1.0)
        return tf.function(lambda y: clip(y) * 2.0).get_concrete_function(x).graph

    g4 = grad_fn()
    tf.custom_gradient(lambda v: (v + 0.0, lambda dy: dy))(x)   # moves the uid
    g5 = grad_fn()
    texts = [str(g.as_graph_def()) for g in (g4, g5)]
    assert "CustomGradient-" in texts[0] and texts[0] != texts[1]
    assert choices.key(g4, [x]) == choices.key(g5, [x]) is not None


def test_a_multi_worker_step_needs_tensorflow_clearly_faster_and_keeps_its_choice():
    """A function with collectives is timed on every worker at once; where the workers cannot
    agree (no all-reduce of constant group to agree through: here its group is an input), each
    decides alone: within CHOICE_MARGIN_COLLECTIVE both keep our executor (workers that chose
    differently waited for each other), and the choice is final (no re-trial to flip one worker
    later). tests/test_multiworker.py has workers agreeing."""
    from types import SimpleNamespace as NS

    def prog(op):
        return NS(nodes=[NS(op="MatMul", subs=(), inputs=(0, 1)),
                         NS(op=op, subs=(), inputs=(2, 3, 4, 5))], consts={}, choice=None,
                  choice_rounds=0, choice_calls=0, choice_recheck=0, agreement=None)
    close = {"ours": [1.0] * 6, "tensorflow": [0.97] * 6}    # TensorFlow 3% faster
    clear = {"ours": [1.0] * 6, "tensorflow": [0.7] * 6}     # 30% faster
    multi, single = prog("CollectiveReduceV2"), prog("AddV2")
    functions._choose(multi, "multi", close)
    functions._choose(single, "single", close)
    assert (multi.choice, single.choice) == ("ours", None)   # a second trial confirms
    functions._choose(single, "single", close)
    assert single.choice == "tensorflow"
    assert multi.choice_recheck == float("inf")
    again = prog("CollectiveReduceV2")
    functions._choose(again, "again", clear)
    assert again.choice == "tensorflow"
    nested = NS(nodes=[NS(op="While", subs=(prog("CollectiveGatherV2"),))], choice=None,
                choice_rounds=0, choice_calls=0, choice_recheck=0, agreement=None)
    assert functions._has_collectives(nested)


def test_a_failed_agreement_keeps_our_executor(monkeypatch):
    """Workers agree through an all-reduce of their medians (tests/test_multiworker.py); one
    that fails (a peer gone, its timeout) leaves ours running, with the reason in the ledger."""
    import time
    from types import SimpleNamespace as NS
    from tf_backend import tf_adapter

    def gone(*args):
        raise tf.errors.UnavailableError(None, None, "peer gone")
    monkeypatch.setattr(tf_adapter, "execute_stock", gone)
    node = NS(op="CollectiveReduceV2", subs=(), inputs=(0, 1, 2, 3),
              raw_attrs=("T", 1, "merge_op", "Add", "final_op", "Id"))
    prog = NS(nodes=[node], consts={1: np.int32(2), 2: np.int32(5)}, choice=None,
              choice_rounds=0, choice_calls=0, choice_recheck=0, agreement=None)
    ledger.reset()
    functions._choose(prog, "agreeing", {"ours": [1.0] * 6, "tensorflow": [0.5] * 6})
    assert prog.choice == "ours" and prog.agreement   # until the sums are in
    for _ in range(200):
        if prog.agreement["done"]:
            break
        time.sleep(0.01)
    functions._agreed(prog, "agreeing")
    got = ledger.snapshot()["functions"]["agreeing"]["choice"]
    assert prog.choice == "ours" and prog.agreement is False
    assert "UnavailableError" in got["agreed"] and got["tensorflow_ms"] == 500.0


def test_a_multi_worker_steps_tensorflow_choice_is_not_recorded(monkeypatch):
    """Each worker's graph has its own digest: a record read by one worker while the other
    measured made them disagree. Collective functions are measured in every process."""
    from types import SimpleNamespace as NS

    from tf_backend import choices
    recorded = []
    monkeypatch.setattr(choices, "record", lambda *a: recorded.append(a))
    monkeypatch.setattr(functions, "CHOICE", "measure")
    trial = {"ours": [1.0] * 3, "tensorflow": [0.5] * 3}
    for op in ("CollectiveReduceV2", "AddV2"):
        p = NS(nodes=[NS(op=op, subs=())], choice="tensorflow")
        functions._keep(NS(dynamic=(), graph=object(), choice_key=op), p, trial, [])
    assert [r[0] for r in recorded] == ["AddV2"]


def test_a_function_reading_an_iterator_takes_each_batch_once(measuring):
    """A function whose data comes from an iterator (a Keras fit step) has its IteratorGetNext
    hoisted in front of the program (lower.hoist_prologue): the side that runs a call is decided
    before the batch is taken, so while the two sides alternate every call still gets the next
    batch, in order, once; and the choice is the function's, whatever the batch's shape."""
    xv = np.arange(2 * 60, dtype=np.float32).reshape(60, 2)

    @tf.function
    def take(it):
        x = next(it)
        return tf.reduce_sum(x * 2.0 + 1.0, axis=1)

    def data():
        return iter(tf.data.Dataset.from_tensor_slices(xv).batch(3).repeat())
    tf_backend.disable()
    it = data()
    n = _trial_calls() + 4
    ref = [take(it).numpy() for _ in range(n)]
    functions.clear_cache()
    tf_backend.enable()
    it = data()
    got = [take(it).numpy() for _ in range(n)]
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)
    c = next(c for c in functions._cache.values() if "take" in c.name)
    assert [n.op for n, _ in c.prologue] == ["IteratorGetNext"]
    f = _choice("take")
    assert f is not None and f["choice"]["runs"] in ("ours", "tensorflow")


def test_tensorflows_choice_needs_a_second_trial(monkeypatch):
    """A first trial can pay a one-time cost on our side: TensorFlow's win is final (and
    recorded) only when the trial right after it agrees; a second trial our executor wins
    keeps the function ours."""
    from types import SimpleNamespace as NS

    from tf_backend import choices
    recorded = []
    monkeypatch.setattr(choices, "record", lambda *a: recorded.append(a))
    monkeypatch.setattr(functions, "CHOICE", "measure")
    p = NS(nodes=[NS(op="MatMul", subs=())], choice=None, choice_rounds=0, choice_calls=0,
           choice_recheck=0, choice_trial=None)
    c = NS(dynamic=(), graph=object(), choice_key="k")
    slow_first = {"ours": [6.2] * 6, "tensorflow": [2.9] * 6}
    functions._choose(p, "f", slow_first)
    functions._keep(c, p, slow_first, [])
    assert p.choice is None and p.choice_trial is not None and not recorded
    functions._choose(p, "f", {"ours": [2.3] * 6, "tensorflow": [3.2] * 6})
    assert p.choice == "ours" and p.choice_recheck < float("inf")
    q = NS(nodes=p.nodes, choice=None, choice_rounds=0, choice_calls=0, choice_recheck=0,
           choice_trial=None)
    for _ in range(functions.CHOICE_CONFIRM_TENSORFLOW):
        functions._choose(q, "g", slow_first)
    functions._keep(c, q, slow_first, [])
    assert q.choice == "tensorflow" and [r[0] for r in recorded] == ["k"]


def test_a_multi_worker_trial_starts_on_an_aligned_call(measuring, monkeypatch):
    """Workers call a collective step in lockstep but may settle a few calls apart: the trial
    starts only at a call number that is a multiple of CHOICE_ALIGN_COLLECTIVE (two blocks),
    so every worker runs the same side at the same calls (unaligned, each timed its executor
    beside the other's TensorFlow step and the two chose differently)."""
    monkeypatch.setattr(functions, "_has_collectives", lambda prog: True)
    started = []
    real = functions._new_trial

    def new_trial():
        started.append(next(c.calls for k, c in functions._cache.items()
                            if "aligned_probe" in k[0]))
        return real()

    monkeypatch.setattr(functions, "_new_trial", new_trial)

    @tf.function
    def aligned_probe(x):
        return tf.nn.relu(x * 2.0 - 1.0)

    x = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32))
    ref = tf.nn.relu(x * 2.0 - 1.0).numpy()
    for got in _calls(aligned_probe, x, _trial_calls() + 2 * functions.CHOICE_ALIGN_COLLECTIVE):
        np.testing.assert_allclose(got, ref)
    assert started, "no trial started"
    assert started[0] % functions.CHOICE_ALIGN_COLLECTIVE == 0, started
    assert _choice("aligned_probe") is not None
