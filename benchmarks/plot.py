"""Render the Performance page's figures from the benchmarks' JSON results.

Reads every ``*.json`` in ``benchmarks/results/`` (or ``--results DIR``), recognises what each
holds, and writes into ``docs/assets/`` (or ``--out DIR``):

  perf_overhead.png  per-call overhead, eager   (``bench_core.py --json``, "benchmark": "core")
  perf_vmap.png      vmap cost vs samples, depth 1-3  (``bench_vmap_curve.py --json``)
  perf_kernels.png   kernel bandwidth on a GPU  (``bench_kernels.py --json``: a "bandwidth" list)

Run: ``hatch run bench:plot`` (or ``python benchmarks/plot.py``). A figure whose results are
missing is skipped with a message; where several files hold the same kind, the one with the
latest ``machine.date_utc`` (then the last by name) is used.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

HERE = Path(__file__).resolve().parent
TIMES = "\N{MULTIPLICATION SIGN}"
SUPERSCRIPTS = str.maketrans(
    "0123456789", "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)
Doc = dict[str, Any]

#: Colours: opreg in blue, the alternatives in other hues, plain PyTorch in grey.
COLOURS = {
    "python fn": "#9e9e9e",
    "plain fn (torch.vmap)": "#616161",
    "bare Library op": "#8d6e63",
    "custom_op + register_autograd": "#ef6c00",
    "custom_op + register_vmap": "#ef6c00",
    "custom_op + register_vmap (EvoX-style)": "#7b1fa2",
    "PyTorch per-sample fallback": "#c62828",
    "opreg": "#1565c0",
}
OPREG_COLOUR = "#1565c0"
#: Longer labels where a result's name alone would mislead.
LABELS = {"python fn": "the Python function (no op)"}


def colour(name: str) -> str:
    return OPREG_COLOUR if name.startswith("opreg") else COLOURS.get(name, "#455a64")


def load_results(folder: Path) -> dict[str, tuple[Path, Doc]]:
    """The latest result file of each kind ("core", "vmap_curve", "kernels", ...) in ``folder``."""
    found: dict[str, tuple[Path, Doc]] = {}
    documents = [(path, json.loads(path.read_text())) for path in sorted(folder.glob("*.json"))]
    documents.sort(key=lambda item: str(item[1].get("machine", {}).get("date_utc", "")))
    for path, doc in documents:
        kind = doc.get("benchmark") or ("kernels" if "bandwidth" in doc else None)
        if kind is None:
            print(f"plot: {path}: not a benchmark result, ignored", file=sys.stderr)
            continue
        found[kind] = (path, doc)
    return found


def machine_line(machine: Doc) -> str:
    """One line naming the machine and the versions a CPU benchmark ran with."""
    system = str(machine.get("platform", "")).split("-")[0]
    return (
        f"{system} {machine.get('machine', '')}, {machine.get('cpu_count', '?')} CPUs, "
        f"torch {machine.get('torch', '?')}, Python {machine.get('python', '?')}, "
        f"{machine.get('torch_threads', 1)} thread, {str(machine.get('date_utc', ''))[:10]}"
    )


def plot_overhead(doc: Doc, out: Path) -> None:
    """Horizontal bars: microseconds per eager call of each contender."""
    eager: dict[str, float] = doc["results"]["eager_us"]
    reference = "custom_op + register_autograd"
    names = sorted(eager, key=eager.__getitem__)
    values = [eager[n] for n in names]
    fig, ax = plt.subplots(figsize=(9.5, 4.8), layout="constrained")
    labels = [LABELS.get(n, n) for n in names]
    bars = ax.barh(labels, values, color=[colour(n) for n in names])
    for bar, name, value in zip(bars, names, values, strict=True):
        ratio = value / eager[reference]
        ax.text(
            value + max(values) * 0.01,
            bar.get_y() + bar.get_height() / 2,
            f"{value:.2f} µs  " + ("(reference)" if name == reference else f"({ratio:.2f}{TIMES})"),
            va="center",
            fontsize=9,
        )
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.45)
    ax.set_xlabel(
        f"time per call, µs (median; lower is better)\n(in brackets: ratio to {reference})"
    )
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    parameters = doc["parameters"]
    ax.set_title(
        "Per-call overhead, eager: x + y on 8-float CPU tensors, "
        f"median of {parameters['rounds']} interleaved blocks\n{machine_line(doc['machine'])}",
        fontsize=10,
    )
    save(fig, out)


def plot_vmap(doc: Doc, out: Path) -> None:
    """Time per call and ratio to plain vmap against the number of samples, one column per depth."""
    rows: list[Doc] = doc["results"]
    depths = sorted({r["depth"] for r in rows})
    contenders = list(dict.fromkeys(r["contender"] for r in rows))
    fig, axes = plt.subplots(
        2, len(depths), figsize=(4.2 * len(depths), 7.6), sharex=True, sharey="row",
        layout="constrained", squeeze=False,
    )  # fmt: skip
    for column, depth in enumerate(depths):
        top, bottom = axes[0][column], axes[1][column]
        for name in contenders:
            series = sorted(
                (r for r in rows if r["depth"] == depth and r["contender"] == name),
                key=lambda r: r["samples"],
            )
            samples = [r["samples"] for r in series]
            style = {"color": colour(name), "marker": "o", "markersize": 4, "label": name}
            if name.startswith("opreg"):
                style["linewidth"] = 2.4
            top.plot(samples, [r["us_per_call"] for r in series], **style)
            top.fill_between(
                samples,
                [r["us_q1"] for r in series],
                [r["us_q3"] for r in series],
                color=colour(name),
                alpha=0.15,
                linewidth=0,
            )
            bottom.plot(samples, [r["ratio_to_plain_vmap"] for r in series], **style)
        top.set_title(f"depth {depth}: " + ("vmap(op)" if depth == 1 else f"{depth} nested vmaps"))
        bottom.set_xlabel("samples per call (product of the batch sizes, log)")
        for ax in (top, bottom):
            setup_log_axes(ax, sorted({r["samples"] for r in rows}))
    axes[0][0].set_ylabel("time per call, µs (median, log)")
    axes[1][0].set_ylabel("ratio to torch.vmap of the plain function (log)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=9, frameon=False)
    parameters = doc["parameters"]
    fig.suptitle(
        "One op call under vmap: x + y, 8 floats per sample, y shared; "
        f"depth d splits the samples over d levels (4096 = 16{TIMES}16{TIMES}16)\n"
        f"{machine_line(doc['machine'])}; median of {parameters['rounds']} interleaved blocks"
        " (band: quartiles)",
        fontsize=10,
    )
    save(fig, out)


def setup_log_axes(ax: Axes, ticks: Sequence[int]) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(ticks), [str(t) for t in ticks])
    ax.minorticks_off()
    ax.grid(alpha=0.3, which="major")


def plot_kernels(doc: Doc, out: Path) -> None:
    """Grouped bars: GB/s of each opreg kernel and its PyTorch baseline, with the ratio."""
    rows: list[Doc] = doc["bandwidth"]
    env: Doc = doc["environment"]
    fig, ax = plt.subplots(figsize=(10, 5.2), layout="constrained")
    width = 0.38
    positions = range(len(rows))
    ours = [r["ours GB/s"] for r in rows]
    base = [r["base GB/s"] for r in rows]
    ax.bar([p - width / 2 for p in positions], ours, width, color=OPREG_COLOUR, label="opreg")
    ax.bar([p + width / 2 for p in positions], base, width, color="#9e9e9e", label="PyTorch")
    for p, row in zip(positions, rows, strict=True):
        top = max(row["ours GB/s"], row["base GB/s"])
        ax.text(
            p, top + 80, f"{row['speedup']:.2f}{TIMES}", ha="center", fontsize=11, weight="bold"
        )
        ax.text(p - width / 2, 60, f"{row['ours GB/s']:.0f}", ha="center", color="white",
                fontsize=8, rotation=90, va="bottom")  # fmt: skip
        ax.text(p + width / 2, 60, f"{row['base GB/s']:.0f}", ha="center", color="white",
                fontsize=8, rotation=90, va="bottom")  # fmt: skip
    ax.set_xticks(list(positions), [kernel_label(r) for r in rows], fontsize=9)
    ax.set_ylabel("GB/s (bytes read + written / median kernel time)")
    ax.set_ylim(0, max(ours + base) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper right", fontsize=9)
    gpus = f"{env.get('gpus', 1)} {TIMES} {env.get('gpu', 'GPU')}"
    ax.set_title(
        f"opreg-kernels bandwidth vs PyTorch, 1 GiB per tensor, on {env.get('gpu', 'GPU')}\n"
        f"host: {gpus}, torch {env.get('torch')}, Triton {env.get('triton')}, "
        f"CUDA {env.get('cuda')}, Python {env.get('python')}"
        + (f"\n{doc['run']}" if "run" in doc else ""),
        fontsize=10,
    )
    save(fig, out)


def kernel_label(row: Doc) -> str:
    """Three lines: kernel name, its shape (powers of two as superscripts), the baseline."""
    name, _, shape = str(row["op"]).partition(" ")
    shape = re.sub(r"\^(\d+)", lambda m: m.group(1).translate(SUPERSCRIPTS), shape)
    shape = shape.replace(" x ", TIMES)
    return f"{name}\n{shape}\nvs {row['baseline']}"


def save(fig: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "assets")
    args = parser.parse_args()
    results = load_results(args.results)
    figures = (
        ("core", "perf_overhead.png", plot_overhead),
        ("vmap_curve", "perf_vmap.png", plot_vmap),
        ("kernels", "perf_kernels.png", plot_kernels),
    )
    for kind, filename, plot in figures:
        if kind not in results:
            print(f"plot: no {kind} results in {args.results}: {filename} skipped", file=sys.stderr)
            continue
        path, doc = results[kind]
        print(f"{filename} from {path.name}")
        plot(doc, args.out / filename)


if __name__ == "__main__":
    main()
