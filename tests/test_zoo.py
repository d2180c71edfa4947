"""The model zoo (issue 4): each model x mode matches stock, with >= 95% of executed compute ops on
our kernels by count and by time. Default run: the CI models; `-m slow`: the issue's seven."""
import json

import pytest

from tf_backend import zoo, zoo_report

MIN_COVERAGE = 0.95


def _check(tf, name, mode):
    import keras
    cell = zoo_report.run_cell(tf, keras, name, mode, repeats=1)
    assert cell["status"] == "ok", cell["error"]
    assert cell["match"], f"{name}/{mode}: {cell['mismatch']}"
    fb = [(f["op"], f["calls"], f["reasons"]) for f in cell["fallbacks"]]
    assert cell["coverage_count"] >= MIN_COVERAGE, f"by count {cell['coverage_count']}: {fb}"
    assert cell["coverage_time"] >= MIN_COVERAGE, f"by time {cell['coverage_time']}: {fb}"
    assert cell["calls"]["backend"] > 0


@pytest.mark.parametrize("mode", zoo_report.MODES)
@pytest.mark.parametrize("name", zoo_report.CI_MODELS)
def test_ci_models(tf, name, mode):
    _check(tf, name, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", zoo_report.MODES)
@pytest.mark.parametrize("name", zoo_report.ISSUE_MODELS)
def test_issue_models(tf, name, mode):
    _check(tf, name, mode)


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
