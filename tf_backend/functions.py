"""tf.function calls on our runtime: compile each function once to a program, run it on the
executor, and hand back EagerTensors. Called from the AtomicFunction.call_flat hook."""
import os
import threading
import time
import warnings
import weakref

import numpy as np

from shape_fns import BackendError, Spec

from . import choices, dispatch, executor, ledger, on_device, trace, tf_adapter as tfa
from .program import lower, passes
from .devices.cpu import BUFFER, writable
from .runtime.program import NodeError

_cache = {}
_lock = threading.Lock()


class Compiled:
    __slots__ = ("name", "program", "reason", "const_outputs", "strict_violations", "graph",
                 "dynamic", "specialized", "bound", "choice_key", "prologue", "last", "calls",
                 "lowered")

    def __init__(self, name, program=None, reason=None):
        self.name, self.program, self.reason = name, program, reason
        self.calls = 0           # calls on the host path (a collective trial's alignment)
        self.choice_key = None   # its record's key (choices.py), when looked up
        self.const_outputs = set()
        self.strict_violations = []
        self.graph = None
        self.dynamic = ()        # input positions whose static shape has unknown dims
        self.specialized = {}    # concrete shapes of those inputs -> Program
        self.bound = None        # on a device (DEVICE): the program bound to it (on_device.py)
        # hoisted nodes (lower.hoist_prologue): (node, positions of its inputs in the args);
        # their outputs extend the args. The choice between our executor and TensorFlow is
        # then the generic program's, made before the prologue takes its batch
        self.prologue = ()
        self.last = None         # with a prologue: the program its latest call ran
        self.lowered = None      # with dynamic inputs: the program as lowered, before any pass
        #                          (each specialisation optimises a clone of it)


MAX_SPECIALIZED = 8

# Whole-function choice by measurement: once a program has settled (compiles done, its driver
# built, its serial/concurrent trial over) its next calls alternate, in blocks, between our
# executor and TensorFlow's own run of the function (CHOICE_RUNS timed calls each); when
# TensorFlow's median is below CHOICE_MARGIN of ours, TensorFlow runs the function from then on,
# in the ledger as `choice` with both medians. Why: on a small program every node pays Python
# (a batch-1 Keras CNN of 9 nodes: 0.68 ms per call against stock's 0.31 on the AVX2 EPYC VM),
# and a user who turns the backend on should not lose to stock on it.
# TF_BACKEND_FUNCTION_CHOICE=off keeps every compiled function on our executor; "remeasure"
# ignores the choices earlier processes recorded (choices.py) and records anew.
CHOICE = os.environ.get("TF_BACKEND_FUNCTION_CHOICE", "measure")
MEASURING = ("measure", "remeasure")
CHOICE_RUNS = 6
CHOICE_BLOCK = 4   # calls per side in a row while measuring (functions._new_trial)
CHOICE_MARGIN = 1.0
# a choice of our executor is measured again after CHOICE_RECHECK calls, then 10x as many, up
# to CHOICE_ROUNDS trials in all
CHOICE_RECHECK = 300
CHOICE_ROUNDS = 3
# TensorFlow's choice is final and recorded for later processes only when a second trial, right
# after the first, confirms it: a first trial can still pay a one-time cost on our side (the
# recurrent classifier's predict step measured ours at 6.2 ms against TensorFlow's 2.9 in the
# first process after a change of our sources, 2.3 against 3.2 in every later trial), and a
# wrong TensorFlow choice loses our speed for good
CHOICE_CONFIRM_TENSORFLOW = 2
# A function with collectives (a multi-worker step) is timed on every worker at once. Its
# trial starts at a call number that is a multiple of this (two blocks), so that the workers,
# whose calls of the step go in lockstep, run the same side at the same calls even where one
# settled a few calls later: unaligned, each worker timed its executor beside the other's
# TensorFlow step
CHOICE_ALIGN_COLLECTIVE = 2 * CHOICE_BLOCK
# At the end of its trial each worker all-reduces its two medians with its peers (_agree: a
# CollectiveReduceV2 of its own in the step's group, on a thread, so that a worker whose trial
# ended a few calls later is not waited for inside a step), runs our executor meanwhile, and then
# every worker takes the one choice the sums give, at CHOICE_MARGIN. Choosing alone, workers
# disagreed and waited for each other, so TensorFlow had to win by 25% there, and the two-worker
# MLP step stayed on ours with TensorFlow 8% faster on both workers (3.72 vs 4.06 ms; 1.076x
# stock's step). The agreements' instance keys: this base plus the count of agreements this
# process started in the group (the step's own instance key is a captured input, not a
# constant); workers run their collective steps in lockstep, so their k-th agreements meet. One
# that never meets its peers (a worker that never ends a trial of that step) stays pending, and
# ours runs: it has no timeout, since a collective that times out aborts TensorFlow's collective
# executor and with it every later step of the job (checked: DeadlineExceededError in the next
# step, 2 s after a 2 s timeout)
AGREE_INSTANCE_BASE = 1 << 30
AGREE_TIMEOUT_S = 0.0   # none
_agreements = {}   # group key -> agreements started
# Where the workers cannot agree (no all-reduce of constant group in the step), each chooses
# alone: with the two sides within noise the workers chose differently (two-worker CNN step:
# 3.73 vs 3.89 ms on one, the other the other way), and one waiting for the other cost more than
# either choice. There TensorFlow must win by this margin. Either way the first choice is final
# (no re-trial to flip one worker later), and none is recorded for later processes (each
# worker's graph has its own digest: one worker read an earlier run's record while the other
# measured). At 0.95 the two workers of an MLP step still disagreed (worker 0: ours 4.15 ms
# against TensorFlow's 4.53; worker 1: ours 4.87 against 3.97, so TensorFlow), the step 1.15x
# stock's; a trial's spread between two workers sharing two cores reaches 20%.
CHOICE_MARGIN_COLLECTIVE = 0.75
# A function's first trial starts after this many calls on our executor: a function called a
# few times only (Keras' predict or evaluate of a few batches: 8 calls for 512 samples) would
# otherwise pay TensorFlow's first runs of it (its graph optimisation: 25 ms a call for the
# recurrent classifier's predict step, against 2-3 ms later) beside ours, and end before its
# trial does, so that no later process could read a choice either (first predict of the
# recurrent classifier: 0.37-0.40 s against stock's 0.19-0.21)
CHOICE_AFTER = 16

