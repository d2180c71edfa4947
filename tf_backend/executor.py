"""The executor: runs a Program with per-node dependency counters on a small thread pool.

Results are values or errors (`Failed`): a failing node poisons its dependents, which are
skipped; independent work goes on; the caller gets the first error. A finishing node continues
inline with its cheap ready successors; heavy ready nodes go to the pool, where they run
concurrently (numba kernels and BLAS release the GIL). The calling thread works on its own run
too, so a run always makes progress whatever the pool is doing. Sub-programs (If/While/Case
bodies) run serially on the thread that reached them. Eager ops use `run_kernel` directly: one
kernel-invocation path for eager dispatch and programs.
"""
import functools
import math
import os
import queue
import threading
import time

import numba
import numpy as np

from shape_fns import Spec, Unsupported

import kernels

from . import alloc, ledger, trace, tf_adapter as tfa
from . import devices
from .devices.cpu import BUFFER, writable
from .runtime.lists import HostList

_DONE = object()


class Failed:
    """An error as a value: the exception and the node that raised it."""

    __slots__ = ("exc", "node", "inputs")

    def __init__(self, exc, node, inputs=""):
        self.exc, self.node, self.inputs = exc, node, inputs


def output_buffers(shape_fn, arrays, attrs, out_specs=None):
    """Aligned output buffers, sized by the shape fn unless static specs are given."""
    if out_specs is None:
        out_specs = shape_fn([Spec(a.shape, a.dtype, a) for a in arrays], attrs)
    return [alloc.empty(s.shape, s.dtype) for s in out_specs]


def run_kernel(kdef, shape_fn, arrays, attrs, out_specs=None):
    """Shape fn (unless static specs are given) -> aligned outputs -> kernel. Returns outputs."""
    outs = output_buffers(shape_fn, arrays, attrs, out_specs)
    kdef.fn(arrays, outs, attrs)
    return outs


def as_numpy(v):
    """Our arrays as they are; TensorFlow's memory as a read-only view (never written)."""
    if type(v) is BUFFER:
        return v
    a = tfa.to_numpy(v)
    a.flags.writeable = False
    return a


def as_tensor(v):
    if type(v) is BUFFER:
        return tfa.make_tensor_any(v)
    return v


def truthy(v):
    """TensorFlow's If/While condition rule: scalars by value, other tensors by non-emptiness."""
    a = as_numpy(v)
    if a.ndim == 0:
        return bool(a)
    return a.size > 0


class Pool:
    """Worker threads that help runs with queued heavy nodes."""

    def __init__(self, size):
        self.size = size
        self._q = queue.SimpleQueue()
        self._threads = []
        self._lock = threading.Lock()

    def _ensure(self):
        if len(self._threads) < self.size:
            with self._lock:
                while len(self._threads) < self.size:
                    t = threading.Thread(target=self._worker, daemon=True,
                                         name=f"tf_backend-exec-{len(self._threads)}")
                    t.start()
                    self._threads.append(t)

    def wake(self, run):
        self._ensure()
        self._q.put(run)

    def _worker(self):
        try:  # one numba thread per worker: workers run concurrently with the caller
            numba.set_num_threads(1)
        except Exception:
            pass
        while True:
            r = self._q.get()
            try:
                item = r.q.get_nowait()
            except queue.Empty:
                continue
            if item is _DONE:
                r.q.put(_DONE)
                continue
            r.work(item)


_pool = None
_pool_lock = threading.Lock()

# The thread budget: a BLAS-backed node that starts while another heavy node runs holds numpy's
# OpenBLAS to one thread (numba workers already use one), so the cores are not oversubscribed.
# The hold is kernels/cpu/gemm.py's process-wide count with its holders counted: set and restored
# per thread from several threads at once (openblas_set_num_threads_local is process-wide in
# OpenBLAS 0.3.31), it was left at one thread for good (every later GEMM at half speed).
_heavy = {"active": 0}
_heavy_lock = threading.Lock()
# ops (and their "+epilogue" forms) whose kernels are BLAS calls; the schedule pass uses it too
BLAS_OPS = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D",
            "Conv2DBackpropInput", "Conv2DBackpropFilter", "Einsum"}


# The host device's libraries ("blas": its OpenBLAS hold; "loops": compiled loops and regions),
# looked up once: regions and loops ask per run
_library = functools.cache(devices.library)


def _heavy_enter(node):
    """Returns what to restore on this thread on exit, or None. Beside another heavy node, this
    one runs on one thread: numba's count on this thread (its parallel kernels and the GEMM
    team, kernels/cpu/gemm.py) and, for BLAS-backed ops, OpenBLAS (np.matmul paths)."""
    with _heavy_lock:
        _heavy["active"] += 1
        busy = _heavy["active"] >= 2
    if not busy:
        return None
    blas = None
    if node.op.split("+", 1)[0] in BLAS_OPS:
        blas = _library("blas")
        if blas is not None:
            blas.single_thread_enter()
    return blas, _numba_threads(1)


