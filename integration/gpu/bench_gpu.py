"""ResNet-50 on the CUDA device against PyTorch, on a GPU machine (no TensorFlow needed).

    python integration/gpu/bench_gpu.py DATA_DIR OUT_JSON [--calls 1000] [--skip-tests |
                                                           --only-tests] [--summary]

DATA_DIR holds what integration/gpu/make_refs.py wrote where TensorFlow is (resnet50.tfbp with
float16 weights, our CPU program's outputs, the kernel cases' CPU results). Stages, each
reported even when another fails: the GPU kernel tests (tests/test_gpu_kernels.py against the
CPU results), ResNet-50 numerics against our CPU program (float32 b1/b8, float16 b1), then
median latency per call (host input in, host output out) of our loaded program with and
without CUDA-graph replay and of torchvision's ResNet-50 (random weights, channels-last, cuDNN
autotuned) eager and CUDA-graph, with the input on the host (as ours) and already on the GPU.
"""
import json
import os
import platform
import subprocess
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from integration.gpu.make_refs import inputs  # noqa: E402

RES = {"stages": {}}


def stage(name):
    def wrap(f):
        t = time.perf_counter()
        try:
            RES["stages"][name] = {"ok": True, "result": f()}
        except Exception as e:  # noqa: BLE001 - every stage reports
            RES["stages"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                   "traceback": traceback.format_exc()[-3000:]}
        RES["stages"][name]["seconds"] = round(time.perf_counter() - t, 1)
        print(name, json.dumps(RES["stages"][name])[:3000], flush=True)
        return f
    return wrap


def timeit(fn, calls, warm=20):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    q = np.percentile(np.asarray(ts) * 1e3, [25, 50, 75])
    return {"median_ms": round(float(q[1]), 4), "iqr_ms": [round(float(q[0]), 4),
                                                           round(float(q[2]), 4)]}


