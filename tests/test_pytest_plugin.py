"""The pytest plugin (--tf-backend modes, per-test ledger in JUnit XML and the JSON-lines stream,
hollow passes) and `tfb conformance` (regressions, timed-out sides, fork chains killed whole)."""
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest

SUITE = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf

    def test_uses_kernels():
        x = tf.constant(np.ones((2, 2), np.float32))
        assert float(tf.reduce_sum(tf.nn.relu(x * 2.0))) == 8.0

    def test_hollow():
        assert tf.constant(1).dtype == tf.int32   # no op runs: a hollow pass

    def test_unregistered():
        tf.math.special.bessel_i0e(tf.constant([1.0]))
""")


def _run(tmp_path, *opts):
    (tmp_path / "test_suite.py").write_text(SUITE)
    xml = tmp_path / "junit.xml"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_BACKEND", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(tmp_path / "test_suite.py"), f"--junitxml={xml}", *opts],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    cases = {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        cases[tc.get("name")] = (props, tc.find("failure") is not None)
    return r, cases


def _report_sums_the_whole_run(report):
    """TF_BACKEND_REPORT under the plugin holds every test's counts, not the last test's."""
    import json
    doc = json.loads(report.read_text())
    assert doc["tests"] == 3 and doc["ops"]["Relu"]["backend"] == 1, doc
    assert doc["ops"]["BesselI0e"]["fallback"] == 1 and doc["totals"]["backend"] >= 3


def test_plugin_on_records_ledger_and_hollow_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_BACKEND_REPORT", str(tmp_path / "report.json"))
    r, cases = _run(tmp_path, "--tf-backend=on")
    assert r.returncode == 0, r.stdout + r.stderr
    _report_sums_the_whole_run(tmp_path / "report.json")
    props, failed = cases["test_uses_kernels"]
    assert not failed and int(props["tf_backend_backend_calls"]) >= 3
    assert '"Relu": 1' in props["tf_backend_ops"]
    assert cases["test_hollow"][0]["tf_backend_hollow"] == "True"
    assert '"BesselI0e": {' in cases["test_unregistered"][0]["tf_backend_fallbacks"]
    assert "1 passing tests ran our kernels, 2 hollow passes" in r.stdout   # Bessel fell back


def test_plugin_summary_counts_xdist_workers_tests(tmp_path, monkeypatch):
    """The summary line, the results stream and TF_BACKEND_REPORT sum the workers' tests."""
    monkeypatch.setenv("TF_BACKEND_REPORT", str(tmp_path / "report.json"))
    r, _ = _run(tmp_path, "--tf-backend=on", "-n", "2",
                f"--tf-backend-results={tmp_path / 'r.jsonl'}")
    assert r.returncode == 0, r.stdout + r.stderr
    _report_sums_the_whole_run(tmp_path / "report.json")
    assert "1 passing tests ran our kernels, 2 hollow passes" in r.stdout   # the workers' tests
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 6 and '"tf_backend_hollow": "True"' in "".join(lines)


def test_plugin_strict_fails_on_fallback(tmp_path):
    r, cases = _run(tmp_path, "--tf-backend=strict")
    assert cases["test_unregistered"][1] and not cases["test_uses_kernels"][1]


def test_plugin_off_is_inert(tmp_path):
    r, cases = _run(tmp_path, "--tf-backend=off")
    assert r.returncode == 0
    assert "tf_backend_backend_calls" not in cases["test_uses_kernels"][0]


CONFORMANCE_SUITE = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python import pywrap_tfe

    def _patched():
        return hasattr(pywrap_tfe.TFE_Py_Execute, "__wrapped__")

    def test_regression():       # passes on stock, fails with the backend on
        assert not _patched()

    def test_fix():              # fails on stock, passes with the backend on
        assert _patched()

    def test_hollow():           # passes both ways, no op runs
        assert tf.constant(2).dtype == tf.int32

    def test_real():             # passes both ways on our kernels
        assert float(tf.reduce_sum(tf.ones((2, 2)) * 2.0)) == 8.0

    def test_known():            # a documented difference
        assert not _patched(), "differs by design"