def _numba_threads(n):
    """Set numba's thread count on this thread (thread-local in numba); returns the old one."""
    try:
        old = numba.get_num_threads()
        numba.set_num_threads(n)
        return old
    except Exception:  # noqa: BLE001 - numba's threading layer unavailable
        return None


def _heavy_exit(restore):
    with _heavy_lock:
        _heavy["active"] -= 1
    if restore is not None:
        blas, threads = restore
        if blas is not None:
            blas.single_thread_exit()
        if threads is not None:
            _numba_threads(threads)


def default_threads():
    v = os.environ.get("TF_BACKEND_THREADS")
    if v:
        return max(1, int(v))
    return max(1, min(4, os.cpu_count() or 1))


def pool():
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = Pool(default_threads() - 1)
    return _pool


def set_threads(n):
    """Use n threads in total (the caller plus n-1 workers); 1 = fully serial (programs then
    also hold numba's count, the GEMM team's included, to one on the calling thread)."""
    global _pool
    with _pool_lock:
        _pool = Pool(max(0, int(n) - 1))


DROP_DEAD = True   # drop each value after its last use (False: keep all to the end; A/B runs)
DRIVERS = True     # serial runs through generated drivers (program/driver.py); False: interpret


def _driver(prog):
    from .program import driver
    prog.driver = d = driver.build(prog, step, declined, as_numpy, alloc.empty, _view, VIEW_OPS,
                                   alloc.SMALL_BYTES, alloc.POOL_MIN,
                                   (_direct_tensorflow, tfa.execute_stock, as_tensor,
                                    tfa.read_variables), output_buffers)
    return d


def _direct_tensorflow(node):
    """"stock" or "reads" for a TensorFlow node a generated driver may run itself, exactly as
    `_tensorflow_node` would: not a loop-invariant read (kept per loop run), an XLA-compiled
    call or an op with kernel state (their own functions)."""
    if node.attrs.get("loop_invariant"):
        return None
    if node.kind == "reads":
        return "reads"
    if (node.kind == "stock" and node.attrs.get("xla_function") is None
            and node.op not in tfa.KERNEL_STATE_OPS and "group" not in node.attrs):
        return "stock"
    return None


class _Run:
    __slots__ = ("prog", "vals", "counts", "uses", "lock", "remaining", "q", "failed", "pool")

    def __init__(self, prog, vals, pool):
        self.prog, self.vals, self.pool = prog, vals, pool
        self.counts = list(prog.dep_counts)
        self.uses = dict(prog.uses)
        self.lock = threading.Lock()
        self.remaining = len(prog.nodes)
        self.q = queue.SimpleQueue()
        self.failed = {}

    def work(self, nid):
        nodes, succs = self.prog.nodes, self.prog.succs
        local = [nid]
        while local:
            n = local.pop()
            if nodes[n].heavy:
                restore = _heavy_enter(nodes[n])
                try:
                    step(nodes[n], self.vals, self.failed)
                finally:
                    _heavy_exit(restore)
            elif _heavy["active"]:   # a heavy node runs beside it: this one on one thread
                old = _numba_threads(1)
                try:
                    step(nodes[n], self.vals, self.failed)
                finally:
                    if old is not None:
                        _numba_threads(old)
            else:
                step(nodes[n], self.vals, self.failed)
            ready = []
            with self.lock:
                for s in set(nodes[n].inputs):
                    left = self.uses.get(s)
                    if left is not None:
                        if left == 1:
                            del self.uses[s]
                            self.vals[s] = None
                        else:
                            self.uses[s] = left - 1
                for s in succs[n]:
                    self.counts[s] -= 1
                    if self.counts[s] == 0:
                        ready.append(s)
                self.remaining -= 1
                finished = self.remaining == 0
            if finished:
                self.q.put(_DONE)
            heavy = []
            for s in ready:
                (heavy if nodes[s].heavy else local).append(s)
            if heavy:
                if not local:
                    local.append(heavy.pop())
                for s in heavy:
                    self.q.put(s)
                    self.pool.wake(self)


_tune_lock = threading.RLock()


def _tuning_run(prog, args):
    """One of the program's first runs while its heavy kernel nodes are timed against
    TensorFlow's kernels in place (autotune.py): serial, interpreted, candidates alternately
    ours and TensorFlow's; after the last one, TensorFlow's winners become TensorFlow nodes."""
    from . import autotune
    with _tune_lock:
        if prog.tuned:
            return None
        st = prog.tune_state
        if st is None:
            cands = {id(n): n for n in prog.nodes if autotune.candidate(n)}
            if not cands:
                prog.tuned = True
                return None
            st = prog.tune_state = {"run": 0, "open": cands, "times": {}, "keys": {}}
        side = st["run"] % 2          # 0: ours, 1: TensorFlow's
        vals = _slots(prog, args)
        failed = {}
        for n in prog.nodes:
            if id(n) in st["open"] and not any(type(vals[s]) is Failed for s in n.inputs):
                _tune_step(n, vals, failed, st, side, autotune)
            else:
                step(n, vals, failed)
            for s in prog.drops[n.id]:
                vals[s] = None
        st["run"] += 1
        if st["run"] >= 2 * (autotune.RUNS + 1) or not st["open"]:
            for i, n in list(st["open"].items()):
                ours, stock = st["times"].get(i, ([], []))
                if ours and stock:
                    got = autotune.record(st["keys"][i], ours, stock)
                    _apply_choice(n, got, autotune)
            prog.tuned, prog.tune_state = True, None
            prog.finalize()
        ledger.program_ops(prog.op_counts)
        if failed:
            raise _Raise(min(failed.values(), key=lambda f: f.node.id))
        return [vals[s] for s in prog.outputs]


