"""The front door: installs that keep the start-up file, the warning when it is missing, doctor.

The install tests build scratch venvs with the pip `python3 -m venv` gives (pip 23.x takes the
legacy `setup.py develop` path for a project without pyproject.toml whenever setuptools and
wheel are both installed, and that path drops the start-up file).
"""
import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_PYTHON = getattr(sys, "_base_executable", None) or shutil.which("python3")


def _venv(tmp_path):
    subprocess.run([BASE_PYTHON, "-m", "venv", str(tmp_path / "v")], check=True)
    py = tmp_path / "v" / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return str(py), site


def _pip(py, *args):
    r = subprocess.run([py, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def _flag_reaches_startup(py, cwd):
    code = "import sys; print('tf_backend._startup' in sys.modules)"
    r = subprocess.run([py, "-c", code], env=dict(os.environ, TF_BACKEND="1"), cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip() == "True"


def _copy_checkout(tmp_path):
    src = tmp_path / "checkout"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", "build", "integration"))
    return str(src)


# slow: three pip installs (~30 s); integration/fresh_machine.sh runs README's first install
@pytest.mark.slow
def test_repeated_editable_installs_keep_the_startup_file(tmp_path):
    """Editable install, again with `wheel` present (as TensorFlow's dependencies bring it),
    then a wheel install: the start-up file is in site-packages after each, and the flag runs
    it from an unrelated directory."""
    py, site = _venv(tmp_path)
    src = _copy_checkout(tmp_path)
    pth = os.path.join(site, "tf_backend_startup.pth")
    _pip(py, "install", "--no-deps", "-e", src)
    assert os.path.isfile(pth)
    _pip(py, "install", "wheel", "setuptools")
    for _ in range(2):
        _pip(py, "install", "--no-deps", "-e", src)
        assert os.path.isfile(pth), os.listdir(site)
        assert not os.path.exists(os.path.join(site, "easy-install.pth")), "legacy develop path"
        assert _flag_reaches_startup(py, str(tmp_path))
    _pip(py, "uninstall", "-y", "tf_backend")
    assert not os.path.isfile(pth)
    _pip(py, "install", "--no-deps", src)
    assert os.path.isfile(pth)
    assert _flag_reaches_startup(py, str(tmp_path))


@pytest.mark.slow
def test_readme_commands_in_sequence_then_the_flag(tmp_path):
    """README's main-job command, then its test command's install, in one checkout and venv,
    then TF_BACKEND=1 on an unmodified script runs our kernels (ledger written at exit)."""
    import re
    text = open(os.path.join(ROOT, "README.md")).read()
    main_cmd, test_cmd = re.findall(r"```bash\n(python3 -m venv[^\n]*)\n```", text)
    src = _copy_checkout(tmp_path)
    shutil.copytree(os.path.join(ROOT, "integration"), os.path.join(src, "integration"))
    env = dict(os.environ, PATH=os.path.dirname(BASE_PYTHON) + os.pathsep + os.environ["PATH"])
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(main_cmd, shell=True, cwd=src, env=env, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    install_only = test_cmd.split(" && .venv/bin/python -m pytest")[0]
    r = subprocess.run(install_only, shell=True, cwd=src, env=env, capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    script = tmp_path / "script.py"
    script.write_text("import tensorflow as tf\nprint(float(tf.reduce_sum(tf.nn.relu("
                      "tf.constant([1.0, -2.0, 3.0]) * 2.0))))\n")
    report = tmp_path / "report.json"
    r = subprocess.run([os.path.join(src, ".venv", "bin", "python"), str(script)], cwd=tmp_path,
                       env=dict(env, TF_BACKEND="1", TF_BACKEND_REPORT=str(report)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "8.0", r.stderr[-3000:]
    totals = json.loads(report.read_text())["totals"]
    assert totals["backend"] >= 3, totals


def test_backend_import_warns_when_the_flag_cannot_reach_startup(monkeypatch):
    from tf_backend import _startup
    monkeypatch.setenv("TF_BACKEND", "1")
    monkeypatch.setattr(_startup, "_warned", False)
    monkeypatch.setattr(_startup, "startup_file", lambda: None)
    with pytest.warns(RuntimeWarning, match="tf_backend_startup.pth is not in"):
        _startup.check_flag_reaches_startup()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _startup.check_flag_reaches_startup()   # once
    monkeypatch.setattr(_startup, "_warned", False)
    monkeypatch.setenv("TF_BACKEND", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _startup.check_flag_reaches_startup()   # flag off: nothing to say


def test_doctor_reports_and_exit_code(monkeypatch, capsys):
    from tf_backend import _startup, doctor
    assert doctor.main(["--json", "--no-onednn"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = {c["name"]: c for c in doc["checks"]}
    assert names["start-up file"]["ok"] and doc["flag_works"]
    for key in ("tensorflow", "numpy", "numba", "cpu", "cpu flags", "numba threads",
                "generated kernels", "numba cache", "cupy"):
        assert key in names, key
    monkeypatch.setattr(_startup, "startup_file", lambda: None)
    assert doctor.main(["--no-onednn"]) == 1
    out = capsys.readouterr().out
    assert "MISSING" in out and "cannot work (start-up file)" in out


def test_doctor_runs_as_a_command():
    r = subprocess.run([sys.executable, "-m", "tf_backend", "doctor", "--no-onednn"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "TF_BACKEND=1: ready" in r.stdout


def test_enabling_holds_garbage_collection_and_restores_its_state():
    """The backend's imports and enable() run with the cyclic collector held (one full
    collection of TensorFlow's and Keras' objects fewer per process); the collector's state
    before is the state after, on or off."""
    import gc
    from tf_backend import _startup
    seen = []
    for before in (True, False):
        (gc.enable if before else gc.disable)()
        try:
            with _startup.collections_held():
                seen.append(gc.isenabled())
            assert gc.isenabled() is before
            with pytest.raises(RuntimeError):
                with _startup.collections_held():
                    raise RuntimeError("enable failed")
            assert gc.isenabled() is before
        finally:
            gc.enable()
    assert seen == [False, False]


_FREEZE_SCRIPT = r"""
import gc, json, os, sys
FIRST
frozen = gc.get_freeze_count()
keras_frozen = "keras" in sys.modules and not any(   # Keras' own modules frozen too
    o is sys.modules["keras.src.layers"].__dict__ for o in gc.get_objects())
jit_ready = "numba.np.arraymath" in sys.modules   # numba's CPU target set up at start-up ...
jit_frozen = jit_ready and not any(              # ... and its objects frozen with the imports
    o is sys.modules["numba.np.arraymath"].__dict__ for o in gc.get_objects())
finalized = []
class Node:
    def __del__(self):
        finalized.append(1)
a, b = Node(), Node()
a.other, b.other = b, a          # a cycle of the user's, made after the import
del a, b
gc.collect()
print(json.dumps({"frozen": frozen, "finalized": len(finalized), "jit_frozen": jit_frozen,
                  "keras_frozen": keras_frozen,
                  "on": bool(os.environ.get("TF_BACKEND"))
                        and "tf_backend.switch" in __import__("sys").modules}))
"""


@pytest.mark.parametrize("setting,first", [(None, "import tensorflow as tf"),
                                           (None, "import keras"), ("0", "import keras")])
def test_startup_freezes_what_the_imports_made(setting, first):
    """With TF_BACKEND=1 the objects alive once TensorFlow and the backend are imported go to
    the collector's permanent generation (later collections, and Python's at exit, do not scan
    them); a cycle the user makes afterwards is still collected and finalized.
    numba's CPU target is set up before the freeze, its registries frozen with the rest; a
    script that imports Keras first (which imports TensorFlow) is frozen once Keras is done.
    TF_BACKEND_GC_FREEZE=0 leaves the collector as it was."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_BACKEND")}
    env.update(TF_BACKEND="1", TF_CPP_MIN_LOG_LEVEL="3")
    if setting is not None:
        env["TF_BACKEND_GC_FREEZE"] = setting
    r = subprocess.run([sys.executable, "-c", _FREEZE_SCRIPT.replace("FIRST", first)],
                       capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["on"] and out["finalized"] == 2
    if setting is None:
        assert out["frozen"] > 100_000 and out["jit_frozen"]
        assert out["keras_frozen"]   # TensorFlow 2.21 imports Keras itself when first
    else:
        assert out["frozen"] == 0 and not out["jit_frozen"] and not out["keras_frozen"]


def test_startup_spin_count_is_the_kernels_one(monkeypatch):
    """The start-up hook sets numba's OpenMP spin before numba loads (it cannot import
    kernels.cpu for it): the same value kernels.cpu uses, and a user's own settings win."""
    from kernels import cpu
    from tf_backend import _startup
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    _startup.tune_thread_env()
    assert os.environ["GOMP_SPINCOUNT"] == cpu.SPIN_COUNT
    monkeypatch.setenv("GOMP_SPINCOUNT", "123")
    _startup.tune_thread_env()
    assert os.environ["GOMP_SPINCOUNT"] == "123"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    _startup.tune_thread_env()
    assert "GOMP_SPINCOUNT" not in os.environ