""")


def test_conformance_command_reports_regression_fix_hollow(tmp_path):
    import json
    (tmp_path / "test_conf.py").write_text(CONFORMANCE_SUITE)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"known": {"test_conf::test_known": "patched by design"}}))
    out = tmp_path / "res.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_BACKEND", None)
    r = subprocess.run([sys.executable, "-m", "tf_backend", "conformance", "--manifest",
                        str(manifest), "--json", str(out), "--", str(tmp_path / "test_conf.py"),
                        "-p", "no:cacheprovider"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    res = json.loads(out.read_text())
    assert r.returncode == 1, r.stdout + r.stderr          # one unexplained regression
    assert [x["test"] for x in res["regressions"]] == ["test_conf::test_regression"]
    assert [x["test"] for x in res["fixes"]] == ["test_conf::test_fix"]
    assert res["hollow"] == ["test_conf::test_hollow"] or "test_conf::test_hollow" in res["hollow"]
    assert [x["test"] for x in res["known"]] == ["test_conf::test_known"]
    assert res["ran_kernels"] >= 1 and "1 regressions, 1 fixes" in r.stdout
    assert res["passed_off"] == 4 and res["passed_on"] == 3
    assert res["backend_ops"].get("Mul", 0) >= 1 and set(res["wall_s"]) == {"off", "on"}


def test_conformance_aggregates_ledgers():
    from tf_backend import conformance
    on = {"m::a": {"outcome": "passed", "props": {
              "tf_backend_backend_calls": "2", "tf_backend_ops": '{"Relu": 2}',
              "tf_backend_fallbacks": '{"Svd": {"not_registered": 3}}'}},
          "m::b": {"outcome": "passed", "props": {
              "tf_backend_backend_calls": "0", "tf_backend_ops": "{}",
              "tf_backend_fallbacks": '{"Svd": {"not_registered": 1}, "Mul": {"dtype:float16": 4}}'}}}
    off = {k: {"outcome": "passed", "props": {}} for k in on}
    res = conformance.compare(off, on)
    assert res["fallback_ops"] == {"Svd": {"not_registered": 4}, "Mul": {"dtype:float16": 4}}
    assert res["backend_ops"] == {"Relu": 2} and res["ran_kernels"] == 1
    assert "Svd 4 (not_registeredx4)" in conformance.format_table(res)


STUCK_SUITE = textwrap.dedent("""
    import os, sys, time

    def _off():
        return "tf_backend.switch" not in sys.modules   # the plugin imports nothing when off

    def test_fast():
        pass

    def test_stuck():            # hangs with the backend off
        while _off():
            time.sleep(1)

    def test_zz_after():         # never reached when off
        pass
""")

FORK_SUITE = textwrap.dedent("""
    import os, sys, time

    def test_fork_chain():       # with the backend off: a chain of 8 forks that never exec
        if "tf_backend.switch" in sys.modules:
            return
        for _ in range(8):
            if os.fork():
                break
            with open(os.environ["PIDS_FILE"], "a") as f:
                f.write(f"{os.getpid()}\\n")
        time.sleep(600)
""")


def _conformance(tmp_path, suite, *opts, env=None):
    import json
    (tmp_path / "test_s.py").write_text(suite)
    out = tmp_path / "res.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    env.pop("TF_BACKEND", None)
    r = subprocess.run([sys.executable, "-m", "tf_backend", "conformance", "--json", str(out),
                        *opts, "--", str(tmp_path / "test_s.py"), "-p", "no:cacheprovider"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return r, json.loads(out.read_text())


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# slow: waits out a side's timeout (~21 s)
@pytest.mark.slow
def test_conformance_timed_out_side_is_reported_not_hidden(tmp_path):
    r, res = _conformance(tmp_path, STUCK_SUITE, "--timeout", "15", "--keep", str(tmp_path / "k"))
    assert r.returncode == 2, r.stdout + r.stderr            # a side did not finish
    off = res["sides"]["off"]
    assert off["status"] == "timed out after 15 s" and res["sides"]["on"]["status"] == "ok"
    assert off["running"] == ["test_s::test_stuck"] and off["finished"] == 1
    assert res["not_run"] == ["test_s::test_stuck", "test_s::test_zz_after"]
    assert res["regressions"] == [] and res["passed_off"] == 1 and res["passed_on"] == 3
    assert "SIDE off DID NOT FINISH: timed out after 15 s; 1 tests finished" in r.stdout
    assert "running when it stopped: test_s::test_stuck" in r.stdout
    assert "--forest" not in r.stdout and (tmp_path / "k" / "log-off.txt").exists()


# slow: runs a chain of forked children to its kill (~7 s)
@pytest.mark.slow
def test_conformance_kills_a_fork_chain(tmp_path):
    pids = tmp_path / "pids.txt"
    r, res = _conformance(tmp_path, FORK_SUITE, "--max-procs", "4", "--timeout", "300",
                          env={"PIDS_FILE": str(pids)})
    assert r.returncode == 2, r.stdout + r.stderr
    assert res["sides"]["off"]["status"].startswith("killed: ")
    assert res["sides"]["off"]["running"] == ["test_s::test_fork_chain"]
    forked = [int(x) for x in pids.read_text().split()]
    assert len(forked) >= 4
    deadline = time.time() + 10
    while any(_alive(p) for p in forked) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in forked)      # the whole chain went, not just its head


def test_plugin_gives_xdist_workers_one_blas_thread(tmp_path):
    """Under -n N the cores already run N workers: BLAS and numba keep to one thread in each."""
    (tmp_path / "test_blas.py").write_text(textwrap.dedent("""
        import os
        import numba
        from threadpoolctl import threadpool_info

        def test_blas_threads():
            n = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
            assert os.environ.get("PYTEST_XDIST_WORKER") and n and set(n) == {1}, n
            assert numba.get_num_threads() == 1
    """))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OPENBLAS_NUM_THREADS="2")
    env.pop("TF_BACKEND", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1",
                        str(tmp_path / "test_blas.py"), "--tf-backend=on"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