def _apply_choice(node, got, autotune):
    producer = autotune.producer(node)
    ledger.autotuned(producer.op, got)
    if got["choice"] != "stock":
        return
    if producer is node:
        node.kind, node.reason = "stock", "autotune"
    else:   # an epilogue node: TensorFlow's producer, our epilogue on (a copy of) its result
        node.fn.producer["stock"] = True


def _tune_step(node, vals, failed, st, side, autotune):
    i = id(node)
    values = [vals[s] for s in node.inputs]
    k = st["keys"].get(i)
    if k is None:
        k = st["keys"][i] = autotune.key(node, [as_numpy(v) for v in values])
        got = autotune.cached(k)
        if got is not None:           # measured before (this CPU, these shapes)
            _apply_choice(node, got, autotune)
            del st["open"][i]
            step(node, vals, failed)
            return
    t0 = time.perf_counter()
    if side == 1:
        try:
            outs = _stock_side(node, values, autotune)
        except Exception:  # noqa: BLE001 - TensorFlow refuses what ours runs: ours it is
            del st["open"][i]
            step(node, vals, failed)
            return
        for s, v in zip(node.outputs, outs):
            vals[s] = v
    else:
        step(node, vals, failed)
        if node.id in failed:
            del st["open"][i]
            return
    st["times"].setdefault(i, ([], []))[side].append(time.perf_counter() - t0)


def _stock_side(node, values, autotune):
    """The node with TensorFlow's kernel for its heavy op (an epilogue node: the producer on
    TensorFlow's, the epilogue on ours, as the choice would run it)."""
    producer = autotune.producer(node)
    if producer is node:
        return _stock(node, values)
    flag = node.fn.producer
    flag["stock"] = True
    try:
        return node.fn([as_numpy(v) for v in values], node.out_specs)
    finally:
        flag["stock"] = False


def run_sub(prog, args, count=True):
    """A sub-program's run (If/While/Case bodies): serial, inside the enclosing run, which
    already holds the thread and BLAS settings; `count=False` leaves the ledger to the caller
    (a While counts its iterations once per loop)."""
    if _tuning(prog):   # kernel choices still being measured: run counts this run itself
        out = run(prog, args, serial=True)
        if not count:
            ledger.program_ops(prog.op_counts, -1)
        return out
    vals = _slots(prog, args)
    failed = {}
    _serial(prog, vals, failed)
    if count:
        ledger.program_ops(prog.op_counts)
    if failed:
        raise _Raise(min(failed.values(), key=lambda f: f.node.id))
    return [vals[s] for s in prog.outputs]


def _tuning(prog):
    """Whether the program's kernel choices are still to be measured (autotune.py); marks it
    tuned when there is nothing to measure."""
    if prog.tuned:
        return False
    from . import autotune
    if autotune.mode() == "off" or shadow_mode or trace.ON:
        prog.tuned = True
        return False
    return True


def _slots(prog, args):
    """The run's value slots: the inputs and the program's constants in place."""
    vals = [None] * prog.n_slots
    for s, a in zip(prog.inputs, args):
        vals[s] = a
    for s, v in prog.consts.items():
        vals[s] = v
    return vals


def _serial(prog, vals, failed):
    """Every node in program order: the generated driver, the interpreter from where it
    stopped (a failure, tracing, shadow mode)."""
    start = 0
    if DRIVERS and DROP_DEAD and not trace.ON and not shadow_mode and not _cold_run(prog):
        drive = prog.driver or _driver(prog)
        r = drive(vals, failed)
        start = len(prog.nodes) if r is None else r[0]
        if r is not None and r[1] is not None:   # node `start` raised: a value, as in step
            node = prog.nodes[start]
            _poison(node, vals, failed, Failed(r[1], node, _describe_inputs(node, vals)))
            start += 1
    drops = prog.drops if DROP_DEAD else [()] * len(prog.nodes)
    for n in prog.nodes[start:]:
        step(n, vals, failed)
        for s in drops[n.id]:
            vals[s] = None
    if type(prog.cold) is int and _library("compiles").raised[0] == prog.cold:
        prog.cold = False   # nothing deferred in this run: the next one builds the driver