# The device tf.function programs run on (tf_backend.enable(device=...)); None: the host CPU
# path (executor.py, generated drivers). Eager ops run on the host CPU path either way.
DEVICE = None


def compile_function(name, graph, device=None):
    """Lower + optimise (for `device`, when given); returns Compiled (program or whole-function
    fallback reason)."""
    t0 = time.perf_counter()
    bound = lowered = None
    try:
        if device is not None:
            bound = on_device.compile_program(graph, name, device)
            prog = bound.program
        else:
            prog = lower.hoist_prologue(lower.lower(graph, name))
            if _dynamic(prog):   # (passes never change the inputs' specs)
                lowered = prog.clone()
            _dump(prog, "before")
            passes.optimize(prog)
        _dump(prog, "after")
    except lower.Unlowerable as e:
        ledger.function_compiled(name, None, e.reason, time.perf_counter() - t0)
        return Compiled(name, reason=e.reason)
    except Exception as e:  # a defect of ours: the function runs on TensorFlow, visibly
        reason = f"compile_error:{type(e).__name__}"
        warnings.warn(f"tf_backend: could not compile {name} ({type(e).__name__}: {e}); "
                      f"it runs on TensorFlow", RuntimeWarning, stacklevel=2)
        ledger.function_compiled(name, None, reason, time.perf_counter() - t0)
        return Compiled(name, reason=reason)
    c = Compiled(name, prog)
    c.graph, c.bound = graph, bound
    c.lowered = lowered
    c.const_outputs = {i for i, s in enumerate(prog.outputs) if s in prog.consts}
    c.strict_violations = _eligible_fallbacks(prog)
    c.prologue = tuple((n, [prog.inputs.index(s) for s in n.inputs]) for n in prog.prologue)
    c.dynamic = _dynamic(prog)
    ledger.function_compiled(name, _node_summary(prog), None, time.perf_counter() - t0)
    return c


