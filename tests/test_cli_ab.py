"""`tfb ab` / `tfb bench` end to end on tiny targets (few repeats), plus their pure helpers."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tf_backend import cli
from tf_backend.ab import schema, script, targets, timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ["--repeats", "3", "--warmup", "1", "--op-times", "1", "-q"]


def _ab(argv, capsys):
    rc = cli.main(["ab"] + argv)
    return rc, capsys.readouterr().out


def _load(path):
    with open(path) as f:
        return schema.validate(json.load(f))


def _is_png(path):
    with open(path, "rb") as f:
        return os.path.getsize(path) > 1000 and f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bundled_model_all_arms_json_and_plot(tf, tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    rc, text = _ab(["--model", "small_mlp", "--json", str(out_json), "--plot", str(out_png)]
                   + FAST, capsys)
    assert rc == 0, text
    doc = _load(out_json)
    assert doc["target"] == {"kind": "model", "name": "small_mlp",
                             "inputs": [{"shape": [1, 20], "dtype": "float32"}], "notes": []}
    assert [r["arm"] for r in doc["runs"]] == ["stock_eager", "stock_function", "stock_xla",
                                               "ours_eager", "ours_function"]
    assert all(r["status"] == "ok" and r["summary"]["n"] == 3 for r in doc["runs"])
    pairs = {(r["numerator"], r["denominator"]) for r in doc["ratios"]}
    assert ("ours_eager", "stock_eager") in pairs and ("ours_function", "stock_function") in pairs
    main = [n for n in doc["numerics"] if n["role"] == "backend"]
    assert main and all(n["verdict"] == "ok" and n["shape"] == [1, 3] for n in main)
    assert doc["coverage"]["ours_eager"]["ops"]["MatMul"]["backend"] == 3
    assert set(doc["top_ops"]) == {"stock_eager", "ours_eager"}
    assert "MatMul" in {o["op"] for o in doc["top_ops"]["ours_eager"]["ops"]}
    assert _is_png(out_png)
    for needle in ("latency per call", "ours eager / stock eager", "numerics", "op coverage",
                   "top ops by time"):
        assert needle in text
    import tf_backend
    assert tf_backend.mode() == "off"


def test_keras_file_eager_only(tf, tmp_path, capsys):
    import keras

    from tf_backend import zoo
    path = tmp_path / "m.keras"
    zoo.build("small_cnn", keras).save(path)
    out_json = tmp_path / "r.json"
    rc, text = _ab([str(path), "--modes", "eager", "--batch", "2", "--json", str(out_json)]
                   + FAST, capsys)
    assert rc == 0, text
    doc = _load(out_json)
    assert doc["target"]["kind"] == "keras_file"
    assert doc["target"]["inputs"] == [{"shape": [2, 16, 16, 3], "dtype": "float32"}]
    assert [r["arm"] for r in doc["runs"]] == ["stock_eager", "ours_eager"]
    assert doc["coverage"]["ours_eager"]["ops"]["Conv2D"]["backend"] == 2


def test_saved_model_with_input_shape(tf, tmp_path, capsys):
    import keras

    from tf_backend import zoo
    export = tmp_path / "saved"
    zoo.build("small_mlp", keras).export(str(export), verbose=False)
    out_json = tmp_path / "r.json"
    rc, text = _ab([str(export), "--input-shape", "4,20", "--no-xla", "--json", str(out_json)]
                   + FAST, capsys)
    assert rc == 0, text
    doc = _load(out_json)
    assert doc["target"]["kind"] == "saved_model" and doc["target"]["notes"]
    assert doc["target"]["inputs"][0]["shape"] == [4, 20]
    assert all(r["status"] == "ok" for r in doc["runs"])


def test_callable_contract(tf, tmp_path, capsys):
    mod = tmp_path / "mk.py"
    mod.write_text(textwrap.dedent("""
        import numpy as np
        import tensorflow as tf

        def make():
            x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(8, 8)
            return (lambda a: {"y": tf.nn.relu(tf.matmul(a, a)), "s": tf.reduce_sum(a)}), [x]
    """))
    out_json = tmp_path / "r.json"
    rc, text = _ab(["--callable", f"{mod}:make", "--no-xla", "--json", str(out_json)] + FAST,
                   capsys)
    assert rc == 0, text
    doc = _load(out_json)
    assert doc["target"]["kind"] == "callable"
    rows = [n for n in doc["numerics"] if n["arm"] == "ours_eager"]
    assert len(rows) == 2 and all(n["verdict"] == "ok" for n in rows)


def test_script_mode(tmp_path, capsys):
    train = tmp_path / "train.py"
    train.write_text(textwrap.dedent("""
        import tensorflow as tf
        x = tf.reshape(tf.range(16, dtype=tf.float32), (4, 4))
        y = tf.nn.relu(tf.matmul(x, x) - 300.0)
        print("epoch 1/1 - loss: 9.5 - accuracy: 0.25")
        print(f"final loss={float(tf.reduce_mean(y)) / 1000:.4f} accuracy: 0.5")
    """))
    out_json, out_png = tmp_path / "s.json", tmp_path / "s.png"
    rc, text = _ab(["--json", str(out_json), "--plot", str(out_png), "-q", "--",
                    sys.executable, str(train)], capsys)
    assert rc == 0, text
    doc = _load(out_json)
    assert doc["target"]["kind"] == "script" and doc["target"]["name"] == "train.py"
    runs = {r["arm"]: r for r in doc["runs"]}
    assert runs["stock_script"]["returncodes"] == [0] == runs["ours_script"]["returncodes"]
    assert runs["ours_script"]["max_rss_mib"][0] > 50
    metrics = {n["name"]: n for n in doc["numerics"]}
    assert set(metrics) == {"loss", "accuracy"} and metrics["accuracy"]["ours"] == 0.5
    assert metrics["loss"]["stock"] == metrics["loss"]["ours"]
    ledger = doc["coverage"]["ours_script"]
    assert ledger["ops"]["MatMul"]["backend"] == 1
    assert _is_png(out_png)
    assert "peak memory" in text


def test_script_failure_exit_code(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("raise SystemExit('boom')\n")
    rc, text = _ab(["-q", "--", sys.executable, str(bad)], capsys)
    assert rc == 1 and "exit code 1" in text


def test_bench_only_one_tiny_workload(tf, tmp_path, capsys):
    out_json = tmp_path / "b.json"
    rc = cli.main(["bench", "--only", "small-op", "--repeats", "2", "--warmup", "1", "--quick",
                   "--arms", "stock_eager,stock_function,ours_eager,ours_function",
                   "--json", str(out_json), "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    with open(out_json) as f:
        doc = schema.validate_bench(json.load(f))
    (w,) = doc["workloads"]
    assert w["name"] == "small-op" and len(w["runs"]) == 4
    assert all(r["status"] == "ok" for r in w["runs"])
    assert w["coverage"]["ours_eager"]["ops"]["AddV2"]["backend"] == 1
    assert "small-op" in text


@pytest.mark.parametrize("only", [
    "cnn-train-step,bf16-predict",
    # the bfloat16 training kernels (convolution backprops by bfloat16 blocks, pooling
    # gradients): 50 s of compiling on a cold cache
    pytest.param("bf16-train-step", marks=pytest.mark.slow)])
def test_bench_training_script_and_mixed_precision_workloads(tf, tmp_path, capsys, only):
    """Issue 16's workloads: the Keras training script's step and the mixed_bfloat16 CNN
    (train step, predict) run on both sides; the predict's outputs are checked at bfloat16's
    tolerance, and ours run its products on our kernels."""
    out_json = tmp_path / "b.json"
    rc = cli.main(["bench", "--only", only, "--repeats", "2", "--warmup", "1", "--quick",
                   "--arms", "stock_function,ours_function", "--json", str(out_json), "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    with open(out_json) as f:
        doc = schema.validate_bench(json.load(f))
    got = {w["name"]: w for w in doc["workloads"]}
    assert set(got) == set(only.split(","))
    for w in got.values():
        assert all(r["status"] == "ok" for r in w["runs"]), w["runs"]
    if "bf16-predict" in got:
        (row,) = [r for r in got["bf16-predict"]["numerics"] if r["arm"] == "ours_function"]
        assert row["verdict"] == "ok" and row["compute_dtype"] == "bfloat16", row
        ops = got["bf16-predict"]["coverage"]["ours_function"]["ops"]
        assert ops["Conv2D"]["backend"] > 0 and ops["MatMul"]["backend"] > 0, ops
    for name in {"cnn-train-step", "bf16-train-step"} & set(got):
        assert got[name]["coverage"]["ours_function"]["ops"]["Conv2DBackpropFilter"][
            "backend"] > 0


def test_outputs_of_a_narrower_compute_dtype_compared_at_its_tolerance():
    from tf_backend.ab import compare

    class Arm:
        def __init__(self, out):
            self.outputs = [np.asarray(out, np.float32)]

    ref = np.linspace(0.1, 1.0, 50)
    for scale, narrow_ok in ((1.005, True), (1.2, False)):
        arms = {"stock_function": Arm(ref), "ours_function": Arm(ref * scale)}
        plain = [r for r in compare.output_rows(arms) if r["arm"] == "ours_function"]
        narrow = [r for r in compare.output_rows(arms, compute_dtype="bfloat16")
                  if r["arm"] == "ours_function"]
        assert plain[0]["verdict"] == "mismatch"
        assert (narrow[0]["verdict"] == "ok") == narrow_ok, narrow


def test_an_output_outside_the_tolerance_is_ok_within_stocks_own_spread():
    """numerics.within_spread: ours as far from stock eager as stock's XLA run is (a GEMM chain
    summed in another order) passes; ours far beyond that spread does not; without another stock
    execution there is no spread to judge by."""
    from tf_backend.ab import compare

    class Arm:
        def __init__(self, out):
            self.outputs = [np.asarray(out, np.float32)]

    rng = np.random.default_rng(0)
    ref = rng.standard_normal(4096).astype(np.float32)
    ref[7] = 1e-3   # an element that cancels towards zero: its relative error is large
    noise = np.zeros(4096, np.float32)
    noise[7] = 5e-4
    xla = ref + noise
    for ours, ok in ((ref - noise, True), (ref + 40 * noise, False)):
        arms = {"stock_eager": Arm(ref), "stock_xla": Arm(xla), "ours_eager": Arm(ours)}
        (row,) = [r for r in compare.output_rows(arms) if r["arm"] == "ours_eager"]
        assert (row["verdict"] == "ok") == ok, row
        assert row["spread"] is not None and row["spread"]["ok"] == ok
    (row,) = [r for r in compare.output_rows({"stock_eager": Arm(ref), "ours_eager": Arm(ref - noise)})
              if r["arm"] == "ours_eager"]
    assert row["verdict"] == "mismatch" and row["spread"] is None


def test_usage_errors(capsys):
    for argv in (["ab"] + FAST, ["ab", "--model", "small_mlp", "--callable", "m:f"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["ab", "--model", "small_mlp", "--modes", "graph"])
    with pytest.raises(SystemExit):
        cli.main(["bench", "--only", "no-such-workload"])
    assert cli.main(["frobnicate"]) == 2
    capsys.readouterr()


def test_module_entry_point_help():
    r = subprocess.run([sys.executable, "-m", "tf_backend", "ab", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--callable" in r.stdout and "tensorflow" not in r.stderr


def test_find_metrics():
    out = ("Epoch 1/2\r10/10 [====] - loss: 0.51 - acc: 0.7\nEpoch 2/2\n"
           "10/10 - loss: 0.25 - acc: 0.9\n")
    assert script.find_metrics(out) == {"loss": 0.25, "acc": 0.9}
    assert script.find_metrics("val_loss=1e-3 step=5\ndone\n") == {"val_loss": 1e-3}
    assert script.find_metrics("nothing here: 3 items\n") == {}
    # a script's own print: "fit+build 6.80 s loss 2.3017"
    assert script.find_metrics("fit+build 6.80 s loss 2.3017\n") == {"loss": 2.3017}
    assert script.find_metrics("epoch 3 accuracy 0.91 val_loss=0.2\n") == {
        "accuracy": 0.91, "val_loss": 0.2}


def test_parse_shape_and_bootstrap():
    assert targets.parse_shape("1,224,224,3") == (1, 224, 224, 3)
    with pytest.raises(ValueError):
        targets.parse_shape("1,a")
    rng = np.random.default_rng(1)
    r = timing.bootstrap_ratio(2 + 0.1 * rng.random(30), 1 + 0.1 * rng.random(30))
    assert 1.8 < r["ci_low"] <= r["ratio"] <= r["ci_high"] < 2.2


def test_samples_time_calls_back_to_back():
    """After a side switch, untimed calls run for REWARM_S (at least `rewarm`), and a sample
    is the mean of calls lasting SAMPLE_S (at least `inner`): a short function is timed as a
    loop calls it, not as the first call after the other runtime ran."""
    import time
    import types

    log = []

    def arm(name, seconds):
        def call():
            log.append(name)
            t = time.perf_counter()
            while time.perf_counter() - t < seconds:
                pass
        return types.SimpleNamespace(name=name, side="stock", error=None, call=call)

    fast, slow = arm("fast", 0.0002), arm("slow", 0.03)
    samples = timing.measure([fast, slow], repeats=2, rewarm=1, inner=1)
    n_fast = log.count("fast") / 2          # per round: re-warm calls, then timed ones
    assert n_fast >= 10                     # far more than rewarm + inner (2)
    assert log.count("slow") == 2 * 2       # one re-warm and one timed call a round
    assert all(0.0002 <= s < 0.002 for s in samples["fast"]), samples
    assert all(0.03 <= s < 0.06 for s in samples["slow"]), samples
    log.clear()
    timing.measure([fast], repeats=1, rewarm=0, inner=3)   # --quick: no re-warm
    assert 10 <= len(log) <= timing.SAMPLE_S / 0.0002 + 1