def _cold_run(prog):
    """While kernels' first compiles run in the background (kernels/cpu/deferred.py), a program
    is interpreted: a node whose kernel is compiling runs on TensorFlow for that call (declined),
    which the generated driver does not allow for every node. The first run that starts no
    compile builds the driver. prog.cold: True before its first run, the deferral count when
    an interpreted run started, False once warm."""
    if prog.cold is False:
        return False
    c = _library("compiles")
    if c is None or c.mode() != "async":
        prog.cold = False
        return False
    prog.cold = c.raised[0]
    return True


def run(prog, args, threads_pool=None, serial=False):
    """Run a program on its inputs; returns output values (numpy arrays or tensors)."""
    if _tuning(prog):
        out = _tuning_run(prog, args)
        if out is not None:
            return out
    vals = _slots(prog, args)
    p = threads_pool if threads_pool is not None else pool()
    failed = {}
    concurrent = not serial and p.size > 0 and prog.parallel
    trial = None
    if concurrent and prog.schedule_trial is not False:   # _schedule_trial: still measuring
        trial = prog.schedule_trial
        if type(trial) is int:   # the serial runs before the trial
            if trial < SCHEDULE_AFTER:
                prog.schedule_trial = trial + 1
                concurrent, trial = False, None
            else:
                trial = prog.schedule_trial = {True: [], False: []}
        if trial is not None:
            concurrent = len(trial[True]) <= len(trial[False])   # alternate, concurrent first
            t_start = time.perf_counter()
    # numba's count held to one on this thread with one thread in all (set_threads(1),
    # TF_BACKEND_THREADS=1): numba's kernels and the GEMM team too, not only the executor. In a
    # concurrent run only nodes that run beside a heavy node are held to one (_Run.work): held
    # for the whole run, every convolution of a program with two cheap independent nodes (a
    # pool and a pad in ResNet50V2's stride-2 blocks) ran on one thread, 117 ms per call
    # against 65 ms serial (AVX2 EPYC, 2 cores)
    threads = _numba_threads(1) if not serial and p.size == 0 else None
    # numpy's OpenBLAS held to one thread for the whole run (every product of ours runs it so):
    # one switch of its count per call instead of two per product (1% of a GEMM chain)
    blas = None if serial else _library("blas")
    if blas is not None:
        blas.single_thread_enter()
    try:
        if not concurrent:
            _serial(prog, vals, failed)
        else:
            r = _Run(prog, vals, p)
            failed = r.failed
            roots = [i for i, c in enumerate(r.counts) if c == 0]
            if not roots:
                r.q.put(_DONE)
            else:
                for i in roots[1:]:
                    r.q.put(i)
                    if prog.nodes[i].heavy:
                        p.wake(r)
                r.work(roots[0])
                while True:
                    item = r.q.get()
                    if item is _DONE:
                        break
                    r.work(item)
    finally:
        if blas is not None:
            blas.single_thread_exit()
        if threads is not None:
            _numba_threads(threads)
    if trial is not None:
        _schedule_trial(prog, trial, concurrent, time.perf_counter() - t_start)
    ledger.program_ops(prog.op_counts)
    if failed:
        raise _Raise(min(failed.values(), key=lambda f: f.node.id))
    return [vals[s] for s in prog.outputs]


SCHEDULE_RUNS = 3   # timed runs per way (the first of each warms up) before the choice
# A program's first runs are serial, its trial comes after: a function called a few times only
# (Keras' predict of 1024 images in 4 calls, whose mixed_bfloat16 CNN has a weight cast beside
# its convolutions) paid the trial's concurrent runs, 1.24x slower than its serial ones there,
# and never used what the trial found
SCHEDULE_AFTER = 8


def _schedule_trial(prog, trial, concurrent, seconds):
    """A program with independent heavy nodes runs serially and concurrently in turn for its
    first calls; the faster way stays (prog.parallel). On 2 cores the concurrent path lost
    where many small nodes fight for the GIL (NASNetMobile b1: 166 against 107 ms per call,
    AVX2 EPYC) and won where two long serial kernels run side by side."""
    trial[concurrent].append(seconds)
    if min(len(trial[True]), len(trial[False])) > SCHEDULE_RUNS:
        best = {k: min(v[1:]) for k, v in trial.items()}
        prog.parallel = best[True] < best[False]
        prog.schedule_trial = False
        ledger.scheduled(prog.name, prog.parallel, best[False] / max(best[True], 1e-9))


class _Raise(Exception):
    """Carries the first Failed out of `run`; functions.py turns it into the TF exception."""

    def __init__(self, failed):
        super().__init__(str(failed.exc))
        self.failed = failed


def step(node, vals, failed):
    """Run one node into vals, or record its failure (and skip it when an input failed)."""
    if trace.ON:
        t0 = trace.now()
        _step(node, vals, failed)
        trace.span(node.name, "node", t0, op=node.op, kind=node.kind,
                   path="fallback" if node.kind in ("stock", "reads") else "backend", device="CPU:0",
                   fused=" -> ".join(node.fused_ops), shapes=trace.shapes(
                       vals[s] for s in node.outputs))
        return
    _step(node, vals, failed)