def _dynamic(prog):
    """Input positions whose static shape has unknown dims (a specialisation fills them)."""
    return tuple(i for i, s in enumerate(prog.inputs)
                 if prog.slot_specs[s].dtype.kind != "O" and not prog.slot_specs[s].fully_defined)


def specialize(c, shapes):
    """A program compiled for concrete shapes of the dynamic inputs (static specs everywhere:
    allocation without shape fns, fusion plans and buffer reuse decided once)."""
    try:
        prog = c.lowered.clone()   # lowered once, by compile_function
        for i, shape in zip(c.dynamic, shapes):
            s = prog.inputs[i]
            prog.slot_specs[s] = Spec(shape, prog.slot_specs[s].dtype)
        passes.optimize(prog)
        prog.notes.append(f"specialized for input shapes {shapes}")
        _dump(prog, "specialized")
        return prog
    except Exception:  # the generic program still runs these shapes
        return None


def _program_for(c, args):
    if not c.dynamic:
        return c.program
    shapes = tuple(tfa.shape_tuple(args[i]) for i in c.dynamic)
    prog = c.specialized.get(shapes)
    if prog is None:
        if len(c.specialized) >= MAX_SPECIALIZED:
            return c.program
        with _lock:
            prog = c.specialized.get(shapes)
            if prog is None:
                prog = c.specialized[shapes] = specialize(c, shapes) or c.program
    return prog


def _eligible_fallbacks(prog):
    """Nodes we were asked to run that stay on TensorFlow (strict mode refuses them)."""
    out = []
    for n in prog.nodes:
        if n.kind == "stock" and n.reason not in ("never_intercept", "not_an_op"):
            out.append(f"{n.op} ({n.reason}) at node '{n.name}'")
        for sub in n.subs:
            out.extend(_eligible_fallbacks(sub))
    return out


def _node_summary(prog):
    kernels, stock = {}, {}

    def walk(p):
        for n in p.counted_nodes():
            if n.kind in ("kernel", "list"):
                kernels[n.op] = kernels.get(n.op, 0) + 1
            elif n.kind == "fused":
                for op in n.fused_ops:
                    kernels[op] = kernels.get(op, 0) + 1
            elif n.kind in ("stock", "reads"):
                key = f"{n.op}:{n.reason}"
                stock[key] = stock.get(key, 0) + (len(n.outputs) if n.kind == "reads" else 1)
            for sub in n.subs:
                walk(sub)
    walk(prog)
    return {"kernel_nodes": kernels, "fallback_nodes": stock, "fusions": prog.fusions}


def _dump(prog, stage):
    d = os.environ.get("TF_BACKEND_DUMP")
    if not d:
        return
    os.makedirs(d, exist_ok=True)
    if stage == "specialized":
        stage = f"specialized{len(os.listdir(d))}"
    with open(os.path.join(d, f"{prog.name}.{stage}.txt"), "w") as f:
        f.write(prog.dump() + "\n")
    if stage != "before" and getattr(prog, "on_device", None) is None:
        # the generated serial driver the executor runs (program/driver.py)
        with open(os.path.join(d, f"{prog.name}.{stage}.driver.py"), "w") as f:
            f.write((prog.driver or executor._driver(prog)).source)


_generation = [0]   # bumped by clear_cache: notes naming older programs are stale


