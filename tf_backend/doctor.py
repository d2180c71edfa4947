"""`tfb doctor`: what a bug report needs and whether TF_BACKEND=1 can work in this interpreter.

Each check is (name, value, ok); ok None means informational. Exit code 1 when the flag cannot
work (no start-up file, TensorFlow missing or unverified without TF_BACKEND_FORCE, numba broken).
"""
import json
import os
import platform
import subprocess
import sys

# CPU features our numba kernels and stock's oneDNN choose code paths by.
CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def _version(mod):
    try:
        m = __import__(mod)
        return getattr(m, "__version__", "?")
    except Exception as e:  # noqa: BLE001 - any import failure is what we report
        return f"not importable ({type(e).__name__}: {e})"


def cpu_info():
    """(model name, {flag: present}) from /proc/cpuinfo (x86-64 Linux), else platform's."""
    from shape_fns.host import cpu_flags, cpu_model
    flags = cpu_flags()
    return (cpu_model() or platform.processor() or platform.machine(),
            {f: f in flags for f in CPU_FLAGS})


def onednn_isa(timeout=120):
    """The ISA stock TensorFlow's oneDNN dispatches to here, read from ONEDNN_VERBOSE in a child
    interpreter (a matmul and a convolution), or a reason why not."""
    code = ("import tensorflow as tf\n"
            "tf.matmul(tf.ones([64, 64]), tf.ones([64, 64]))\n"
            "tf.nn.conv2d(tf.ones([1, 8, 8, 8]), tf.ones([3, 3, 8, 8]), 1, 'SAME')\n")
    env = dict(os.environ, ONEDNN_VERBOSE="1", TF_BACKEND="0", TF_CPP_MIN_LOG_LEVEL="3")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({type(e).__name__})"
    for line in out.splitlines():
        if "isa:" in line:
            return line.split("isa:", 1)[1].split(",")[0].strip()
    return "not reported (oneDNN off: TF_ENABLE_ONEDNN_OPTS=0?)"


def _dir_size(path):
    n = size = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                size += os.path.getsize(os.path.join(root, f))
                n += 1
            except OSError:
                pass
    return n, size


def _caches():
    import kernels
    kernel_dir = kernels.cache_dir()
    numba_dir = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.path.dirname(kernels.__file__), "cpu", "__pycache__")
    out = []
    for name, d in (("generated kernels", kernel_dir), ("numba cache", numba_dir)):
        if os.path.isdir(d):
            n, size = _dir_size(d)
            out.append((name, f"{d} ({n} files, {size / 2**20:.1f} MiB)", None))
        else:
            out.append((name, f"{d} (empty: first runs compile)", None))
    return out


def checks(probe_onednn=True):
    from . import _startup, config
    res = [("python", f"{sys.version.split()[0]} ({sys.executable})", None),
           ("tf_backend", __import__("tf_backend").__version__, None)]
    pth = _startup.startup_file()
    res.append(("start-up file", pth or f"MISSING: TF_BACKEND=1 does nothing. Fix: {_startup.FIX}",
                pth is not None))
    try:
        res.append(("TF_BACKEND", f"{os.environ.get('TF_BACKEND', '')!r} -> {config.env_mode()}",
                    None))
    except ValueError as e:
        res.append(("TF_BACKEND", str(e), False))
    tf_ver = _version("tensorflow")
    from . import tf_adapter
    verified = tf_adapter.is_verified(tf_ver)
    res.append(("tensorflow", f"{tf_ver} ({'verified' if verified else 'NOT verified: '}"
                f"{'' if verified else 'the backend stays off unless TF_BACKEND_FORCE=1'})",
                verified or config.env_force()))
    for mod in ("keras", "numpy", "numba", "llvmlite"):
        v = _version(mod)
        res.append((mod, v, False if v.startswith("not importable") and mod != "keras" else None))
    model, flags = cpu_info()
    res.append(("cpu", f"{model} ({os.cpu_count()} logical)", None))
    res.append(("cpu flags", " ".join(f for f, on in flags.items() if on) or "none of "
                + ", ".join(CPU_FLAGS), None))
    try:
        import llvmlite.binding as ll
        res.append(("numba target", ll.get_host_cpu_name(), None))
        import numba
        from numba.np.ufunc import parallel
        parallel._launch_threads()
        res.append(("numba threads", f"{numba.config.NUMBA_NUM_THREADS}, layer "
                    f"{numba.threading_layer()}", None))
    except Exception as e:  # noqa: BLE001
        res.append(("numba", f"broken: {type(e).__name__}: {e}", False))
    from shape_fns.host import onednn_enabled
    res.append(("stock oneDNN ops", "on" if onednn_enabled() else
                "off (no AVX512_VNNI/BF16, AVX_VNNI or AMX, or TF_ENABLE_ONEDNN_OPTS=0): "
                "float32 runs Eigen's kernels", None))
    if probe_onednn and not tf_ver.startswith("not importable"):
        res.append(("stock oneDNN isa", onednn_isa(), None))
    try:
        import threadpoolctl
        for p in threadpoolctl.threadpool_info():
            about = " ".join(str(p[k]) for k in ("version", "architecture") if p.get(k))
            res.append((f"{p['user_api']} ({p['internal_api']})",
                        f"{about + ', ' if about else ''}{p['num_threads']} threads, "
                        f"{p['filepath']}", None))
    except Exception as e:  # noqa: BLE001
        res.append(("blas", f"unknown ({type(e).__name__})", None))
    res.extend(_caches())
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
        res.append(("cupy", f"{cupy.__version__}, {n} GPU(s)", None))
    except ImportError:
        res.append(("cupy", "not installed (CPU only; the gpu extra installs cupy-cuda13x)", None))
    except Exception as e:  # noqa: BLE001
        res.append(("cupy", f"installed, no usable GPU ({type(e).__name__}: {e})", None))
    return res


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="tfb doctor", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument("--no-onednn", action="store_true",
                   help="skip the child interpreter that asks oneDNN which ISA it uses")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    res = checks(probe_onednn=not args.no_onednn)
    bad = [name for name, _, ok in res if ok is False]
    if args.json:
        print(json.dumps({"checks": [{"name": n, "value": v, "ok": ok} for n, v, ok in res],
                          "flag_works": not bad}, indent=1))
    else:
        w = max(len(n) for n, _, _ in res)
        for name, value, ok in res:
            mark = "  " if ok is None else ("ok" if ok else "!!")
            print(f"{mark} {name:<{w}}  {value}")
        print(f"\nTF_BACKEND=1: {'cannot work (' + ', '.join(bad) + ')' if bad else 'ready'}")
    return 1 if bad else 0
