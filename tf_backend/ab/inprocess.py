"""One in-process A/B comparison: warm up every arm, take the ledger, time alternating rounds,
time ops per type, compare outputs; returns the `tfb ab` JSON document (see schema.py)."""
import tf_backend

from . import arms as arms_mod, compare, optimes, schema, timing


class Options:
    def __init__(self, repeats=20, warmup=2, rewarm=1, arms=None, reduction_len=4096,
                 op_time_calls=3, budget_s=None, inner=1, min_rounds=3, compute_dtype=None):
        self.repeats, self.warmup, self.rewarm, self.arms = repeats, warmup, rewarm, arms
        # a model computing in a narrower dtype than its outputs (Keras mixed precision): its
        # outputs are compared at that dtype's tolerance
        self.compute_dtype = compute_dtype
        self.reduction_len, self.op_time_calls = reduction_len, op_time_calls
        self.budget_s, self.inner, self.min_rounds = budget_s, inner, min_rounds

    def as_dict(self):
        return dict(vars(self))


def ledger_per_call(arm):
    """The ledger of one call of an ours arm (after warm-up), or None if it cannot run."""
    if arm.side != "ours" or arm.error:
        return None
    arms_mod.use_side("ours")
    tf_backend.reset_stats()
    try:
        arm.call()
    except Exception:
        return None
    return tf_backend.stats()


def run_entries(arms, samples):
    runs = []
    for arm in arms:
        xs = samples.get(arm.name, [])
        ok = arm.error is None and bool(xs)
        runs.append({"arm": arm.name, "label": arms_mod.LABELS[arm.name], "side": arm.side,
                     "mode": arm.mode, "status": "ok" if ok else "error",
                     "error": arm.error or (None if ok else "no samples"),
                     "samples_s": xs, "summary": timing.summarize(xs) if ok else None})
    return runs


def compare_arms(tf, fn, inputs, opts, progress=None):
    """The measured parts shared by `tfb ab` and `tfb bench`: runs, ratios, numerics, coverage,
    top_ops."""
    arms = arms_mod.make(tf, fn, inputs, opts.arms)
    timing.warm_up(arms, opts.warmup, progress)
    coverage = {a.name: ledger_per_call(a) for a in arms if a.side == "ours"}
    # eager arms alternate among themselves, function arms (XLA with them) among themselves:
    # a user's loop runs one way, and stock's tf.function right after stock's eager ops ran
    # slower for a while (a Transformer block b1: 2.02 ms against 1.67-1.71 ms with the
    # function arms alone, on 2 EPYC cores), which flattered ours
    groups = [g for g in ([a for a in arms if ("function" if a.mode == "xla" else a.mode) == m]
                          for m in ("eager", "function")) if g]
    budget = opts.budget_s / len(groups) if opts.budget_s and groups else opts.budget_s
    samples = {}
    for group in groups:
        samples.update(timing.measure(group, opts.repeats, opts.rewarm, opts.inner, budget,
                                      opts.min_rounds, progress))
    top = {}
    if opts.op_time_calls:
        for arm in arms:
            if arm.mode == "eager" and not arm.error:
                if progress:
                    progress(f"per-op times: {arms_mod.LABELS[arm.name]}")
                try:
                    top[arm.name] = optimes.profile(arm, opts.op_time_calls)
                except Exception as e:  # the timed runs stand; only the breakdown is missing
                    if progress:
                        progress(f"per-op times failed: {timing.error_text(e)}")
    arms_mod.use_side("stock")
    return {"runs": run_entries(arms, samples), "ratios": timing.ratios(samples),
            "numerics": compare.output_rows({a.name: a for a in arms}, opts.reduction_len,
                                            opts.compute_dtype),
            "coverage": coverage, "top_ops": top}


def run(tf, target, opts, progress=None):
    load = schema.loadavg()
    parts = compare_arms(tf, target.fn, target.inputs, opts, progress)
    return {"schema_version": schema.SCHEMA_VERSION, "tool": "tfb ab", "created": schema.now(),
            "environment": schema.environment(load), "target": target.describe(),
            "settings": opts.as_dict(), **parts}