def _step(node, vals, failed):
    for s in node.inputs:
        v = vals[s]
        if type(v) is Failed:
            _poison(node, vals, failed, v)
            return
    for c in node.ctrl:
        if c.id in failed:
            _poison(node, vals, failed, failed[c.id])
            return
    try:
        outs = execute(node, vals)
    except _Raise as e:  # a failure inside a sub-program
        _poison(node, vals, failed, e.failed)
        return
    except Exception as e:  # noqa: BLE001 - errors are values
        _poison(node, vals, failed, Failed(e, node, _describe_inputs(node, vals)))
        return
    if outs is not None:
        for s, v in zip(node.outputs, outs):
            vals[s] = v


def _describe_inputs(node, vals):
    parts = []
    for s in node.inputs:
        v = vals[s]
        if type(v) is HostList:
            parts.append(f"list<{v.dtype.name}>[{v.n}]")
            continue
        shape = tuple(getattr(v, "shape", ()))
        dt = getattr(v, "dtype", None)
        name = getattr(dt, "name", str(dt))
        parts.append(f"{name}[{','.join(str(d) for d in shape)}]")
    return ", ".join(parts)


def _poison(node, vals, failed, f):
    failed.setdefault(node.id, f)
    for s in node.outputs:
        vals[s] = f


def may_defer(frame):
    """Whether the kernel call below `frame` (an `execute`) may decline while its compile runs
    in the background: a kernel node (it falls back in `execute`) or a fused one whose runner
    says it declines (its group's ops on TensorFlow: passes/fuse_elementwise.py,
    passes/epilogue.py, passes/fuse_reduce.py)."""
    node = frame.f_locals.get("node")
    if node is None:
        return False
    if node.kind == "fused":
        return getattr(node.fn, "declines", False)
    return node.kind == "kernel" and node.op not in VIEW_OPS


def execute(node, vals):
    kind = node.kind
    if kind == "fused":
        k = node.inplace
        out = vals[node.inputs[k]] if k is not None else None
        return node.fn([as_numpy(vals[s]) for s in node.inputs], node.out_specs,
                       out=out if writable(out) else None)
    if kind == "kernel":
        arrays = [as_numpy(vals[s]) for s in node.inputs]
        if shadow_mode:
            return _shadow(node, vals, arrays)
        if node.op in VIEW_OPS:
            return _view(node, arrays)
        k = node.inplace
        if k is not None and writable(vals[node.inputs[k]]):
            buf = arrays[k]
            try:   # an elementwise kernel declines before it writes
                node.kdef.fn(arrays, [buf], node.attrs)
            except Unsupported as u:
                return declined(node, [vals[s] for s in node.inputs], u)
            return [buf]
        try:
            return run_kernel(node.kdef, node.shape_fn, arrays, node.attrs, node.out_specs)
        except Unsupported as u:
            return declined(node, [vals[s] for s in node.inputs], u)
    if kind == "stock" or kind == "reads":
        frames = _frames.stack
        if frames and node.attrs.get("loop_invariant"):   # passes/loop_reads.py
            frame = frames[-1]
            got = frame.get(id(node))
            if got is None:
                got = frame[id(node)] = _tensorflow_node(node, vals)
            return got
        return _tensorflow_node(node, vals)
    if kind == "list":
        return node.fn([v if type(v) is HostList else as_numpy(v)
                        for v in (vals[s] for s in node.inputs)], node.attrs)
    if kind == "memo":
        return node.fn(vals)
    if kind == "region":
        return _region(node, vals)
    if kind == "alias":
        return [vals[s] for s in node.inputs]
    if kind == "noop":
        return None
    if kind == "if":
        sub = node.subs[0] if truthy(vals[node.inputs[0]]) else node.subs[1]
        return run_sub(sub, [vals[s] for s in node.inputs[1:]])
    if kind == "case":
        i = int(as_numpy(vals[node.inputs[0]]))
        sub = node.subs[i] if 0 <= i < len(node.subs) else node.subs[-1]
        return run_sub(sub, [vals[s] for s in node.inputs[1:]])
    if kind == "while":
        if node.spec is not None and LOOPS:
            out = _compiled_loop(node, vals)
            if out is not None:
                return out
        elif node.reason is not None:   # the pass or the device declined it: say why, once
            ledger.loop_interpreted(node.name, node.reason)
        cond, body = node.subs
        loop = [vals[s] for s in node.inputs]
        frames = _frames.stack
        frames.append({})   # this loop run's invariant reads (passes/loop_reads.py)
        conds = bodies = 0
        try:
            while True:
                conds += 1
                if not truthy(run_sub(cond, loop, False)[0]):
                    break
                bodies += 1
                loop = run_sub(body, loop, False)
        finally:
            frames.pop()
            # the ledger counts every iteration, added once per loop run
            ledger.program_ops(cond.op_counts, conds)
            ledger.program_ops(body.op_counts, bodies)
        return loop
    raise NotImplementedError(kind)


# While loops with a compiled form run it (passes/compile_loops.py); TF_BACKEND_LOOPS=0: A/B
LOOPS = os.environ.get("TF_BACKEND_LOOPS", "1") != "0"