def on_call(atomic_fn, args):
    device_name = tfa.current_device()
    note = tfa.function_note(atomic_fn)
    if note is not None:
        # TensorFlow runs this function by measurement: the note says so without the checks
        # below (our hook on a batch-1 Keras CNN's 0.3 ms call: 20-28 us with them, 10-13 with
        # the note)
        mode, gen, noted_device, prog_ref, name = note
        prog = prog_ref()   # weak: clear_cache() frees programs (and what they memoise)
        if (prog is not None and prog.choice == "tensorflow" and mode == dispatch.mode
                and gen == _generation[0] and noted_device == device_name):
            ledger.function_called(name, fallback=True)
            return None
    if dispatch.mode == "off" or not tfa.device_is_cpu(device_name):
        return None   # a call placed on another device (e.g. a MirroredStrategy replica)
    name, graph = tfa.atomic_fn_info(atomic_fn)
    if name in tfa.ISOLATED_FUNCTIONS:   # a node's own TensorFlow function (execute_isolated)
        return None
    device = DEVICE
    # shadow programs keep every op as its own node; programs on a device are its own
    key = (name, dispatch.mode == "shadow", device)
    c = _cache.get(key)
    if c is None or (c.reason == RECORDED and dispatch.mode != "on"):
        with _lock:
            c = _cache.get(key)
            if c is None or (c.reason == RECORDED and dispatch.mode != "on"):
                c = _cache[key] = _recorded_or_compiled(name, graph, device, args)
    if c.program is None:
        _last[0] = None   # nothing to choose (functions.choosing)
        ledger.function_called(name, fallback=True)
        if dispatch.mode == "strict":
            raise tfa.tf_error(f"tf_backend strict mode: function {name} fell back to "
                               f"TensorFlow ({c.reason})", 12)
        return None
    if dispatch.mode == "strict" and c.strict_violations:
        raise tfa.tf_error(f"tf_backend strict mode: in function {name}, ops fell back to "
                           f"TensorFlow: {'; '.join(c.strict_violations[:10])}", 12)
    if c.bound is not None:
        try:
            outs = tfa.call_below_capture(on_device.run, c.bound, args)
        except NodeError as e:
            ins = ", ".join(f"{getattr(a.dtype, 'name', a.dtype)}{list(a.shape)}"
                            for a in e.args_ if hasattr(a, "shape"))
            raise _to_tf_error(executor.Failed(e.exc, e.node, ins), name) from None
        ledger.function_called(name, fallback=False)
        return _distinct_outputs(list(outs), args)
    c.calls += 1
    # ctl: the program whose choice and waits decide this call. With a prologue it is the
    # generic program: the side must be known before the prologue takes a batch from its
    # iterator (TensorFlow's run of the function would take another)
    ctl = c.program if c.prologue else _program_for(c, args)
    _last[0] = ctl
    trial = None
    if ctl.waited:
        if executor.compiles_pending() and not _kernel_state(ctl):
            # its last run waited on compiles still running in a child (kernels declined,
            # loops or regions interpreted): until they are ready TensorFlow runs the whole
            # function, at its own speed, rather than our interpreter around them
            ledger.function_called(name, fallback=True)
            return None
        ctl.waited = False
    if ctl.choice is not None:
        if ctl.agreement and ctl.agreement["done"]:
            _agreed(ctl, name)
        if ctl.choice == "tensorflow":
            if not c.dynamic or c.prologue:
                tfa.set_function_note(atomic_fn, (dispatch.mode, _generation[0], device_name,
                                                  weakref.ref(ctl), name))
            ledger.function_called(name, fallback=True)
            return None
        ctl.choice_calls += 1
        if ctl.choice_calls >= ctl.choice_recheck and CHOICE in MEASURING:
            _retrial(ctl)
    elif (CHOICE in MEASURING and dispatch.mode == "on" and not trace.ON
          and (ctl.choice_trial is not None or c.calls > CHOICE_AFTER)
          and _settled(c.last or ctl)):
        if ctl.choice_trial is None and _kernel_state(ctl):
            ctl.choice = "ours"
        else:
            trial = ctl.choice_trial
            if trial is None and (not _has_collectives(ctl)
                                  or c.calls % CHOICE_ALIGN_COLLECTIVE == 0):
                trial = ctl.choice_trial = _new_trial()
        if trial is not None:
            t_start = time.perf_counter()
            if trial["side"] != "ours":
                outs = tfa.call_function_stock(atomic_fn, args)
                _trial_step(ctl, name, trial, time.perf_counter() - t_start)
                _keep(c, ctl, trial, args)
                ledger.function_called(name, fallback=True)
                return outs
    t0 = trace.now() if trace.ON else 0.0
    waits = executor.compile_waits()
    prog, run_args = ctl, args
    try:
        if c.prologue:
            run_args = _run_prologue(c, args)
            prog = c.last = _program_for(c, run_args)
        outs = tfa.call_below_capture(executor.run, prog, run_args)
    except executor._Raise as e:
        raise _to_tf_error(e.failed, name) from None
    finally:
        if trace.ON:
            trace.span(name, "function", t0, device="CPU:0", shapes=trace.shapes(args))
    if executor.compile_waits() != waits:
        ctl.waited = True
    ledger.function_called(name, fallback=False)
    result = []
    for i, v in enumerate(_distinct_outputs(outs, args)):
        if type(v) is BUFFER:
            if i in c.const_outputs or not writable(v):
                v = np.array(v)   # never hand TensorFlow a buffer we keep
            v = tfa.make_tensor_any(v)
        result.append(v)
    if trial is not None:
        _trial_step(ctl, name, trial, time.perf_counter() - t_start)
        _keep(c, ctl, trial, args)
    return result


