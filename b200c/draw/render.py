"""Draw a :class:`~b200c.draw.timeline.Timeline` with matplotlib (Agg, no
pyplot state): one lane per warp-role instance with its steps as boxes in issue
order, the barrier hand-offs as arrows labelled with the barrier's name, and
the SMEM and TMEM maps beside it.

matplotlib is the optional extra ``b200c[draw]``; it is imported only here,
only when a picture is made.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import DrawError

FORMATS = {".svg": "svg", ".png": "png"}
ROLE_COLORS = {"load": "#cfe2f3", "mma": "#fce5cd", "softmax": "#d9ead3", "correction": "#e6d5f0",
               "consumer": "#d0ece7", "cta": "#eeeeee"}
EDGE_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
               "#7f7f7f", "#bcbd22", "#393b79", "#637939")
TMEM_COLORS = {"S": "#9fc5e8", "P": "#f6b26b", "O": "#b6d7a8"}
BOX_W, BOX_H = 0.84, 0.46


def check_format(output) -> str:
    """The picture format (``"svg"`` or ``"png"``) named by ``output``'s extension.

    Raises:
        DrawError: another or no extension.
    """
    ext = Path(str(output)).suffix.lower()
    if ext not in FORMATS:
        raise DrawError(f"cannot write a picture to {str(output)!r}: b200c draw writes .svg and .png files "
                        f"(the extension picks the format)")
    return FORMATS[ext]


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise DrawError('b200c draw needs matplotlib, which is not installed: pip install "b200c[draw]"') from None
    matplotlib.use("Agg", force=False)
    from matplotlib import patches
    from matplotlib.figure import Figure

    return matplotlib, Figure, patches


def render(timeline, output, fmt: str | None = None) -> None:
    """Draw ``timeline`` to the file ``output`` as ``fmt`` (``"svg"`` or
    ``"png"``; default: from the extension).

    Raises:
        DrawError: unsupported format, or matplotlib missing.
        OSError: the file cannot be written.
    """
    fmt = fmt or check_format(output)
    if fmt not in FORMATS.values():
        raise DrawError(f"unsupported picture format {fmt!r}; b200c draw writes svg and png")
    matplotlib, Figure, patches = _matplotlib()
    t = timeline
    ncol = max(t.columns, 1)
    nlane = max(len(t.lanes), 1)
    main_w = 1.9 + 0.95 * ncol
    side_w = 4.6
    height = max(1.45 * nlane + 1.5, 4.6)
    with matplotlib.rc_context({"svg.hashsalt": "b200c", "svg.fonttype": "none", "font.size": 8,
                                  "font.family": "DejaVu Sans"}):
        fig = Figure(figsize=(main_w + side_w, height))
        gs = fig.add_gridspec(1, 3, width_ratios=(main_w, side_w / 2, side_w / 2), wspace=0.08,
                              left=0.02, right=0.99, top=1 - 0.95 / height, bottom=0.35 / height)
        _draw_lanes(fig.add_subplot(gs[0, 0]), t, patches, (height - 1.3) / 1.3)
        _draw_smem(fig.add_subplot(gs[0, 1]), t, patches)
        _draw_tmem(fig.add_subplot(gs[0, 2]), t, patches)
        stage = f"{stage_label(t.blog_stage, t.backend)}, " if t.blog_stage else ""
        title = f"{t.name} ({stage}{t.backend}): {t.iterations} {t.unit}"
        if t.issue_order:
            title += f";  MMA issue order: {t.issue_order}"
        fig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold")
        meta = {"Date": None} if fmt == "svg" else {}
        fig.savefig(output, format=fmt, dpi=150, metadata=meta)


def stage_label(stage: int, backend: str) -> str:
    """The title's name of a schedule's stage: ``"blog stage 7"`` (the blog's B200 progression,
    examples/NN_*.py) or, for the Hopper backend (``backend="sm90"``), ``"Hopper step h07"`` (the
    Hopper progression, examples/hopper/hNN_*.py: the blog has no such stage): the
    :attr:`~b200c.codegen.targets.Target.stage_format` of the backend's target record."""
    from ..codegen.targets import for_backend

    return for_backend(backend).stage_label(stage)


def _lane_y(t) -> dict:
    return {ln.key: len(t.lanes) - 1 - i for i, ln in enumerate(t.lanes)}