class _Compiled:
    """A loop's or region's generated function and its state: "new" (not called yet),
    "compiling" (a background compile runs; the interpreter runs the node meanwhile), "ready";
    `ran` once its first call (or compile) is in the ledger; `trips` the last trip count."""
    __slots__ = ("fn", "consts", "copy_in", "src", "ran", "trips", "state")

    def __init__(self, fn, consts, copy_in, src):
        self.fn, self.consts, self.copy_in, self.src = fn, consts, copy_in, src
        self.ran, self.trips, self.state = False, 0, "new"


def _what(node):
    return "region" if node.kind == "region" else "loop"


def _built(node, build):
    """node.fn, built by `build(node.spec)` on first use; None where the device declines it
    (the reason is recorded once)."""
    from kernels.regions import Ineligible
    if node.fn is None and node.spec is not None:
        t0 = time.perf_counter()
        try:
            node.fn = _Compiled(*build(node.spec))
        except Ineligible as e:
            node.spec, node.reason = None, f"{_what(node)} not compiled: {e}"
            ledger.loop_compiled(node.name, None, str(e), time.perf_counter() - t0)
    return node.fn


def _declined(node, e, t0):
    """The function does not compile: the interpreter keeps the node, the ledger says why."""
    why = [l.strip() for l in str(e).splitlines() if l.strip()][1:3]
    node.spec, node.fn = None, None
    node.reason = f"{_what(node)} not compiled: {type(e).__name__}"
    ledger.loop_compiled(node.name, None, f"{type(e).__name__}: {' '.join(why)}"[:400],
                         time.perf_counter() - t0)


def _call_compiled(node, got, args):
    """The function's results on `args`, or None: it is compiling (a background compile starts
    on the first call in "async" mode), it does not compile, or it raised (with FTZ/DAZ set:
    MXCSR is restored; the interpreter then runs the node and raises TensorFlow's error)."""
    loops = _library("loops")
    if got.state == "new" and LOOP_COMPILE == "async":
        full = tuple(args) + tuple(got.consts)
        if _cached(loops, got, full):
            got.state = "ready"   # an earlier process compiled it: this call loads it from disk
        else:
            got.state = "compiling"
            _waits[0] += 1
            with _pending_lock:
                _pending[0] += 1
            threading.Thread(target=_compile_loop, args=(node, got, full), daemon=True,
                             name="tf_backend-loop-compile").start()
            return None
    t0 = time.perf_counter()
    csr = loops.csr_get() if loops.HW_FLUSH else None
    try:
        res = got.fn(*args, *got.consts)
    except Exception as e:  # noqa: BLE001 - the interpreter runs it (and raises TF's error)
        if csr is not None:   # it raised with FTZ/DAZ set
            loops.csr_set(csr)
        if not got.ran and isinstance(e, numba.core.errors.NumbaError):
            _declined(node, e, t0)
        return None
    if not got.ran:   # the first run compiles (or loads numba's cached machine code)
        got.ran = True
        ledger.loop_compiled(node.name, len(got.src), None, time.perf_counter() - t0)
    return res


def _signature(got, full):
    """numba's signature of the function for its arguments (constants included); a loop run
    by halves (kernels/cpu/loop_split.Rows) types its own."""
    types = getattr(got.fn, "arg_types", None)
    return types(full) if types is not None else tuple(numba.typeof(a) for a in full)


def _cached(loops, got, full):
    """Whether numba's disk cache holds the function for these arguments: its first call then
    loads it (milliseconds) instead of the interpreter running the loop or region while a
    background thread does (a recurrent layer's 40 iterations interpreted: tens of ms)."""
    try:
        sig = _signature(got, full)
    except Exception:  # noqa: BLE001 - an argument numba cannot type: the slow path decides
        return False
    return loops.cached(got.fn, sig)


def _array_arg(v, t):
    """A value as the compiled function takes it (a scalar of its dtype, a writable C array),
    or None when it is not of the static type the function was written for."""
    a = as_numpy(v)
    if a.dtype != t[1] or a.shape != t[2]:
        return None
    if a.ndim == 0:
        return a.dtype.type(a[()])
    return a if writable(a) and a.flags.c_contiguous else np.array(a)


def _compiled_loop(node, vals):
    """Run a While through its compiled function (the host device's "loops" library): None when
    the device declines the loop, it is still compiling, or the function raised on these inputs
    (the interpreter then runs the loop from the same inputs and raises TensorFlow's error)."""
    loops = _library("loops")
    got = _built(node, loops.build) if loops is not None else None
    if got is None or got.state == "compiling":
        if got is not None:
            _waits[0] += 1
        return None
    spec = node.spec
    args = []
    try:
        for k, t in enumerate(spec.vars):
            v = vals[node.inputs[k]]
            if t[0] == "h":
                continue
            if t[0] == "l":
                args += _list_in(v, t, got.copy_in[k], got.trips)
                continue
            a = _array_arg(v, t)
            if a is None:
                return None
            args.append(a)
        if spec.body.pre:
            args += _loop_pre(node, vals)
    except _NotPacked:
        return None
    res = _call_compiled(node, got, args)
    if res is None:
        return None
    its = got.trips = res[-1]
    out, j = [], 0
    for k, t in enumerate(spec.vars):
        if t[0] == "h":
            out.append(vals[node.inputs[k]])
        elif t[0] == "l":
            buf, n = res[j], int(res[j + 1])
            j += 2
            out.append(_list_out(buf, n, t, vals[node.inputs[k]]))
        else:
            r = res[j]
            j += 1
            out.append(np.array(r, t[1]) if not t[2] else r)
    cond, body = node.subs
    ledger.program_ops(cond.op_counts, its + 1)
    ledger.program_ops(body.op_counts, its)
    return out