def _distinct_outputs(outs, args):
    """Each output a tensor of its own, as TensorFlow's call makes them: an input passed
    through (a forward function's output that its gradient reads) or one tensor at two outputs
    gets a new handle on the same buffer. A tape records the call from its inputs' to its
    outputs' ids: an output that is an input made a cycle (TensorFlow: "Invalid tape state",
    seen with a persistent tape). Our own buffers become new tensors anyway: only values
    passed through are looked at, and the inputs' ids only once there is one."""
    seen = None
    for i, v in enumerate(outs):
        if type(v) is not BUFFER:
            if seen is None:
                seen = {id(a) for a in args}
            if id(v) in seen:
                outs[i] = v = tfa.fresh_handle(v)
            seen.add(id(v))
    return outs


def _run_prologue(c, args):
    """The args extended by the hoisted nodes' outputs (TensorFlow's kernels, in order; an
    exhausted iterator raises TensorFlow's OutOfRangeError here, as the function would)."""
    args = list(args)
    for node, at in c.prologue:
        t0 = trace.now() if trace.ON else 0.0
        args.extend(executor._stock(node, [args[i] for i in at]))
        if trace.ON:
            trace.span(node.name, "node", t0, op=node.op, kind=node.kind, path="fallback",
                       device="CPU:0", shapes=trace.shapes(args[-len(node.outputs):]))
    return args


RECORDED = "recorded_choice"   # Compiled.reason of a function an earlier process gave to TF


def _recorded_or_compiled(name, graph, device, args):
    """A Compiled with no program when an earlier process measured TensorFlow faster on this
    function (choices.py): TensorFlow runs it from its first call, nothing compiled. Else the
    function compiled, holding the record's key when it was worked out for the lookup, and
    chosen for our executor without a trial where an earlier process measured that."""
    k = got = None
    if (CHOICE == "measure" and dispatch.mode == "on" and device is None and not trace.ON
            and choices.any_recorded()):
        k = choices.key(graph, args) or ""
        got = choices.recorded(k) if k else None
        if got is not None and got.get("runs") == "tensorflow":
            ledger.function_compiled(name, None, RECORDED, 0.0)
            ledger.function_choice(name, "tensorflow", got["ours_ms"] / 1e3,
                                   got["tensorflow_ms"] / 1e3, 0, recorded=True)
            return Compiled(name, reason=RECORDED)
    c = compile_function(name, graph, device)
    c.choice_key = k
    if got is not None and got.get("runs") == "ours" and c.program is not None:
        # our executor won in an earlier process: no trial now, measured again after
        # CHOICE_RECHECK calls (as after a choice made here)
        p = c.program
        p.choice, p.choice_rounds, p.choice_calls = "ours", 1, 0
        p.choice_recheck = _recheck_after(1, False)
        ledger.function_choice(name, "ours", got["ours_ms"] / 1e3, got["tensorflow_ms"] / 1e3,
                               0, recorded=True)
    return c


def _keep(c, prog, trial, args):
    """After a trial step: the choice of a function of static shapes (or one whose data comes
    from its prologue: the choice is the function's) is recorded for later processes
    (choices.py); TensorFlow's once confirmed (CHOICE_CONFIRM_TENSORFLOW), as it is final."""
    if (prog.choice not in ("tensorflow", "ours") or (c.dynamic and not c.prologue)
            or c.graph is None or _has_collectives(prog) or CHOICE not in MEASURING):
        return
    if c.choice_key is None:
        c.choice_key = choices.key(c.graph, args) or ""
    if c.choice_key:
        choices.record(c.choice_key, float(np.median(trial["ours"])),
                       float(np.median(trial["tensorflow"])), prog.choice)


