"""The model zoo (issue 4): each model x mode matches stock, with >= 95% of executed compute ops on
our kernels by count and by time. Default run: the CI models; `-m slow`: the issue's seven."""
import json

import numpy as np
import pytest

from tf_backend import zoo, zoo_report

MIN_COVERAGE = 0.95


def _check(tf, name, mode):
    import keras
    cell = zoo_report.run_cell(tf, keras, name, mode, repeats=1)
    assert cell["status"] == "ok", cell["error"]
    assert zoo_report.matched(cell), f"{name}/{mode}: {cell['mismatch']}; " \
        f"stock spread: {cell.get('stock_spread')}"
    fb = [(f["op"], f["calls"], f["reasons"]) for f in cell["fallbacks"]]
    assert cell["coverage_count"] >= MIN_COVERAGE, f"by count {cell['coverage_count']}: {fb}"
    assert cell["coverage_time"] >= MIN_COVERAGE, f"by time {cell['coverage_time']}: {fb}"
    assert cell["calls"]["backend"] > 0


# resnet_block's fit compiles the training kernels of two more convolution shapes and their
# batch norms (53 s of a cold default run, small_cnn's fit 8 s): -m slow.
_SLOW_CELLS = {("resnet_block", "fit")}


@pytest.mark.parametrize("name,mode", [
    pytest.param(n, m, marks=[pytest.mark.slow] if (n, m) in _SLOW_CELLS else [])
    for n in zoo_report.CI_MODELS for m in zoo_report.MODES])
