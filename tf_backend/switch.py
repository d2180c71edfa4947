"""enable()/disable()/enabled(): install or remove the hooks; idempotent and thread-safe."""
import atexit
import contextlib
import os
import threading

from . import config, dispatch, executor, fastpath, functions, ledger, trace
from . import tf_adapter as tfa

_lock = threading.RLock()
_report_registered = False


def enable(mode="on", force=False, device=None):
    """Turn the backend on (mode "on" or "strict"). Returns True when active. device: where
    tf.function programs run (a name from tf_backend.devices or a Device); None: the host CPU
    path."""
    mode = config.parse_mode(mode) if mode is not True else "on"
    if mode == "off":
        disable()
        return False
    dev = _device(device)
    with _lock:
        version = tfa.tf_version()
        if not (tfa.is_verified(version) or force or config.env_force()):
            tfa.warn_unverified(version)
            return False
        dispatch.refresh(mode)
        tfa.forget_devices()
        dispatch.check_input_devices = tfa.gpus_visible()
        dispatch.mode = mode
        functions.DEVICE = dev
        executor.shadow_mode = mode == "shadow"
        path = os.environ.get("TF_BACKEND_TRACE")
        if path:
            trace.start(path)
        tfa.install(dispatch.owned, fastpath.on_fast, dispatch.on_fast_passthrough,
                    dispatch.on_fast_uncount, dispatch.on_slow,
                    tracer=trace if trace.ON else None)
        tfa.install_function_hook(functions.on_call)
        tfa.install_call_shortcut()
        _defer_compiles()
        _share_host()
        _register_report()
        _keep_cache_bounded()
        return True


def _defer_compiles():
    """A kernel's first compile for new argument types runs in a child process while
    TensorFlow's kernel runs the call (kernels/cpu/deferred.py): allowed for eager ops and
    interpreted program nodes and constant folding, in mode "on" only (strict refuses
    fallbacks, shadow compares our kernels)."""
    from .program.passes import const_fold
    c = executor._library("compiles")
    if c is not None:
        c.allow_under(dispatch._outputs.__code__, lambda f: dispatch.mode == "on")
        c.allow_under(const_fold.run.__code__, lambda f: dispatch.mode == "on")
        c.allow_under(executor.execute.__code__,
                      lambda f: dispatch.mode == "on" and executor.may_defer(f))


_cache_checked = [False]


def _keep_cache_bounded():
    """Once a process: the generated kernels' directory is pruned in a detached child when
    the last pruning is a day old (kernels/cache_prune.py)."""
    if _cache_checked[0]:
        return
    _cache_checked[0] = True
    c = executor._library("cache")
    if c is not None:
        c.maybe_start()


def _device(device):
    """The Device tf.function programs run on, loaded and able to run programs; None for the
    host CPU path."""
    if device is None:
        return None
    from . import devices
    return devices.for_programs(device)


def disable():
    with _lock:
        functions.DEVICE = None
        dispatch.mode = "off"
        executor.shadow_mode = False
        tfa.uninstall()
        tfa.uninstall_function_hook()
        tfa.uninstall_call_shortcut()


def mode():
    return dispatch.mode if tfa.installed() else "off"


@contextlib.contextmanager
def enabled(mode="on", force=False, device=None):
    """Run a block with the backend in `mode` (tf.function programs on `device`), restoring the
    previous mode and device afterwards."""
    with _lock:
        prev, prev_device = globals()["mode"](), functions.DEVICE
        enable(mode, force=force, device=device)
    try:
        yield
    finally:
        with _lock:
            if prev == "off":
                disable()
            else:
                enable(prev, force=True, device=prev_device)


_host_shared = False


def _share_host():
    """Workers of one tf.distribute cluster on this host share its cores: each runs its numba
    kernels (parallel loops, the GEMM team) on its share, on the enabling thread (numba's count
    is per thread; the executor's pool workers use one anyway), and numpy's OpenBLAS on its
    share (process-wide, once)."""
    global _host_shared
    k = config.local_workers()
    if k > 1:
        import numba
        try:
            numba.set_num_threads(max(1, numba.config.NUMBA_NUM_THREADS // k))
        except Exception:  # noqa: BLE001 - numba's threading layer unavailable
            pass
        if not _host_shared:
            _host_shared = True
            from . import devices
            blas = devices.library("blas")
            if blas is not None:
                blas.share_blas(k)


def _register_report():
    global _report_registered
    if not _report_registered and os.environ.get("TF_BACKEND_REPORT"):
        _report_registered = True
        atexit.register(lambda: ledger.report_owner is None and ledger.write_report(
            os.environ["TF_BACKEND_REPORT"], ledger.snapshot()))
