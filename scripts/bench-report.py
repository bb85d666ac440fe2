#!/usr/bin/env python3
"""Turns fp8moe-bench JSON files into the tables of docs/benchmarks.md and, when given a sweep,
a plot of both arms against the floor across live-token counts.

    scripts/bench-report.py SUITE.json [--sweep SWEEP.json --plot docs/benchmarks-sweep.png]
                            [--act-only ACT.json]

Prints Markdown on stdout. Needs matplotlib only for --plot.
"""
import argparse
import json


def table(run):
    c = run["ceilings"]
    lines = [
        f"GPU {run['gpu']}, commit `{run['commit']}`, {run['date']}; ceilings measured in the same run: "
        f"HBM read {c['read_TBps']:.2f} TB/s, FP8 GEMM {c['fp8_TFLOPs']:.0f} TFLOP/s.",
        f"Command: `{run['command']}`",
        "",
        "| capacity/tokens | padded us (p10-p90) | live us (p10-p90) | speedup | live TFLOP/s | weights TB/s "
        "| floor us | live/floor | bitwise |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k in run["cases"]:
        p, l = k["padded"], k["live"]
        ratio = f"{k['time_over_floor']:.2f}" if k.get("time_over_floor") else "-"
        lines.append(
            f"| {k['capacity']}/{k['tokens']} | {p['median_us']:.1f} ({p['p10_us']:.1f}-{p['p90_us']:.1f}) "
            f"| {l['median_us']:.1f} ({l['p10_us']:.1f}-{l['p90_us']:.1f}) | {k['speedup']:.2f}x "
            f"| {k['live_TFLOPs']:.0f} | {k['weight_TBps']:.2f} | {k['floor_us']:.1f} | {ratio} "
            f"| {'equal' if k['bitwise_equal'] else 'DIFFER'} |")
    # Cases may launch different kernels (the permutation's metadata runs as one kernel or as
    # permute_count + permute_metadata): one column per kernel role seen, in launch order.
    roles = []
    for k in run["cases"]:
        roles += [r for r in k["kernels_us"] if r not in roles]
    lines += ["", "Per-kernel medians of the live arm (us, CUPTI):", "",
              "| capacity/tokens | " + " | ".join(roles) + " |",
              "|---|" + "---|" * len(roles)]
    for k in run["cases"]:
        cells = [f"{k['kernels_us'][r]:.1f}" if r in k["kernels_us"] else "-" for r in roles]
        lines.append(f"| {k['capacity']}/{k['tokens']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def act_table(run):
    """fp8moe-bench --act-only: live against padded on fully occupied shapes, alone and (files from
    the bench since the L2 warm-up's session) after a predecessor kernel as in the pipeline. Live
    bytes: the gate and up halves read as BF16 (rows x 2I x 2), A2 written as FP8 (rows x I) and its
    FP32 scales (rows x I/128 x 4)."""
    after = any(s.get("after_predecessor") for s in run["shapes"])
    head = "| shape (fully occupied) | rows | I | alone: padded us | live us | live/padded |"
    rule = "|---|---|---|---|---|---|"
    if after:
        head += " after a predecessor: padded us | live us | live/padded |"
        rule += "---|---|---|"
    lines = [head + " live TB/s (alone) | bitwise |", rule + "---|---|"]
    for s in run["shapes"]:
        rows, inter = s["rows"], s["intermediate"]
        live_bytes = rows * inter * 5 + rows * (inter // 128) * 4
        p, l = s["padded"]["median_us"], s["live"]["median_us"]
        row = f"| {s['shape']} | {rows} | {inter} | {p:.1f} | {l:.1f} | {l / p:.3f} |"
        if after:
            a = s.get("after_predecessor") or {}
            ap, al = (a.get("padded") or {}).get("median_us"), (a.get("live") or {}).get("median_us")
            row += (f" {ap:.1f} | {al:.1f} | {al / ap:.3f} |" if ap and al else " - | - | - |")
        lines.append(row + f" {live_bytes / l / 1e6:.2f} | {'equal' if s['bitwise_equal'] else 'DIFFER'} |")
    return "\n".join(lines)


def plot(run, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    caps = sorted({k["capacity"] for k in run["cases"]})
    fig, axes = plt.subplots(1, len(caps), figsize=(6 * len(caps), 4.5), squeeze=False)
    for ax, cap in zip(axes[0], caps):
        ks = sorted((k for k in run["cases"] if k["capacity"] == cap), key=lambda k: k["tokens"])
        t = [k["tokens"] for k in ks]
        ax.plot(t, [k["padded"]["median_us"] for k in ks], "o-", label="padded")
        ax.plot(t, [k["live"]["median_us"] for k in ks], "o-", label="live")
        ax.plot(t, [k["floor_us"] for k in ks], "k--", label="floor (same-run ceilings)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("live tokens")
        ax.set_ylabel("whole pipeline, us (median)")
        ax.set_title(f"capacity {cap}")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(f"fp8moe on {run['gpu']} ({run['commit']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite")
    ap.add_argument("--sweep")
    ap.add_argument("--plot")
    ap.add_argument("--act-only")
    a = ap.parse_args()
    print(table(json.load(open(a.suite))))
    if a.sweep:
        sweep = json.load(open(a.sweep))
        print("\n### Sweep\n")
        print(table(sweep))
        if a.plot:
            plot(sweep, a.plot)
    if a.act_only:
        print("\n### Activation + quantization alone\n")
        print(act_table(json.load(open(a.act_only))))


if __name__ == "__main__":
    main()
