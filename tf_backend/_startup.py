"""Interpreter start-up hook (from tf_backend_startup.pth) for TF_BACKEND=1 with no code change.

Runs only when TF_BACKEND is set: it adds a meta-path finder that waits for `tensorflow` to
finish importing and then enables the backend. Nothing here imports TensorFlow or numpy.
"""
import contextlib
import gc
import importlib.abc
import os
import sys

_installed = False


class _EnableAfterTensorFlow(importlib.abc.MetaPathFinder):
    """Wraps the real loader of `tensorflow` so that the backend is enabled right after it runs
    (and that of `keras`, when it comes first, so that the imports are frozen after it)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in ("tensorflow", "keras"):
            return None
        if fullname == "tensorflow":
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None and spec.loader is not None:
                _wrap(spec.loader, fullname)
                return spec
        return None


_keras = {"importing": False, "freeze": False}


def _wrap(loader, name):
    exec_module = loader.exec_module

    def exec_then_enable(module):
        exec_module(module)
        loader.exec_module = exec_module
        _enable_from_env()

    def exec_then_freeze(module):
        # Keras imports TensorFlow, then its own modules (and matplotlib, rich, ...: ~65K
        # objects on Keras 3): the imports are frozen again once Keras is done
        _keras["importing"] = True
        try:
            exec_module(module)
        finally:
            loader.exec_module = exec_module
            _keras["importing"] = False
            if _keras["freeze"]:
                _keras["freeze"] = False
                freeze_imports()

    loader.exec_module = exec_then_enable if name == "tensorflow" else exec_then_freeze


def _enable_from_env():
    from . import config
    mode = config.env_mode()  # raises ValueError naming the bad value
    if mode != "off":
        from . import enable
        if enable(mode):   # not when the backend stays off (an unverified TensorFlow)
            freeze_imports()
            # and again once Keras, which is importing TensorFlow, is done (the first freeze
            # keeps the collections during the rest of its import off the frozen objects)
            _keras["freeze"] = _keras["importing"]


def freeze_imports():
    """Move what exists once TensorFlow and the backend are imported (modules, their functions,
    registries: ~350K objects, no garbage among them when measured; called again once Keras is
    done where Keras imported TensorFlow, `import keras` first) to the collector's
    permanent generation, so that no later collection scans them again: every full collection
    of a training script, and the ones Python runs at exit, which with TensorFlow, Keras and
    numba loaded took 0.8-1.3 s of a script's wall time (AMD EPYC Zen 5, MNIST-shaped script:
    exit 1.2-1.3 s -> 0.4 s). Only on the TF_BACKEND start-up path, where nothing of the
    user's is alive yet beyond what ran before `import tensorflow`; a cycle among the frozen
    objects that becomes garbage later is never collected. Young garbage is collected first.
    TF_BACKEND_GC_FREEZE=0 leaves the collector alone."""
    if _setting("TF_BACKEND_GC_FREEZE", "1") in _OFF:
        return
    # the kernel compiler's registries (numba's target: ~48K objects) are set up now, to be
    # frozen with the rest, rather than at the first kernel: a recurrent classifier's predict
    # after its fit paid an 81 ms full collection over 177K objects, 48K of them these
    # (with the collector held: its imports set off a full collection of the ~400K objects
    # there, 0.28 s against 0.08 held, AMD EPYC Zen 5)
    from . import devices
    jit = devices.library("jit")
    if jit is not None:
        with collections_held():
            jit.prepare_target()
    gc.collect(1)
    gc.freeze()


@contextlib.contextmanager
def collections_held():
    """No cyclic garbage collection while the backend imports and enables itself: its imports
    (numba, its dispatchers and registries, our kernels) allocate enough to set off collections,
    and with TensorFlow and Keras loaded a full one scans ~400K objects. With them held, a
    training script's run had one full collection fewer (AMD EPYC Zen 5, MNIST-shaped fit:
    GC 0.34 -> 0.23 s in all). The collector's previous state is restored."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def tune_thread_env():
    """Thread-pool settings the backend runs with (kernels/cpu/__init__.py says why): numba's
    OpenMP workers spin for kernels.cpu.SPIN_COUNT iterations, then sleep (set here too: this
    runs before anything imports numba, and kernels.cpu is too heavy to import at start-up).
    A user's own settings win. (A short OpenBLAS
    OPENBLAS_THREAD_TIMEOUT was tried: it helps ResNet-50's stock arm but makes every GEMM wake
    sleeping threads; Conv2D 56x56x64 went from 0.9x to 1.5-1.9x of stock.)"""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", "30000")   # kernels.cpu.SPIN_COUNT


def install():
    """Called from the .pth file when TF_BACKEND is set."""
    global _installed
    if _installed:
        return
    _installed = True
    tune_thread_env()
    if "tensorflow" in sys.modules:  # imported before site ran (unusual): enable now
        _enable_from_env()
        return
    sys.meta_path.insert(0, _EnableAfterTensorFlow())


_OFF = ("0", "off", "false", "no")


def _setting(name, default):
    return os.environ.get(name, default).strip().lower()


def env_requested():
    return _setting("TF_BACKEND", "") not in ("", *_OFF)


PTH = "tf_backend_startup.pth"
FIX = ('reinstall with a pip that takes the PEP 660 path: `pip install -e .` (or `pip install .`) '
       'from the tf_backend checkout, which has a pyproject.toml; or call tf_backend.enable() '
       'after importing TensorFlow')


def startup_file():
    """The installed start-up file's path, or None when no site directory of this interpreter
    has it (the flag then does nothing)."""
    import site
    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    for d in dict.fromkeys(dirs):
        path = os.path.join(d, PTH)
        if os.path.isfile(path):
            return path
    return None


_warned = False


def check_flag_reaches_startup():
    """Warn once when TF_BACKEND asks for the backend but no site directory has the start-up
    file, so unmodified scripts run stock TensorFlow. (Checks presence, not whether it ran:
    this module is imported by the start-up file itself, before install() runs.)"""
    global _warned
    if _warned or not env_requested() or startup_file() is not None:
        return
    _warned = True
    import warnings
    warnings.warn(f"tf_backend: TF_BACKEND is set but {PTH} is not in this interpreter's "
                  "site-packages, so scripts that do not call tf_backend.enable() run stock "
                  f"TensorFlow. Fix: {FIX}. `tfb doctor` checks the installation.",
                  RuntimeWarning, stacklevel=3)
