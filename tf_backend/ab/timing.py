"""Alternating timing rounds, summaries (median, IQR) and bootstrap ratio confidence intervals.

One round calls every arm once, in an order rotated each round so no arm always follows another.
Switching sides calls tf_backend.enable()/disable(), and enable() clears the dispatch caches, so
after each switch `rewarm` untimed calls run before the timed ones (default 1), and more until
REWARM_S has passed; a sample is `inner` calls and more until SAMPLE_S has passed. A function a
user calls in a loop runs back to back: one or two calls right after the other runtime ran
time what a switch costs instead (on 2 EPYC cores, with one re-warm call and two timed ones, a
Transformer block b1 measured 0.73-0.89 of stock, back to back 0.98; TensorFlow's threads sleep
while the other side runs, ours run on the caller's).
"""
import time

import numpy as np

from .. import executor, functions
from . import arms as arms_mod


def error_text(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def warm_up(arms, n, progress=None):
    """Call each arm n times (tracing/compiling happen here); keep the last outputs."""
    for arm in arms:
        t0 = time.perf_counter()
        waited = 0.0
        try:
            arms_mod.use_side(arm.side)
            functions._last[0] = None   # choosing() then asks about this arm's function
            for _ in range(max(1, n)):
                arm.outputs = arm.call()
            if arm.side == "ours":
                # loops and regions compile in the background while the interpreter runs them:
                # time steady state (the compile is a one-time, cold-start cost)
                waited = executor.wait_compiles()
                if waited > 0.05:
                    arm.outputs = arm.call()
                for _ in range(functions.CHOICE_MAX_CALLS):   # who runs the function, measured
                    if not functions.choosing():
                        break
                    arm.outputs = arm.call()
        except Exception as e:  # an arm that cannot run is reported, the others go on
            arm.error = error_text(e)
        if progress:
            state = f"failed: {arm.error}" if arm.error else f"{time.perf_counter() - t0:.1f} s"
            if waited > 0.05:
                state += f" (of which {waited:.1f} s waiting for background compiles)"
            progress(f"warm-up {arms_mod.LABELS[arm.name]}: {state}")


REWARM_S = 0.005    # untimed calls after a side switch last at least this long (rewarm > 0)
SAMPLE_S = 0.010    # a sample's calls last at least this long
MAX_CALLS = 1000    # ...in at most this many calls


def _calls(call, n, seconds):
    """Call `call` n times, then more until `seconds` have passed; the number of calls."""
    t0 = time.perf_counter()
    k = 0
    while k < n or (k < MAX_CALLS and time.perf_counter() - t0 < seconds):
        call()
        k += 1
    return k


def measure(arms, repeats, rewarm=1, inner=1, budget_s=None, min_rounds=3, progress=None):
    """{arm name: [seconds per call]} over `repeats` rounds (fewer if `budget_s` runs out)."""
    live = [a for a in arms if a.error is None]
    samples = {a.name: [] for a in live}
    start = last_note = time.perf_counter()
    for r in range(repeats):
        k = r % max(1, len(live))
        for arm in live[k:] + live[:k]:
            if arm.error:
                continue
            try:
                arms_mod.use_side(arm.side)
                if rewarm:
                    _calls(arm.call, rewarm, REWARM_S)
                t0 = time.perf_counter()
                k = _calls(arm.call, inner, SAMPLE_S)
                samples[arm.name].append((time.perf_counter() - t0) / k)
            except Exception as e:
                arm.error = error_text(e)
        now = time.perf_counter()
        if progress and (now - last_note > 5 or r + 1 == repeats):
            progress(f"round {r + 1}/{repeats} ({now - start:.0f} s)")
            last_note = now
        if budget_s and now - start > budget_s and r + 1 >= min_rounds:
            if progress:
                progress(f"time budget {budget_s:.0f} s reached after {r + 1} rounds")
            break
    arms_mod.use_side("stock")
    failed = {a.name for a in live if a.error}
    return {k: v for k, v in samples.items() if v and k not in failed}


def summarize(xs):
    a = np.asarray(xs, dtype=np.float64)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"n": int(a.size), "median_s": float(med), "q1_s": float(q1), "q3_s": float(q3),
            "min_s": float(a.min()), "max_s": float(a.max()), "mean_s": float(a.mean())}


def bootstrap_ratio(num, den, n_boot=2000, conf=0.95, seed=0):
    """median(num) / median(den) with a percentile bootstrap CI (samples resampled per arm)."""
    num, den = np.asarray(num, np.float64), np.asarray(den, np.float64)
    ratio = float(np.median(num) / np.median(den))
    rng = np.random.default_rng(seed)
    bn = np.median(rng.choice(num, (n_boot, num.size)), axis=1)
    bd = np.median(rng.choice(den, (n_boot, den.size)), axis=1)
    lo, hi = np.percentile(bn / bd, [50 * (1 - conf), 50 * (1 + conf)])
    return {"ratio": ratio, "ci_low": float(lo), "ci_high": float(hi), "confidence": conf,
            "n_boot": n_boot}


def ratios(samples, pairs=arms_mod.PAIRS):
    out = []
    for num, den in pairs:
        if num in samples and den in samples:
            out.append({"numerator": num, "denominator": den,
                        **bootstrap_ratio(samples[num], samples[den])})
    return out
