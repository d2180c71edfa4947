"""Terminal tables for `tfb ab` and `tfb bench` documents (see schema.py)."""
from .arms import LABELS


def fmt_time(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _g(x):
    return "-" if x is None else f"{x:.3g}"


def table(rows, right=()):
    """Rows of strings -> aligned lines; the first row is the header."""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w[i]) if i in right else c.ljust(w[i]) for i, c in enumerate(r)]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _header(doc):
    t, s, e = doc["target"], doc["settings"], doc["environment"]
    ins = ", ".join(f"{i['dtype']}[{','.join(map(str, i['shape']))}]" for i in t.get("inputs", []))
    what = (f"{t['name']}: {' '.join(t['command'])}" if "command" in t else t["name"])
    lines = [f"tfb ab: {t['kind']} {what}" + (f"  inputs {ins}" if ins else ""),
             f"  TensorFlow {e['tf_version']}, tf_backend {e['tf_backend_version']}, "
             f"{e['cpus']} CPUs, load average {_load(e)}; "
             + (f"{s.get('repeats')} run(s) per side" if "command" in t else
                f"{s.get('repeats')} rounds, {s.get('warmup')} warm-up")]
    lines += [f"  note: {n}" for n in t.get("notes", [])]
    return lines


def _load(e):
    a, b = e.get("loadavg_start"), e.get("loadavg_end")
    return "?" if not a else f"{a[0]:.2f} -> {b[0]:.2f}" if b else f"{a[0]:.2f}"


def runs_lines(runs):
    base = {r["arm"]: r["summary"]["median_s"] for r in runs if r["summary"]}
    ref = base.get("stock_eager") or base.get("stock_script")
    rows = [("arm", "median", "IQR", "min", "n", "vs stock")]
    for r in runs:
        sm = r["summary"]
        if not sm:
            rows.append((r["label"], "failed", r["error"] or "", "", "", ""))
            continue
        rows.append((r["label"], fmt_time(sm["median_s"]),
                     f"{fmt_time(sm['q1_s'])} - {fmt_time(sm['q3_s'])}", fmt_time(sm["min_s"]),
                     str(sm["n"]), f"{sm['median_s'] / ref:.2f}x" if ref else "-"))
    errors = [f"  {r['label']} FAILED: {r['error']}" for r in runs if r["summary"] and r["error"]]
    return table(rows, right={1, 3, 4, 5}) + errors


def ratio_lines(ratios):
    rows = [("ratio (median / median)", "value", "95% bootstrap CI", "")]
    for r in ratios:
        lo, hi = r["ci_low"], r["ci_high"]
        verdict = ("ours faster" if hi < 1 else "stock faster" if lo > 1 else "no clear difference")
        if not r["numerator"].startswith("ours"):
            verdict = ""
        rows.append((f"{LABELS[r['numerator']]} / {LABELS[r['denominator']]}",
                     f"{r['ratio']:.3f}", f"[{lo:.3f}, {hi:.3f}]", verdict))
    return table(rows, right={1})


def numerics_lines(rows_in):
    if rows_in and rows_in[0]["kind"] == "metric":
        rows = [("metric", "stock", "ours", "abs diff", "rel diff")]
        for n in rows_in:
            rows.append((n["name"], _g(n["stock"]), _g(n["ours"]), _g(n["abs_diff"]),
                         _g(n["rel_diff"])))
        return table(rows, right={1, 2, 3, 4})
    rows = [("arm vs reference", "out", "shape", "max abs", "max rel", "max ulp", "verdict")]
    for n in rows_in:
        shape = f"{n.get('dtype', '?')}[{','.join(map(str, n.get('shape') or []))}]"
        v = "ok" if n["verdict"] == "ok" else "MISMATCH: " + (n.get("detail") or "")
        rows.append((f"{LABELS[n['arm']]} vs {LABELS[n['reference']]}", str(n["output"]), shape,
                     _g(n.get("max_abs")), _g(n.get("max_rel")), _g(n.get("max_ulp")), v))
    return table(rows, right={1, 3, 4, 5})