CHOICE_MAX_CALLS = 80
_last = [None]   # the program of the latest call on the host path


def choosing():
    """Whether the function called last has its choice still to make (benchmarks call it
    until it is made, at most CHOICE_MAX_CALLS times, so that the chosen side is timed)."""
    prog = _last[0]
    return (CHOICE in MEASURING and dispatch.mode == "on" and prog is not None
            and prog.choice is None and not _kernel_state(prog))


def _settled(prog):
    """Past its one-time costs: no compile running, the driver built (or concurrent runs), the
    serial/concurrent and kernel-choice trials over."""
    if prog.parallel:
        if prog.schedule_trial is not False:
            return False
    elif prog.cold is not False:
        return False
    return prog.tune_state is None and not executor.compiles_pending()


def _kernel_state(prog):
    """Nodes whose kernels keep state between calls (stateful random ops with seeds): ours and
    TensorFlow's function each hold their own, so alternating would repeat draws."""
    got = prog.kernel_state
    if got is None:
        got = prog.kernel_state = any(n.op in tfa.KERNEL_STATE_OPS
                                      or any(_kernel_state(s) for s in n.subs)
                                      for n in prog.nodes)
    return got


def _new_trial():
    """Blocks of CHOICE_BLOCK calls per side, after one untimed block of TensorFlow's (its
    first calls of a function are slow: a Transformer block's 5.0, 4.5, 3.6 ms, then 3.0);
    the first call of a block is not timed. Alternating call by call timed TensorFlow right
    after our executor had run: a batch-1 Keras CNN's call_flat takes 177 us there against
    131 us after its own (AMD EPYC, the same with one numba thread: caches, not spinning
    threads), and one trial in five kept that function on our executor at 2.7x TensorFlow's
    time."""
    return {"ours": [], "tensorflow": [], "side": "warm", "n": 0}


def _trial_step(prog, name, trial, seconds):
    side = trial["side"]
    if trial["n"] and side != "warm":
        trial[side].append(seconds)
    trial["n"] += 1
    if trial["n"] == CHOICE_BLOCK:
        trial["side"], trial["n"] = "tensorflow" if side == "ours" else "ours", 0
    _choose(prog, name, trial)


def _choose(prog, name, trial):
    ours, tf_ = trial["ours"], trial["tensorflow"]
    if min(len(ours), len(tf_)) < CHOICE_RUNS:
        return
    mo, mt = float(np.median(ours)), float(np.median(tf_))
    collective = _has_collectives(prog)
    if collective and prog.agreement is None:
        prog.agreement = _agree(prog, mo, mt)
    pending = collective and bool(prog.agreement)
    if pending:   # ours until the workers' sums are in (on_call applies them)
        prog.choice = "ours"
    else:
        prog.choice = ("tensorflow" if mt < (CHOICE_MARGIN_COLLECTIVE if collective
                                              else CHOICE_MARGIN) * mo else "ours")
    prog.choice_rounds += 1
    prog.choice_calls = 0
    prog.choice_recheck = _recheck_after(prog.choice_rounds, collective)
    ledger.function_choice(name, prog.choice, mo, mt, prog.choice_rounds,
                           agreed="pending" if pending else None)
    if (prog.choice == "tensorflow" and not collective
            and prog.choice_rounds < CHOICE_CONFIRM_TENSORFLOW):
        _retrial(prog)


def _collective_reduce(prog):
    """(program, node) of a CollectiveReduceV2 whose group size and group key are constants,
    in `prog` or a sub-program, or None."""
    for n in prog.nodes:
        if n.op == "CollectiveReduceV2" and all(s in prog.consts for s in n.inputs[1:3]):
            return prog, n
        for sub in n.subs:
            got = _collective_reduce(sub)
            if got is not None:
                return got
    return None


