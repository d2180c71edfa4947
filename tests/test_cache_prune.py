"""The generated kernels' cache directory stays bounded (kernels/cache_prune.py): modules with
their numba files go by age and least recent use, nothing recent goes, numba's source stamp
never moves."""
import os
import subprocess
import sys
import time

import pytest

from kernels import cache_prune

DAY = 86400


def _module(root, stem, used, size=1000, numba_files=2):
    """A generated module `stem` last used `used` seconds ago, with its bytecode and numba
    files (size bytes each)."""
    now = time.time()
    paths = [os.path.join(root, f"{stem}.py"),
             os.path.join(root, "__pycache__", f"{stem}.cpython-311.pyc")]
    paths += [os.path.join(root, "__pycache__", f"{stem}.f-{i}.py311.nbi")
              for i in range(numba_files)]
    for p in paths:
        with open(p, "wb") as f:
            f.write(b"x" * size)
        os.utime(p, (now - used, now - used))
    return paths


@pytest.fixture
def root(tmp_path):
    os.makedirs(tmp_path / "__pycache__")
    return str(tmp_path)


def _left(paths):
    return [os.path.exists(p) for p in paths]


def test_modules_unused_for_the_age_limit_go_with_their_numba_files(root):
    old = _module(root, "ew_cpu_aaaa_Abs", used=40 * DAY)
    young = _module(root, "ew_cpu_bbbb_Abs", used=2 * DAY)
    orphan = os.path.join(root, "__pycache__", "loop_cpu_gone.loop_fn-3.py311.1.nbc")
    tmp = os.path.join(root, "region_cpu_cccc.py.123.456.tmp")
    table = os.path.join(root, "gemm_choice.json")
    for p in (orphan, tmp, table):
        with open(p, "w") as f:
            f.write("{}")
        os.utime(p, (time.time() - 2 * 3600,) * 2)
    n, freed, kept = cache_prune.prune(root, max_bytes=10**9, max_age_s=30 * DAY)
    assert not any(_left(old)) and all(_left(young))
    assert not os.path.exists(orphan) and not os.path.exists(tmp)
    assert os.path.exists(table)          # the choice tables are not modules
    assert n == 3 and freed == 4 * 1000 + 2 + 2 and kept == 4 * 1000


def test_over_the_size_limit_the_least_recently_used_go_but_never_a_recent_one(root):
    a = _module(root, "fused_cpu_a", used=5 * DAY)
    b = _module(root, "fused_cpu_b", used=3 * DAY)
    c = _module(root, "fused_cpu_c", used=1 * DAY)
    d = _module(root, "fused_cpu_d", used=60)          # in use a minute ago
    cache_prune.prune(root, max_bytes=2 * 4000, max_age_s=30 * DAY)
    assert (any(_left(a)), any(_left(b)), all(_left(c)), all(_left(d))) == (
        False, False, True, True)
    cache_prune.prune(root, max_bytes=1, max_age_s=30 * DAY)
    assert not any(_left(c)) and all(_left(d))


def test_a_use_moves_the_access_time_and_keeps_numbas_stamp(root):
    p, *_ = _module(root, "loop_cpu_x", used=10 * DAY)
    before = os.stat(p)
    cache_prune.mark_used(p)
    after = os.stat(p)
    assert after.st_mtime_ns == before.st_mtime_ns   # numba's cache index keys on it
    assert time.time() - after.st_atime < 60
    assert cache_prune.prune(root, max_bytes=1, max_age_s=DAY)[0] == 0


def test_importing_a_generated_module_marks_its_use(root, monkeypatch):
    from kernels.cpu import elementwise as ew
    monkeypatch.setenv("TF_BACKEND_CACHE_DIR", root)
    path = os.path.join(root, "ew_cpu_test_mark.py")
    with open(path, "w") as f:
        f.write("X = 1\n")
    os.utime(path, (time.time() - 10 * DAY,) * 2)
    name = "_tf_backend_test_mark_use"
    try:
        assert ew.import_generated("X = 1\n", "ew_cpu_test_mark.py", name).X == 1
    finally:
        sys.modules.pop(name, None)
    assert time.time() - os.stat(path).st_atime < 60
    assert time.time() - os.stat(path).st_mtime > 9 * DAY


def test_pruning_runs_in_a_child_at_most_once_a_day(root, monkeypatch):
    monkeypatch.setenv("TF_BACKEND_CACHE_DAYS", "30")
    old = _module(root, "region_cpu_old", used=90 * DAY)
    assert cache_prune.maybe_start(root)
    deadline = time.time() + 60
    while any(_left(old)) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_left(old))
    again = _module(root, "region_cpu_again", used=90 * DAY)
    assert not cache_prune.maybe_start(root)   # the stamp is fresh
    time.sleep(0.5)
    assert all(_left(again))


def test_tfb_cache_reports_and_prunes(root):
    old = _module(root, "loop_cpu_report", used=90 * DAY)
    env = dict(os.environ, TF_BACKEND_CACHE_DIR=root)
    r = subprocess.run([sys.executable, "-m", "tf_backend", "cache", "--prune", "--days", "30"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "1 modules" in r.stdout and "pruned 1 modules" in r.stdout
    assert not any(_left(old))


def test_kept_tensorflow_functions_go_by_the_same_rules(root):
    """tf_adapter's group FunctionDefs (tf_groups/*.pb): each file a group of its own, gone
    once unused for the age limit or least recently used over the size limit; a read marks a
    use."""
    d = os.path.join(root, cache_prune.GROUPS)
    os.makedirs(d)
    now = time.time()
    files = {}
    for name, used in (("old", 40 * DAY), ("young", 2 * DAY), ("recent", 60)):
        p = files[name] = os.path.join(d, f"{name}.pb")
        with open(p, "wb") as f:
            f.write(b"x" * 100)
        os.utime(p, (now - used, now - used))
    cache_prune.mark_used(files["young"])
    n, freed, kept = cache_prune.prune(root, max_bytes=10**9, max_age_s=30 * DAY)
    assert (n, freed, kept) == (1, 100, 200)
    assert _left(list(files.values())) == [False, True, True]
    cache_prune.prune(root, max_bytes=1, max_age_s=30 * DAY)
    assert _left(list(files.values())) == [False, True, True]   # both used within the hour