def coverage_lines(coverage, max_reasons=6):
    lines = []
    for arm, led in coverage.items():
        if led is None:
            lines.append(f"  {LABELS[arm]}: no ledger (the arm failed or wrote no report)")
            continue
        t = led["totals"]
        ops = led["ops"]
        on = sorted(op for op, o in ops.items() if o["backend"])
        lines.append(f"  {LABELS[arm]}: {t['backend']} op calls on backend kernels, "
                     f"{t['fallback']} fell back ({100 * t['coverage']:.1f}% on backend)")
        if on:
            lines.append("    on backend: " + ", ".join(f"{op}×{ops[op]['backend']}" for op in on))
        fb = sorted(((o["fallback"], op, o["reasons"]) for op, o in ops.items() if o["fallback"]),
                    reverse=True)
        if fb:
            shown = [f"{op}×{n} ({', '.join(sorted(r))})" for n, op, r in fb[:max_reasons]]
            more = f", +{len(fb) - max_reasons} more op types" if len(fb) > max_reasons else ""
            lines.append("    fell back: " + ", ".join(shown) + more)
        lines += function_lines(led.get("functions") or {})
        if arm == "ours_function" and not t["backend"] and not led.get("functions"):
            lines.append("    (no tf.function reached the backend: the function ran on "
                         "TensorFlow's executor)")
    return lines


def node_coverage(led):
    """Share of tf.function nodes that ran on backend kernels, or None without programs."""
    if not led or not led.get("functions"):
        return None
    nk = sum(sum((f.get("kernel_nodes") or {}).values()) for f in led["functions"].values())
    nf = sum(sum((f.get("fallback_nodes") or {}).values()) for f in led["functions"].values())
    return nk / (nk + nf) if nk + nf else None