def _agree(prog, mo, mt):
    """Start the workers' agreement on a collective function's choice: a thread all-reduces
    (ours, TensorFlow's) medians in the step's own group (AGREE_INSTANCE_BASE says under which
    instance key). Returns the holder on_call polls, or None where the step has no such
    collective (then each worker chooses alone)."""
    found = _collective_reduce(prog)
    if found is None:
        return None
    sub, node = found
    size, group = (int(np.asarray(sub.consts[s])) for s in node.inputs[1:3])
    with _lock:
        k = _agreements[group] = _agreements.get(group, 0) + 1
    instance = AGREE_INSTANCE_BASE + k
    attrs = dict(zip(node.raw_attrs[::2], node.raw_attrs[1::2]))
    attrs.update(T=tfa.DTYPE_TO_ENUM[np.dtype(np.float64)], merge_op="Add", final_op="Id",
                 timeout_seconds=AGREE_TIMEOUT_S, Nordering_token=0)
    flat = tuple(x for kv in attrs.items() for x in kv)
    holder = {"done": False, "sums": None, "workers": size, "error": None, "local": (mo, mt)}

    def run():
        try:
            ins = [tfa.make_tensor(np.array([mo, mt], np.float64)),
                   tfa.make_tensor(np.array(size, np.int32)),
                   tfa.make_tensor(np.array(group, np.int32)),
                   tfa.make_tensor(np.array(instance, np.int32))]
            (out,) = tfa.execute_stock("CollectiveReduceV2", ins, flat, 1)
            holder["sums"] = out.numpy()
        except Exception as e:  # noqa: BLE001 - a peer gone: ours stays
            holder["error"] = f"{type(e).__name__}: {e}"[:300]
        holder["done"] = True

    threading.Thread(target=run, daemon=True, name="tf_backend-choice-agreement").start()
    return holder


def _agreed(prog, name):
    """Apply the workers' agreed choice (every worker computes it from the same sums)."""
    holder, prog.agreement = prog.agreement, False
    if holder["sums"] is None:   # ours stays; the ledger keeps this worker's own medians
        ledger.function_choice(name, "ours", *holder["local"], prog.choice_rounds,
                               agreed=holder["error"] or "failed")
        return
    so, st = (float(x) / holder["workers"] for x in holder["sums"])
    prog.choice = "tensorflow" if st < CHOICE_MARGIN * so else "ours"
    ledger.function_choice(name, prog.choice, so, st, prog.choice_rounds,
                           agreed=holder["workers"])


def _recheck_after(rounds, collective):
    """Calls after `rounds` trials at which a function is measured again."""
    if rounds < CHOICE_ROUNDS and not collective:
        return CHOICE_RECHECK * 10 ** (rounds - 1)
    return float("inf")


def _has_collectives(prog):
    """Whether the program (or a sub-program) runs a collective op (lower.COLLECTIVE_PREFIX)."""
    got = getattr(prog, "collective", None)
    if got is None:
        got = prog.collective = any(n.op.startswith(lower.COLLECTIVE_PREFIX)
                                    or any(map(_has_collectives, n.subs)) for n in prog.nodes)
    return got


def _retrial(prog):
    """Measure again: a trial is a few calls on a machine that may be busy with something else
    at that moment, and a wrong "ours" costs every later call. TensorFlow's choice, once
    confirmed (CHOICE_CONFIRM_TENSORFLOW), is final: it runs at stock's speed by construction."""
    prog.choice = None
    prog.choice_trial = _new_trial()


def _to_tf_error(failed, fn_name):
    """The stock exception class, naming node, op type, input shapes and the user's line."""
    node, exc = failed.node, failed.exc
    where = f" defined at {node.where}" if node.where else ""
    if isinstance(exc, BackendError):
        code, msg = exc.code, exc.message
    elif hasattr(exc, "error_code"):
        code, msg = exc.error_code, getattr(exc, "message", str(exc))
    else:
        code, msg = 13, f"{type(exc).__name__}: {exc}"
    ins = f"; inputs: {failed.inputs}" if failed.inputs else ""
    text = (f"Graph execution error:\n\nDetected at node '{node.name}' (op {node.op}{ins}){where}\n"
            f"{msg}\n\t [[{{{{node {node.name}}}}}]] [Op:{fn_name}]")
    return tfa.tf_error(text, code)


def clear_cache():
    with _lock:
        _cache.clear()
        _generation[0] += 1
        tfa.forget_isolated()