# How a loop's function is compiled on first use: "async" (a background thread; the interpreter
# runs the loop until it is ready: a cold cache costs seconds per loop, which would otherwise
# stall the first step) or "sync" (the first run compiles it; tests, A/B runs)
LOOP_COMPILE = os.environ.get("TF_BACKEND_LOOP_COMPILE", "async")


_pending = [0]   # background compiles not finished yet
_pending_lock = threading.Lock()


_waits = [0]   # runs of a loop or region interpreted because its function was compiling


def compile_waits():
    """A count that moves whenever a run waits on a background compile (a loop or region
    interpreted meanwhile, a kernel call declined: kernels/cpu/deferred.py)."""
    c = _library("compiles")
    return _waits[0] + (c.raised[0] if c is not None else 0)


def compiles_pending():
    """Loops, regions and kernels compiling in the background."""
    c = _library("compiles")
    with _pending_lock:
        return _pending[0] + (c.pending() if c is not None else 0)


def wait_compiles(timeout=600.0):
    """Wait until no background compile of a loop or region is running (at most `timeout`
    seconds); returns the seconds waited. Benchmarks call it after warm-up, so that steady
    state is timed (the one-time compile is the cold-start figure)."""
    t0 = time.perf_counter()
    while compiles_pending() and time.perf_counter() - t0 < timeout:
        time.sleep(0.02)
    return time.perf_counter() - t0


def _compile_loop(node, got, args):
    try:
        _compile_loop_body(node, got, args)
    finally:
        with _pending_lock:
            _pending[0] -= 1


def _compile_loop_body(node, got, args):
    loops = _library("loops")
    t0 = time.perf_counter()
    try:
        sig = _signature(got, args)
        if not loops.compile_elsewhere(got.fn, sig, kind=_what(node)):   # a child process; else here
            got.fn.compile(sig)
    except Exception as e:  # noqa: BLE001 - it does not compile: the interpreter keeps it
        _declined(node, e, t0)
        return
    got.ran = True
    ledger.loop_compiled(node.name, len(got.src), None, time.perf_counter() - t0)
    got.state = "ready"


def _region(node, vals):
    """A compiled region's function on its inputs; its nodes one by one until the function is
    compiled (a child process, as for loops), where the device declines it, or where it raised
    (the nodes then raise TensorFlow's error)."""
    loops = _library("loops")
    got = _built(node, loops.build_region) if loops is not None else None
    if got is not None and got.state == "compiling":
        _waits[0] += 1
    elif got is not None:
        types = node.spec.types
        args = [_array_arg(vals[s], types[s]) for s in node.inputs]
        if not any(a is None for a in args):
            res = _call_compiled(node, got, args)
            if res is not None:
                return [np.array(r, types[s][1]) if not types[s][2] else r
                        for s, r in zip(node.outputs, res)]
    failed = {}
    for m in node.attrs["nodes"]:
        step(m, vals, failed)
    if failed:
        raise _Raise(min(failed.values(), key=lambda f: f.node.id))
    return None


class _NotPacked(Exception):
    """A list input the compiled loop cannot take as a buffer (unknown items, other shapes)."""


def _list_in(v, t, copy, room):
    """(buffer, length) of a HostList for a compiled loop: its packed buffer when it has one
    (copied when the loop writes it), else its items stacked (unset ones as zeros). A buffer
    the loop writes gets room for `room` more items (the last run's trip count: a loop pushing
    once per iteration then never grows it)."""
    if type(v) is not HostList or v.dtype != t[1]:
        raise _NotPacked
    n = v.n
    cap = n + room if copy else n
    p = v.packed
    if p is not None and p.shape[0] >= n:
        if not copy:
            return [p, n]
        buf = alloc.empty((max(cap, 1),) + tuple(t[2]), t[1])
        buf[:n] = p[:n]
        return [buf, n]
    buf = alloc.empty((max(cap, 1),) + tuple(t[2]), t[1])
    for i, it in enumerate(v.items()):
        if it is None:
            buf[i] = 0
        elif it.shape != tuple(t[2]):
            raise _NotPacked
        else:
            buf[i] = it
    return [buf, n]


def _list_out(buf, n, t, before):
    mx = before.max if type(before) is HostList else -1
    shape = before.shape if type(before) is HostList and before.shape is not None else t[2]
    return HostList(None, n, t[1], shape, mx, packed=buf)   # items made when asked for