def _pct(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def function_lines(functions, max_nodes=6):
    """Compiled tf.functions (programs) from the ledger: calls, node kernels, node fallbacks."""
    lines = []
    for name, f in functions.items():
        kn, fn = f.get("kernel_nodes") or {}, f.get("fallback_nodes") or {}
        nk, nf = sum(kn.values()), sum(fn.values())
        state = ("compiled" if f.get("compiled") else
                 f"not compiled ({f.get('reason')})" if "compiled" in f else "seen")
        lines.append(f"    function {name}: {state}, {f.get('calls', 0)} calls on our executor, "
                     f"{f.get('fallback_calls', 0)} on TensorFlow's; nodes {nk} on backend "
                     f"kernels, {nf} on TensorFlow kernels"
                     + (f" ({100 * nk / (nk + nf):.1f}% on backend)" if nk + nf else ""))
        ch = f.get("choice")
        if ch:
            lines.append(f"      {'recorded' if ch.get('recorded') else 'measured'}: {ch['runs']} "
                         f"runs it (our executor {ch['ours_ms']:.3g} ms, TensorFlow's "
                         f"{ch['tensorflow_ms']:.3g} ms per call"
                         + (", measured by an earlier run)" if ch.get("recorded") else ")"))
        if fn:
            top = sorted(fn.items(), key=lambda kv: -kv[1])
            lines.append("      fallback nodes: " + ", ".join(f"{op}×{n}" for op, n in
                                                              top[:max_nodes])
                         + (f", +{len(top) - max_nodes} more" if len(top) > max_nodes else ""))
    return lines


def top_ops_lines(top, n=10):
    arms = [a for a in ("stock_eager", "ours_eager") if a in top]
    if not arms:
        return []
    lines = ["  " + " | ".join(
        f"{LABELS[a]}: {fmt_time(top[a]['wall_s'])}/call, {fmt_time(top[a]['op_s'])} in ops"
        for a in arms)]
    rows = [tuple(x for a in arms for x in ("op (" + LABELS[a] + ")", "calls", "time"))]
    cols = [top[a]["ops"][:n] for a in arms]
    for i in range(max(len(c) for c in cols)):
        row = []
        for c in cols:
            o = c[i] if i < len(c) else None
            row += [o["op"], f"{o['calls']:g}", fmt_time(o["total_s"])] if o else ["", "", ""]
        rows.append(tuple(row))
    right = {j for j in range(len(rows[0])) if j % 3}
    return lines + table(rows, right=right)


def ab_text(doc):
    script = doc["target"]["kind"] == "script"
    lines = _header(doc) + ["", "wall time per run" if script else "latency per call"]
    lines += runs_lines(doc["runs"])
    if doc["ratios"]:
        lines += [""] + ratio_lines(doc["ratios"])
    if script:
        lines += ["", "peak memory (max RSS) and exit codes"]
        for r in doc["runs"]:
            rss = r.get("max_rss_mib") or []
            lines.append(f"  {r['label']}: max RSS {max(rss) if rss else 0:.0f} MiB, "
                         f"exit codes {r.get('returncodes')}")
    if doc["numerics"]:
        lines += ["", "numerics"] + numerics_lines(doc["numerics"])
    elif script:
        lines += ["", "numerics: no final metric line (e.g. 'loss: 0.123') found in the output"]
    lines += ["", "op coverage (ledger of the whole ours run)" if script
              else "op coverage (ledger, one call per arm)"] + coverage_lines(doc["coverage"])
    if doc["top_ops"]:
        lines += ["", "top ops by time (separate instrumented eager run, per call)"]
        lines += top_ops_lines(doc["top_ops"])
    return "\n".join(lines)


def bench_text(doc):
    names = [a for a in ("stock_eager", "stock_function", "stock_xla", "ours_eager",
                         "ours_function") if a in doc["settings"]["arms"]]
    rows = [("workload",) + tuple(LABELS[a] for a in names)
            + ("ours/stock eager", "ours/stock fn", "numerics", "coverage eager/fn")]
    for w in doc["workloads"]:
        med = {r["arm"]: r["summary"]["median_s"] for r in w["runs"] if r["summary"]}
        rat = {(r["numerator"], r["denominator"]): r for r in w["ratios"]}

        def ratio(k):
            r = rat.get(k)
            return f"{r['ratio']:.2f} [{r['ci_low']:.2f}-{r['ci_high']:.2f}]" if r else "-"

        main = [n for n in w["numerics"] if n["arm"] == "ours_eager"]
        num = ("n/a" if not main else "ok" if all(n["verdict"] == "ok" for n in main)
               else "MISMATCH")
        led, fled = w["coverage"].get("ours_eager"), w["coverage"].get("ours_function")
        tf_choices = [f["choice"] for f in ((fled or {}).get("functions") or {}).values()
                      if (f.get("choice") or {}).get("runs") == "tensorflow"]
        how = ("recorded" if tf_choices and all(c.get("recorded") for c in tf_choices)
               else "measured")
        cov = (f"{100 * led['totals']['coverage']:.0f}%" if led else "-") + " / " + \
            (f"TensorFlow ({how})" if tf_choices else _pct(node_coverage(fled)))
        rows.append((w["name"],) + tuple(fmt_time(med.get(a)) if a in med else "failed"
                                         for a in names)
                    + (ratio(("ours_eager", "stock_eager")),
                       ratio(("ours_function", "stock_function")), num, cov))
    e = doc["environment"]
    head = [f"tfb bench: TensorFlow {e['tf_version']}, tf_backend {e['tf_backend_version']}, "
            f"{e['cpus']} CPUs, load average {_load(e)}; median time per call, ratio [95% CI]; "
            f"coverage 'TensorFlow (measured)': TensorFlow was measured faster and runs the "
            f"function ('recorded': measured by an earlier run, tf_backend/choices.py)"]
    errs = [f"  {w['name']}: {r['label']} failed: {r['error']}" for w in doc["workloads"]
            for r in w["runs"] if r["status"] != "ok"]
    return "\n".join(head + table(rows, right=set(range(1, len(names) + 1))) + errs)
