"""PNG figures (matplotlib, Agg) for `tfb ab --plot` and `tfb bench --plot`."""
import numpy as np

from .arms import LABELS

COLORS = {"stock": "#4c72b0", "ours": "#dd8452"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _latency(ax, runs, unit=1e3, ylabel="ms per call"):
    runs = [r for r in runs if r["samples_s"]]
    data = [np.asarray(r["samples_s"]) * unit for r in runs]
    if not data:
        ax.text(0.5, 0.5, "no samples", ha="center", transform=ax.transAxes)
        return
    ax.boxplot(data, showfliers=False, widths=0.5)
    rng = np.random.default_rng(0)
    for i, (r, d) in enumerate(zip(runs, data), start=1):
        ax.scatter(i + rng.uniform(-0.12, 0.12, d.size), d, s=10, alpha=0.6,
                   color=COLORS[r["side"]], zorder=3)
    ax.set_xticks(range(1, len(runs) + 1), [LABELS[r["arm"]] for r in runs], rotation=20,
                  ha="right")
    if max(d.max() for d in data) > 20 * min(d.min() for d in data) > 0:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title("latency per arm (box: IQR, dots: rounds)")
    ax.grid(axis="y", alpha=0.3)


def _op_breakdown(ax, top, n=12):
    arms = [a for a in ("stock_eager", "ours_eager") if a in top]
    if not arms:
        ax.text(0.5, 0.5, "no per-op times", ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    times = {a: {o["op"]: o["total_s"] for o in top[a]["ops"]} for a in arms}
    ops = sorted({op for a in arms for op in times[a]},
                 key=lambda op: -max(times[a].get(op, 0.0) for a in arms))[:n]
    labels = ops + ["outside ops (Python)"]
    y = np.arange(len(labels))
    h = 0.8 / len(arms)
    for k, a in enumerate(arms):
        vals = [times[a].get(op, 0.0) * 1e3 for op in ops]
        vals.append(max(0.0, top[a]["wall_s"] - top[a]["op_s"]) * 1e3)
        ax.barh(y + k * h, vals, height=h, label=LABELS[a], color=COLORS[a.split("_")[0]])
    ax.set_yticks(y + h * (len(arms) - 1) / 2, labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms per call")
    ax.set_title("time per op type (instrumented eager run)")
    ax.legend(loc="best", fontsize=8)
    ax.grid(axis="x", alpha=0.3)


def _script_memory(ax, runs):
    labels = [r["label"] for r in runs]
    vals = [max(r.get("max_rss_mib") or [0]) for r in runs]
    ax.bar(labels, vals, color=[COLORS[r["side"]] for r in runs])
    ax.set_ylabel("max RSS (MiB)")
    ax.set_title("peak memory")


def ab(doc, path):
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    if doc["target"]["kind"] == "script":
        _latency(a1, doc["runs"], unit=1.0, ylabel="wall time (s)")
        _script_memory(a2, doc["runs"])
    else:
        _latency(a1, doc["runs"])
        _op_breakdown(a2, doc["top_ops"])
    fig.suptitle(f"tfb ab: {doc['target']['kind']} {doc['target']['name']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def bench(doc, path):
    plt = _plt()
    arms = doc["settings"]["arms"]
    names = [w["name"] for w in doc["workloads"]]
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(names) + 3), 5))
    x = np.arange(len(names))
    w = 0.8 / max(1, len(arms))
    for k, a in enumerate(arms):
        vals = []
        for wl in doc["workloads"]:
            med = {r["arm"]: r["summary"]["median_s"] for r in wl["runs"] if r["summary"]}
            base = med.get("stock_eager")
            vals.append(med[a] / base if a in med and base else np.nan)
        ax.bar(x + k * w, vals, width=w, label=LABELS[a])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x + w * (len(arms) - 1) / 2, names, rotation=30, ha="right")
    ax.set_ylabel("median time / stock eager")
    ax.set_title("tfb bench")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
