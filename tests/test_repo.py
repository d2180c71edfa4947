"""Repository invariants: the README's commands, .ci/run, TF-free packages."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_commands():
    text = open(os.path.join(ROOT, "README.md")).read()
    return re.findall(r"```bash\n(python3 -m venv[^\n]*)\n```", text)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    cmds = _readme_commands()
    assert len(cmds) == 2, cmds
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert cmds[1] in ci.splitlines(), ".ci/run must run the README's test command"
    assert "demo.py" in cmds[0] or "tfb ab" in cmds[0]


def test_kernels_and_shape_fns_import_without_tensorflow():
    code = ("import sys; sys.modules['tensorflow'] = None\n"
            "import kernels, shape_fns\n"
            "kernels.load('cpu'); shape_fns.load_all()\n"
            "assert 'tensorflow' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "print(len(kernels.KERNELS), len(shape_fns.SHAPE_FNS))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_tf_private_apis_only_in_adapter():
    """`tensorflow.python` (private API) is imported only by tf_backend/tf_adapter.py."""
    offenders = []
    for d in ("tf_backend", "kernels", "shape_fns"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f.endswith(".py") and f != "tf_adapter.py":
                    src = open(os.path.join(dirpath, f)).read()
                    if "tensorflow.python" in src:
                        offenders.append(os.path.join(dirpath, f))
    assert not offenders, offenders


def test_no_two_numba_compilations_of_one_function_share_a_cache_file():
    """numba's on-disk cache files a function by qualified name and line, keyed by signature and
    bytecode only: a serial and a parallel njit of one function would load each other's code.
    Every cached dispatcher in kernels/ must have its own qualified name (kernels/cpu/jit.py)."""
    import importlib
    import pkgutil

    import kernels.cpu
    from numba.core.registry import CPUDispatcher
    seen = {}
    for info in pkgutil.iter_modules(kernels.cpu.__path__):
        mod = importlib.import_module(f"kernels.cpu.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, CPUDispatcher) and type(obj._cache).__name__ != "NullCache":
                f = obj.py_func
                key = (f.__code__.co_filename, f.__qualname__, f.__code__.co_firstlineno)
                opts = bool(obj.targetoptions.get("parallel"))
                assert seen.setdefault(key, opts) == opts, f"{key}: serial and parallel variants"
    assert len(seen) > 20


def _runtime_sources():
    """The host runtime's modules but the CPU device's own (tf_backend/devices/cpu.py)."""
    base = os.path.join(ROOT, "tf_backend")
    for d, _, files in os.walk(base):
        for f in files:
            p = os.path.join(d, f)
            if f.endswith(".py") and p != os.path.join(base, "devices", "cpu.py"):
                yield os.path.relpath(p, ROOT), open(p).read()


def test_the_host_runtime_asks_the_device_for_cpu_libraries():
    # fusion, compiled loops, thread holds and weight caches come from Device.library
    bad = [p for p, src in _runtime_sources()
           if re.search(r"^\s*(from kernels\.cpu\b|from kernels import cpu\b|import kernels\.cpu)",
                        src, re.M)]
    assert not bad, bad


def test_no_numpy_ownership_test_outside_the_cpu_device():
    # ownership: recorded per slot (runtime/program.py), or the CPU device's writable()/BUFFER;
    # setting a flag (making a buffer read-only) is not a test
    pat = re.compile(r"\) is (not )?np\.ndarray|\.flags\.writeable(?!\s*=[^=])")
    allowed = {"tf_backend/tf_adapter.py", "tf_backend/fastpath.py"}   # TensorFlow's values in
    bad = [(p, m.group(0)) for p, src in _runtime_sources() if p not in allowed
           for m in pat.finditer(src)]
    assert not bad, bad