def _loop_pre(node, vals):
    """The loop-invariant variable reads of the body, once before the loop."""
    cond, body = node.subs
    sub_vals = [None] * body.n_slots
    for s, k in zip(body.inputs, node.inputs):
        sub_vals[s] = vals[k]
    want = node.spec.body.pre
    got = {}
    for n in body.nodes:
        if n.kind == "reads" and any(s in want for s in n.outputs):
            for s, v in zip(n.outputs, _tensorflow_node(n, sub_vals)):
                got[s] = as_numpy(v)
    return [got[s] for s in want]


# Ops whose outputs are views of an input's data (kernels.view: Reshape, Split along the
# first dimension, ...): programs hand out zero-copy views. Views of TensorFlow memory are
# read-only (as_numpy), and in-place reuse writes only writable arrays of ours whose chain of
# views nothing else reads (passes/inplace.py), so a view never gets written through.
_HOST = devices.host().name
VIEW_OPS = kernels.view_ops(_HOST)


def _tensorflow_node(node, vals):
    if node.kind == "stock":
        return run_stock(node, vals)
    return tfa.read_variables([vals[s] for s in node.inputs], node.raw_attrs)


class _Frames(threading.local):
    def __init__(self):
        self.stack = []


_frames = _Frames()


def _view(node, arrays):
    v = kernels.VIEWS[node.op, _HOST]
    specs = node.out_specs
    n = 0
    if specs is not None:
        for sp in specs:
            n += math.prod(sp.shape)
    if specs is None or n != arrays[v.data].size:
        # no static shape, or an input whose size changed since (a variable of unknown shape):
        # the shape function checks it and raises TensorFlow's error
        specs = node.shape_fn([Spec(a.shape, a.dtype, a) for a in arrays], node.attrs)
    outs = v.fn(arrays, specs, node.attrs)
    if outs is None:   # not as views (a split across rows): the kernel copies
        outs = run_kernel(node.kdef, node.shape_fn, arrays, node.attrs, specs)
    return outs


def view_source(node):
    """The input slot whose data a view op's outputs are views of (kernels.view's `data`)."""
    return node.inputs[kernels.VIEWS[node.op, _HOST].data]


shadow_mode = False   # set by tf_backend.switch for TF_BACKEND=shadow


def _shadow(node, vals, arrays):
    """Our kernel and TensorFlow's for one node; TensorFlow's result flows on."""
    from . import shadow
    ours, ours_error = None, None
    try:
        ours = run_kernel(node.kdef, node.shape_fn, arrays, node.attrs, node.out_specs)
    except Exception as e:  # noqa: BLE001
        ours_error = e
    try:
        ref = run_stock(node, vals)
    except Exception as e:  # noqa: BLE001
        shadow.check(node.op, arrays, None, None, node.where, ours_error, e)
        raise
    if ours_error is not None:
        if not isinstance(ours_error, Unsupported):
            shadow.check(node.op, arrays, None, None, node.where, ours_error, None)
    else:
        shadow.check(node.op, arrays, ours, [as_numpy(r) for r in ref], node.where)
    return ref


def run_stock(node, vals):
    return _stock(node, [vals[s] for s in node.inputs])


def _stock(node, values):
    ins = [as_tensor(v) for v in values]
    fname = node.attrs.get("xla_function")
    if fname is not None:   # lower._xla_call: the function by name, compiled by XLA
        return tfa.execute_stock(fname, ins, (), len(node.outputs))
    group = node.attrs.get("group")
    if group is not None:   # passes/stock_runs.py: several variable ops in one call
        return tfa.execute_group(group, ins, len(node.outputs))
    if node.op in tfa.KERNEL_STATE_OPS:   # its own kernel (and generator state), as in stock
        return tfa.execute_isolated(node.state_key or node, node.op, ins, node.raw_attrs)
    return tfa.execute_stock(node.op, ins, node.raw_attrs, len(node.outputs))


def stock_outputs(node, values):
    """TensorFlow's kernel for a kernel node (its op and attrs) on input values, outside the
    ledger."""
    return _stock(node, values)


def declined(node, values, why):
    """A kernel declined these input values at run time (Unsupported): TensorFlow's kernel runs
    them for this call, counted in the ledger with the reason."""
    ledger.fallback(node.op, f"runtime:{why}")
    outs = _stock(node, values)
    if getattr(why, "deferred", False):
        # its kernel is compiling (kernels/cpu/deferred.py): a child runs the whole kernel on
        # inputs like these, and the outputs are made to look like our kernel's, writable
        # arrays, so the nodes reading them ask numba for the signatures they will use once
        # this one runs ours (read-only TensorFlow memory is another numba type: each would
        # compile twice)
        outs = [np.array(as_numpy(o)) for o in outs]
        _library("compiles").warm_kernel(node.op, node.attrs, [as_numpy(v) for v in values],
                                         [Spec(o.shape, o.dtype) for o in outs])
    return outs