def _draw_lanes(ax, t, patches, span):
    ys = _lane_y(t)
    ncol = max(t.columns, 1)
    ax.set_xlim(-2.15, ncol - 0.4)
    top = len(t.lanes) - 0.35  # lanes keep their height when the side panels make the figure taller
    ax.set_ylim(min(-0.75, top - span), top)
    ax.axis("off")
    for ln in t.lanes:
        y = ys[ln.key]
        ax.add_patch(patches.Rectangle((-2.1, y - 0.42), ncol + 1.65, 0.84, facecolor="#f7f7f7" if y % 2 else "white",
                                       edgecolor="none", zorder=0))
        ax.text(-2.05, y, ln.title, ha="left", va="center", fontsize=8.5, fontweight="bold")
    for c in range(ncol):
        ax.text(c, -0.62, str(c), ha="center", va="center", fontsize=6.5, color="#999999")
    ax.text(-2.05, -0.62, "step column", ha="left", va="center", fontsize=6.5, color="#999999")
    role = {ln.key: ln.role for ln in t.lanes}
    pos = {}
    for s in t.steps:
        x, y = s.column, ys[s.lane]
        pos[s.id] = (x, y)
        ax.add_patch(patches.FancyBboxPatch((x - BOX_W / 2, y - BOX_H / 2), BOX_W, BOX_H,
                                            boxstyle="round,pad=0.0,rounding_size=0.06", linewidth=0.8,
                                            facecolor=ROLE_COLORS.get(role[s.lane], "#eeeeee"), edgecolor="#444444",
                                            zorder=3))
        ax.text(x, y, _wrap(s.label), ha="center", va="center", fontsize=8.5, zorder=4)
    families = sorted({e.barrier for e in t.edges})
    color = {f: EDGE_COLORS[i % len(EDGE_COLORS)] for i, f in enumerate(families)}
    placed = []
    boxes = list(pos.values())
    for e in t.edges:
        (x0, y0), (x1, y1) = pos[e.src], pos[e.dst]
        same_lane = y0 == y1
        if same_lane:  # an arc over the boxes in between
            start, end = (x0 + 0.1, y0 + BOX_H / 2), (x1 - 0.1, y1 + BOX_H / 2)
            rad = -0.5 if x1 > x0 else 0.5
        elif x1 > x0:
            start = (x0 + BOX_W / 2, y0 + (0.1 if y1 > y0 else -0.1))
            end = (x1 - BOX_W / 2, y1 + (-0.1 if y1 > y0 else 0.1))
            rad = 0.0
        else:  # same column or backwards (a cycle broken by the layout): leave through the top/bottom
            start = (x0, y0 + (BOX_H / 2 if y1 > y0 else -BOX_H / 2))
            end = (x1 + 0.15, y1 + (-BOX_H / 2 if y1 > y0 else BOX_H / 2))
            rad = 0.3
        ax.add_patch(patches.FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8, linewidth=0.9,
                                             color=color[e.barrier], linestyle="--" if e.named else "-",
                                             connectionstyle=f"arc3,rad={rad}", zorder=2, shrinkA=0, shrinkB=0))
        mx, my = _label_point(start, end, rad, placed, boxes)
        ax.text(mx, my, e.label, ha="center", va="center", fontsize=6.8, color=color[e.barrier], zorder=5,
                bbox=dict(boxstyle="round,pad=0.12", facecolor="white", edgecolor="none", alpha=0.85))
    if t.edges:
        import textwrap

        legend = ("boxes: each warp role's steps in issue order (a dependency diagram, not to time scale);  "
                  "arrows: a barrier phase handed from the step that arrives to the step that waits"
                  + ("; dashed: named barrier (bar.arrive -> bar.sync)" if any(e.named for e in t.edges) else ""))
        # wrapped to the lanes' width (about 14 characters of 8-point text per inch): a narrow picture's one
        # line ran over the SMEM and TMEM titles beside it
        width = int(ax.get_position().width * ax.figure.get_figwidth() * 14)
        ax.set_title(textwrap.fill(legend, max(width, 40)), loc="left", fontsize=8, color="#555555")