def main(data, out_json, calls, skip_tests, only_tests=False, summary=False):
    import cupy
    RES["env"] = {"python": platform.python_version(), "cupy": cupy.__version__,
                  "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
                  "gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                  "cpu": platform.processor() or subprocess.run(
                      "lscpu | grep 'Model name'", shell=True, capture_output=True,
                      text=True).stdout.strip()}
    try:
        import torch
        RES["env"]["torch"] = torch.__version__
    except ImportError:
        torch = None
    print(json.dumps(RES["env"]), flush=True)

    if not skip_tests:
        @stage("kernel_tests")
        def _():
            env = dict(os.environ, TFB_GPU_DATA=data)
            try:
                import pytest  # noqa: F401
            except ImportError:     # the same cases and check, without pytest
                from integration.gpu.cases import cases, check, run_case
                from tf_backend import devices
                refs = dict(np.load(os.path.join(data, "kernel_refs.npz")))
                gpu, bad = devices.get("cuda"), {}
                gpu.load()
                for cid, op, attrs, ins in cases():
                    try:
                        err = check(op, attrs, ins, run_case(gpu, op, attrs, ins)[0], refs[cid])
                    except Exception as e:  # noqa: BLE001
                        err = f"{type(e).__name__}: {e}"
                    if err:
                        bad[cid] = err
                return {"cases": len(refs), "failed": bad}
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--tb=line",
                                "-p", "no:cacheprovider", "-rs", "tests/test_gpu_kernels.py"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            with open(os.path.join(os.path.dirname(out_json), "kernel_tests.txt"), "w") as f:
                f.write(r.stdout + r.stderr)
            tail = "\n".join(l for l in (r.stdout + r.stderr).splitlines()
                              if not l.startswith("SKIPPED"))[-3000:]
            if r.returncode != 0:
                raise RuntimeError(f"pytest rc {r.returncode}: {tail}")
            return tail.strip().splitlines()[-1]

    def optable_summary():
        """The op-table records by op: passed / failed / not on the GPU, first failure."""
        from integration.gpu.cases import run_case
        from shape_fns import Unsupported
        from tf_backend import devices, numerics
        from tf_backend.runtime import format as fmt
        gpu = devices.get("cuda")
        gpu.load()
        with open(os.path.join(data, "optable.json")) as f:
            index = json.load(f)
        arrays = np.load(os.path.join(data, "optable.npz"))
        by_op = {}
        for i, r in enumerate(index):
            attrs = {k: fmt.decode_attr(v) for k, v in r["attrs"].items()}
            o = by_op.setdefault(r["op"], {"passed": 0, "failed": 0, "absent": 0})
            if gpu.lookup(r["op"], attrs)[0] is None:
                o["absent"] += 1
                continue
            ins = [arrays[f"{i}_in{j}"] for j in range(r["n_in"])]
            try:
                got = run_case(gpu, r["op"], attrs, ins)
                errs = [numerics.compare(g, arrays[f"{i}_out{j}"], r["kind"], r["rlen"])
                        for j, g in enumerate(got)]
                err = next((e for e in errs if e), None)
            except Unsupported as e:
                o["absent"] += 1
                continue
            except Exception as e:  # noqa: BLE001
                err = f"{type(e).__name__}: {str(e)[:160]}"
            if err:
                o["failed"] += 1
                o.setdefault("first", []).append(f"{r['id']}: {err[:200]}")
                o["first"] = o["first"][:3]
            else:
                o["passed"] += 1
        return {op: v for op, v in sorted(by_op.items()) if v["passed"] or v["failed"]}

    if summary:
        stage("optable_summary")(optable_summary)
    if only_tests:
        with open(out_json, "w") as f:
            json.dump(RES, f, indent=1)
        return
    from tf_backend import numerics, runtime
    path = os.path.join(data, "resnet50.tfbp")
    refs = dict(np.load(os.path.join(data, "resnet50_refs.npz")))
    progs = {}

    @stage("load")
    def _():
        t = time.perf_counter()
        progs["fp32"] = runtime.load(path, device="cuda")
        progs["fp16"] = runtime.load(path, device="cuda", dtype="float16")
        progs["fp32_plain"] = runtime.load(path, device="cuda", replay=False)
        progs["fp16_plain"] = runtime.load(path, device="cuda", dtype="float16", replay=False)
        return {"seconds": round(time.perf_counter() - t, 2),
                "notes": progs["fp16"].program.notes[-4:],
                "nodes": len(progs["fp16"]._steps)}

    @stage("numerics")
    def _():
        r = {}
        for key, prog, x in (("fp32_b1", "fp32_plain", inputs(1)),
                             ("fp32_b8", "fp32_plain", inputs(8)),
                             ("fp16_b1", "fp16_plain", inputs(1, np.float16))):
            got = progs[prog](x)[0]
            want = refs[key]
            err = numerics.compare(got, want, "reduction", 4608)
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            r[key] = {"contract": err or "ok", "max_abs": float(diff.max()),
                      "argmax_agree": float(np.mean(got.argmax(-1) == want.argmax(-1)))}
        return r

    @stage("replay")
    def _():
        r = {}      # replayed runs give the plain runs' results, for new inputs too
        for key, prog, x in (("fp32_b1", "fp32", inputs(1)), ("fp16_b1", "fp16",
                                                              inputs(1, np.float16))):
            outs = [progs[prog](x)[0] for _ in range(3)]
            plain = progs[prog + "_plain"](x)[0]
            r[key] = {"replay_equal_plain": all(np.array_equal(o, plain) for o in outs)}
            x2 = x[::-1].copy() * x.dtype.type(0.5)
            r[key]["replay_new_input_equal_plain"] = bool(np.array_equal(
                progs[prog](x2)[0], progs[prog + "_plain"](x2)[0]))
        return r

    timings = {}

    def ours(name, prog, x):
        @stage(f"ours_{name}")
        def _():
            p = progs[prog]
            timings[f"ours_{name}"] = timeit(lambda: p(x), calls)
            return timings[f"ours_{name}"]

    if torch is not None:
        import torchvision
        torch.backends.cudnn.benchmark = True

    def torch_arms(name, dtype, batch):
        @stage(f"torch_{name}")
        def _():
            tdt = torch.float16 if dtype == "fp16" else torch.float32
            m = torchvision.models.resnet50(weights=None).eval().to("cuda", tdt).to(
                memory_format=torch.channels_last)
            xh = torch.from_numpy(inputs(batch)).permute(0, 3, 1, 2).to(tdt).contiguous(
                memory_format=torch.channels_last)
            xd = xh.cuda()
            r = {}
            with torch.inference_mode():
                def eager_host():
                    return m(xh.cuda()).cpu()

                def eager_dev():
                    y = m(xd)
                    torch.cuda.synchronize()
                    return y
                r["eager_host"] = timeit(eager_host, calls)
                r["eager_device"] = timeit(eager_dev, calls)
                static_x = xd.clone()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        m(static_x)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    static_y = m(static_x)

                def graph_host():
                    static_x.copy_(xh)
                    g.replay()
                    return static_y.cpu()

                def graph_dev():
                    g.replay()
                    torch.cuda.synchronize()
                r["graph_host"] = timeit(graph_host, calls)
                r["graph_device"] = timeit(graph_dev, calls)
            timings[f"torch_{name}"] = r
            return r

    for dtype, batch in (("fp16", 1), ("fp32", 1), ("fp16", 8)) if calls else ():
        x = inputs(batch, np.float16 if dtype == "fp16" else np.float32)
        name = f"{dtype}_b{batch}"
        ours(f"{name}_graph", dtype, x)
        ours(f"{name}_plain", f"{dtype}_plain", x)
        if torch is not None:
            torch_arms(name, dtype, batch)
    RES["timings"] = timings
    with open(out_json, "w") as f:
        json.dump(RES, f, indent=1)


if __name__ == "__main__":
    args = sys.argv[1:]
    calls = int(args[args.index("--calls") + 1]) if "--calls" in args else 1000
    main(args[0], args[1], calls, "--skip-tests" in args, "--only-tests" in args,
         "--summary" in args)
