"""Outputs of ``b200c bench``: CSV, JSON, a Markdown table (the Hopper
progression's per-stage table) and a bar chart (matplotlib, Agg backend)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

CSV_FIELDS = ("kernel", "kind", "stage", "shape", "seq", "ms", "tflops", "pct", "correct", "max_err", "tol", "error",
              "source")
MD_BEGIN = "<!-- b200c bench: begin -->"
MD_END = "<!-- b200c bench: end -->"


def write_csv(rows: list, path) -> None:
    """One line per (kernel, shape)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r.as_dict())


def write_json(rows: list, meta: dict, path) -> None:
    """``{"meta": ..., "rows": [...]}`` (every timed run's milliseconds included)."""
    Path(path).write_text(json.dumps({"meta": meta, "rows": [r.as_dict() for r in rows]}, indent=1))


def _not_installed(r) -> bool:
    """A baseline whose package is missing (the FA4 column without flash-attn-4): not a failure."""
    return r.kind == "baseline" and r.error.startswith("not installed")


def _label(is_b: bool, name: str) -> str:
    """A kernel's column or line label: torch SDPA's forced backends say so."""
    return name if is_b or name not in ("cuDNN", "efficient") else f"torch SDPA {name}"


def _failures(rows) -> list:
    errs = [r for r in rows if r.error and not _not_installed(r)]
    missing = sorted({r.kernel for r in rows if r.error and _not_installed(r)})
    out = ["", "Failures:"] + [f"- {r.kernel} {r.shape}: {r.error}" for r in errs] if errs else []
    for name in missing:
        why = next(r.error for r in rows if r.kernel == name and r.error)
        out += ["", f"{name}: {why}."]
    return out


def _cell(r) -> str:
    if r is None:
        return "-"
    if r.error:
        return "not installed" if _not_installed(r) else "failed"
    t = f"{r.tflops:.0f}"
    if r.pct is not None and r.kind == "b200c":
        t += f" ({r.pct:.0f}%)"
    if r.correct is False:
        t += " WRONG"
    return t


def markdown(rows: list, meta: dict) -> str:
    """The table: one line per kernel (baselines first, then schedules in
    stage order), one column per shape: TFLOPS and (b200c) % of cuDNN."""
    shapes = []
    for r in rows:
        if (r.shape, r.seq) not in shapes:
            shapes.append((r.shape, r.seq))
    kernels = []
    for r in rows:
        key = (r.kind != "baseline", r.stage if r.stage is not None else -1, r.kernel)
        if key not in kernels:
            kernels.append(key)
    kernels.sort(key=lambda k: (k[0], k[1]))
    by = {(r.kernel, r.shape): r for r in rows}
    if len(shapes) > 6:  # many shapes (the Hopper table): one line per shape, one column per kernel
        return _by_shape(rows, meta, shapes, kernels, by)
    head = "| stage | kernel | " + " | ".join(f"{s} (S={n // 1024}K)" if n % 1024 == 0 else s for s, n in shapes) + " |"
    out = [f"Measured by `b200c bench` on {meta.get('device', '?')} ({meta.get('date', '')}): TFLOPS = "
           f"4·H·D·(attending query-key pairs) / median time over {meta.get('iters', '?')} runs (4·B·H·S²·D when "
           f"dense and non-causal), L2 flushed before each, BF16; (x%) = of cuDNN in the same run.", "", head,
           "|" + "---|" * (2 + len(shapes))]
    for is_b, stage, name in kernels:
        cells = [_cell(by.get((name, s))) for s, _ in shapes]
        st = str(stage) if is_b and stage is not None and stage >= 0 else ""
        out.append(f"| {st} | {_label(is_b, name)} | " + " | ".join(cells) + " |")
    out += _failures(rows)
    return "\n".join(out) + "\n"


def _by_shape(rows, meta, shapes, kernels, by) -> str:
    names = [_label(is_b, name) for is_b, _, name in kernels]
    out = [f"Measured by `b200c bench` on {meta.get('device', '?')} ({meta.get('date', '')}): TFLOPS = "
           f"4·H·D·(attending query-key pairs) / median time over {meta.get('iters', '?')} runs, L2 flushed before "
           f"each, BF16; (x%) = of cuDNN in the same run; - = not run for this shape.", "",
           "| shape | " + " | ".join(names) + " |", "|" + "---|" * (1 + len(names))]
    for shape, _ in shapes:
        cells = [_cell(by.get((name, shape))) for _, _, name in kernels]
        out.append(f"| {shape} | " + " | ".join(cells) + " |")
    out += _failures(rows)
    return "\n".join(out) + "\n"


def write_md(rows: list, meta: dict, path) -> None:
    """Write the table to ``path``; if the file exists and has the
    ``<!-- b200c bench: begin/end -->`` markers, replace only what is between them."""
    write_md_text(markdown(rows, meta), path)


def write_md_text(table: str, path) -> None:
    """:func:`write_md` for a table already made (the decode and backward tables)."""
    p = Path(path)
    if p.is_file():
        text = p.read_text()
        if MD_BEGIN in text and MD_END in text:
            a, rest = text.split(MD_BEGIN, 1)
            _, b = rest.split(MD_END, 1)
            p.write_text(f"{a}{MD_BEGIN}\n{table}{MD_END}{b}")
            return
    p.write_text(f"{MD_BEGIN}\n{table}{MD_END}\n")


def plot_png(rows: list, meta: dict, path) -> None:
    """Grouped bar chart: TFLOPS per kernel, one group per shape (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = []
    for r in rows:
        if r.shape not in shapes:
            shapes.append(r.shape)
    kernels = []
    for r in rows:
        name = r.kernel if r.kind == "b200c" else f"SDPA {r.kernel}"
        if name not in kernels:
            kernels.append(name)
    by = {((r.kernel if r.kind == "b200c" else f"SDPA {r.kernel}"), r.shape): r for r in rows}
    width = 0.8 / max(1, len(kernels))
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(shapes) * len(kernels) * 0.35 + 4), 5))
    for i, name in enumerate(kernels):
        vals = [(by[(name, s)].tflops or 0.0) if (name, s) in by else 0.0 for s in shapes]
        ax.bar([x + i * width for x in range(len(shapes))], vals, width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(shapes))])
    ax.set_xticklabels(shapes)
    ax.set_xlabel("B x H x S (D = 128, BF16, non-causal)")
    ax.set_ylabel("TFLOPS")
    ax.set_title(f"b200c bench on {meta.get('device', '?')}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