def test_ci_models(tf, name, mode):
    _check(tf, name, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", zoo_report.MODES)
@pytest.mark.parametrize("name", zoo_report.ISSUE_MODELS)
def test_issue_models(tf, name, mode):
    _check(tf, name, mode)


@pytest.mark.slow
@pytest.mark.parametrize("name", ("nasnetmobile", "inceptionv3", "resnet50v2"))
def test_graph_heavy_models_in_functions(tf, name):
    """Issue 15's graph-heavy keras.applications models (tfb bench's nasnet-b1, inceptionv3-b1,
    resnet50v2-b1): tf.function inference matches stock with our kernels' coverage."""
    _check(tf, name, "function")


def test_resnet_block_builder(tf):
    import keras
    model = zoo.build("resnet_block", keras)
    types = {type(l).__name__ for l in model.layers}
    assert {"Conv2D", "BatchNormalization", "Add", "Activation"} <= types
    assert model.output_shape == (None, 10)


def test_coverage_excludes_state_ops():
    stats = {"ops": {
        "ReadVariableOp": {"backend": 0, "fallback": 5, "reasons": {"never_intercept": 5}},
        "NoOp": {"backend": 0, "fallback": 1, "reasons": {"never_intercept": 1}},
        "MatMul": {"backend": 3, "fallback": 0, "reasons": {}},
        "Erf": {"backend": 0, "fallback": 1, "reasons": {"not_registered": 1}}}}
    events = [
        {"name": "MatMul", "cat": "eager", "dur": 300.0, "args": {"path": "backend"}},
        {"name": "Erf", "cat": "eager", "dur": 2.0, "args": {"path": "backend"}},   # bounced
        {"name": "Erf", "cat": "eager", "dur": 98.0, "args": {"path": "fallback"}},
        {"name": "n1", "cat": "node", "dur": 50.0,
         "args": {"op": "ReadVariableOp", "kind": "stock", "path": "fallback"}},
        {"name": "w", "cat": "node", "dur": 1e6, "args": {"op": "While", "kind": "while",
                                                          "path": "backend"}},
        {"name": "f", "cat": "function", "dur": 1e6, "args": {}}]
    cov = zoo_report.coverage(stats, events)
    assert cov["count"] == 0.75
    assert cov["time"] == pytest.approx(0.75)
    assert cov["excluded"] == {"ReadVariableOp": 5, "NoOp": 1}
    assert [f["op"] for f in cov["fallbacks"]] == ["Erf"]


def test_coverage_counts_whole_function_fallbacks():
    """A tf.function that ran whole on TensorFlow leaves no per-op ledger entries: its ops (from
    the graph) and its call time count as fallback."""
    stats = {"ops": {"MatMul": {"backend": 2, "fallback": 0, "reasons": {}}}}
    events = [{"name": "MatMul", "cat": "eager", "dur": 100.0, "args": {"path": "backend"}}]
    whole = {"__inference_train_7": {"reason": "unbound_input:x", "calls": 1, "seconds": 3e-4,
                                     "ops": {"MatMul": 1, "Tanh": 1}}}
    cov = zoo_report.coverage(stats, events, whole)
    assert cov["count"] == 0.5
    assert cov["time"] == pytest.approx(0.25)
    assert cov["ops"]["Tanh"]["reasons"] == {"whole_function:unbound_input:x": 1}


def test_within_spread_judges_against_stocks_own_spread():
    """A fit that misses the elementwise tolerance passes only within SPREAD_K x the distance
    between stock's own executions (plus the tolerance's norm); NaN/Inf must agree."""
    from tf_backend import numerics
    ref = np.linspace(-1, 1, 100).astype(np.float32)
    alt = ref + np.float32(0.01)                  # stock's other run: 0.1 apart in 2-norm
    k = numerics.SPREAD_K
    near = ref + np.float32(0.01 * (k - 0.5))
    far = ref + np.float32(0.01 * (k + 0.5))
    assert numerics.compare(near, ref, "reduction", 4096) is not None   # tolerance misses
    assert numerics.within_spread(near, ref, [alt], "reduction", 4096)[0]
    assert not numerics.within_spread(far, ref, [alt], "reduction", 4096)[0]
    assert not numerics.within_spread(near, ref, [ref], "reduction", 4096)[0]   # no spread
    assert numerics.within_spread(far, ref, [ref, alt, ref + 0.02], "reduction", 4096)[0]
    bad = near.copy()
    bad[3] = np.nan
    assert not numerics.within_spread(bad, ref, [alt], "reduction", 4096)[0]


def test_spread_verdicts_in_table():
    cell = {"model": "m", "mode": "fit", "batch": 2, "steps": 2, "status": "ok", "match": False,
            "mismatch": "fit_loss", "error_over_tolerance": 50.0, "coverage_count": 1.0,
            "coverage_time": 1.0, "stock_s": 1.0, "ours_s": 2.0, "ratio": 2.0, "fallbacks": [],
            "stock_spread": {"ok": True, "k": 4.0, "judged_values": 3,
                             "worst": {"value": "fit_loss", "distance": 0.1, "bound": 0.2,
                                       "ratio": 0.5},
                             "alternatives": {"run_eagerly": {"error_over_tolerance": 30.0,
                                                              "mismatch": "fit_loss"}}}}
    assert zoo_report.matched(cell) == "spread" and zoo_report.passes(cell)
    assert zoo_report.rows({"cells": [cell]})[0][3] == "spread (0.5 of spread bound)"
    cell["stock_spread"]["ok"] = False
    assert zoo_report.matched(cell) is None and not zoo_report.passes(cell)
    cell["match"] = True
    assert zoo_report.matched(cell) == "yes"


def test_tfb_zoo_cli(tmp_path, capsys):
    from tf_backend import cli
    out = tmp_path / "zoo.json"
    rc = cli.main(["zoo", "--models", "small_mlp", "--modes", "eager,function", "--repeats", "1",
                   "--json", str(out), "--markdown", "-q"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    doc = json.loads(out.read_text())
    assert [(c["model"], c["mode"]) for c in doc["cells"]] == [("small_mlp", "eager"),
                                                               ("small_mlp", "function")]
    assert all(c["match"] and c["coverage_count"] == 1.0 for c in doc["cells"])
    assert "| small_mlp | eager |" in printed and "exclude" in doc["coverage_excludes"]


def test_tfb_zoo_cli_rejects_unknown_model(capsys):
    from tf_backend import cli
    with pytest.raises(SystemExit) as e:
        cli.main(["zoo", "--models", "nope"])
    assert e.value.code == 2