def _label_point(start, end, rad, placed, boxes):
    """A label position on the arrow, nudged along it away from boxes and labels already placed."""
    (x0, y0), (x1, y1) = start, end
    best = None
    for f in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8):
        x, y = x0 + f * (x1 - x0), y0 + f * (y1 - y0)
        if rad:  # arc3 bulges perpendicular to the chord by rad * chord / 2 at its middle
            bulge = rad * 4 * f * (1 - f) / 2
            x, y = x + bulge * (y1 - y0), y - bulge * (x1 - x0)
        clash = sum(1 for (px, py) in placed if abs(px - x) < 0.6 and abs(py - y) < 0.12)
        clash += 3 * sum(1 for (bx, by) in boxes if abs(bx - x) < BOX_W / 2 + 0.3 and abs(by - y) < BOX_H / 2 + 0.06)
        if best is None or clash < best[0]:
            best = (clash, x, y)
        if not clash:
            break
    placed.append((best[1], best[2]))
    return best[1], best[2]


def _draw_smem(ax, t, patches):
    ax.axis("off")
    ax.set_xlim(0, 1)
    ax.set_ylim(1.06, -0.1)
    ax.set_title(f"SMEM: {t.smem_bytes:,} of {t.smem_limit:,} B", fontsize=9, loc="left")
    if not t.smem:
        return
    total = max(r.offset + r.size for r in t.smem)
    # bar heights follow the sizes; regions under 4 % of the total are drawn at 4 % so their names fit
    hs = [max(r.size / total, 0.04) for r in t.smem]
    scale = 1.0 / sum(hs)
    y = 0.0
    for r, h in zip(t.smem, hs):
        h *= scale
        color = "#cfe2f3" if r.name.startswith("kv") else "#fff2cc" if r.name.startswith("q") else "#eeeeee"
        ax.add_patch(patches.Rectangle((0.0, y), 0.22, h, facecolor=color, edgecolor="#444444", linewidth=0.7))
        ax.text(0.26, y + h / 2, f"{r.name}  @{r.offset:,}  {_bytes(r.size)}", ha="left", va="center", fontsize=7)
        if r.note and h > 0.07:
            ax.text(0.26, y + h / 2 + 0.028, r.note[:40], ha="left", va="center", fontsize=5.8, color="#666666")
        y += h
    ax.text(0.0, 1.04, "bar heights follow the sizes (small regions enlarged)", fontsize=5.8, color="#888888")


def _draw_tmem(ax, t, patches):
    ax.axis("off")
    ax.set_xlim(0, 1)
    if not t.tmem:
        ax.set_ylim(1, 0)
        ax.set_title("TMEM", fontsize=9, loc="left")
        ax.text(0.0, 0.1, t.registers or f"none ({t.backend}): S, P and O\nlive in registers", fontsize=8, va="top")
        return
    limit = max(t.tmem_limit, t.tmem_alloc, 1)
    ax.set_ylim(limit * 1.06, -limit * 0.1)
    ax.set_title(f"TMEM: {t.tmem_alloc} of {t.tmem_limit} columns", fontsize=9, loc="left")
    ax.add_patch(patches.Rectangle((0.0, 0), 0.3, limit, facecolor="white", edgecolor="#999999", linewidth=0.6,
                                   linestyle=":"))
    labels = []
    for b in t.tmem:
        x, w = (0.15, 0.15) if b.kind == "P" else (0.0, 0.3)
        ax.add_patch(patches.Rectangle((x, b.first), w, b.ncols, facecolor=TMEM_COLORS.get(b.kind, "#dddddd"),
                                       edgecolor="#444444", linewidth=0.7, hatch="//" if b.kind == "P" else None))
        labels.append((b.first + b.ncols / 2, f"{b.name}  columns {b.first}..{b.first + b.ncols - 1}"))
    labels.sort()
    last = -1e9
    for y, text in labels:  # keep the names of overlapping buffers (P over S) apart
        y = max(y, last + limit * 0.045)
        ax.text(0.34, y, text, ha="left", va="center", fontsize=7)
        last = y
    ax.text(0.0, limit * 1.045, "128 lanes x columns; P (hatched) aliases S", fontsize=5.8, color="#888888")


def _wrap(label: str) -> str:
    """Box text: labels longer than 9 characters on two lines (at the last space or comma)."""
    if len(label) <= 9:
        return label
    for sep in (", ", " "):
        i = label.rfind(sep)
        if i > 0:
            return label[:i + len(sep)].rstrip() + "\n" + label[i + len(sep):]
    return label


def _bytes(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n:,} B"
