"""The ``b200c bench`` subcommand: argument handling and outputs; the GPU work
is in :mod:`b200c.bench.run` and :mod:`b200c.bench.trace`.

    b200c bench examples/hopper/*.py                      # the blog's shapes, table on stdout
    b200c bench examples/hopper/*.py --md docs/hopper-progression.md --png bench.png --csv b.csv --json b.json
    b200c bench my.py --shapes 1x16x32768,blog --iters 50
    b200c bench examples/hopper/h11_persistent.py --profile out/   # + Chrome/Perfetto trace per schedule

Without a GPU it refuses with one line (``b200c: error: b200c bench needs a CUDA GPU ...``).
"""
from __future__ import annotations

import argparse

import sys
from pathlib import Path


EPILOG = """exit status:
  0  success
  1  a b200c kernel failed or gave a wrong result (its row says why)
  2  error (one line "b200c: error: ..."): bad arguments, no GPU, invalid schedule file
"""


def add_parser(sub, func) -> None:
    """Register ``bench`` on the CLI's subparsers."""
    b = sub.add_parser("bench", help="TFLOPS of schedules on this GPU next to torch SDPA (cuDNN, FA2, efficient); "
                                     "needs a CUDA GPU",
                       description="Time schedules on the present CUDA GPU (needs one: an H100/H200 for sm90a "
                                   "schedules, a B200 for sm100a) next to torch SDPA's cuDNN, FlashAttention-2 and "
                                   "memory-efficient kernels in the same run: median of CUDA-event-timed runs, L2 "
                                   "flushed before each, every b200c result checked against FP32 attention first; "
                                   "a table on stdout, optionally CSV/JSON/Markdown/PNG and Perfetto traces.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("files", nargs="*", help="schedule files; 'default': the built-in schedule of the target for "
                                            "each shape's head dim (b200c.attention(schedule=None)); none with "
                                            "--decode (it times the built-in schedules); with --backward, "
                                            "backward schedule files")
    b.add_argument("--shapes", default=None, help="comma list of BxH[/Hkv]xS[:Skv][xD][c][wN] (c: causal, wN: "
                                                  "causal window of N keys), varlen:L1+L2+...xH[/Hkv][xD][c], "
                                                  "'blog' (8x16x4096, 4x16x8192, 2x16x16384; the default), 'hopper' "
                                                  "(the Hopper table), 'fa4' (the rows compared with "
                                                  "FlashAttention-4's Hopper kernel) or 'backward' (the backward "
                                                  "table's set; the default with --backward)")
    b.add_argument("--target", default="auto", help="auto (sm90a on Hopper, sm100a on a B200), sm90a, sm100a")
    b.add_argument("--iters", type=int, default=30, help="timed runs per kernel and shape (median; default 30)")
    b.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    b.add_argument("--no-baselines", action="store_true", help="time only the schedules")
    b.add_argument("--no-check", action="store_true", help="skip the correctness check before timing")
    b.add_argument("--csv", help="write one CSV line per kernel and shape")
    b.add_argument("--json", help="write every row (with each run's milliseconds) as JSON")
    b.add_argument("--md", help="write the Markdown table (between the '<!-- b200c bench -->' markers if the file "
                                "has them)")
    b.add_argument("--png", help="write a bar chart")
    b.add_argument("--profile", metavar="DIR", help="also build each schedule with trace stamps, run it once on the "
                                                    "first shape and write DIR/<name>.trace.json (+ .png)")
    b.add_argument("--profile-ctas", type=int, default=2, help="CTAs recorded in a profile (default 2)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--decode", metavar="CASES", help="the decode table instead (no files needed): one attention "
                                                     "step per case, BxH/Hkv:S_kv[xD][qN][pP] or 'default', as GB/s "
                                                     "next to cuDNN, FlashAttention-2 and the copy bandwidth "
                                                     "(b200c/bench/decode.py)")
    b.add_argument("--backward", action="store_true", help="the backward table instead (no files needed): the "
                                                            "backward pass alone of b200c's sm90a kernels next to "
                                                            "cuDNN, FlashAttention-2 and FA4 on --shapes (default "
                                                            "'backward'; b200c/bench/backward.py); backward schedule "
                                                            "files given are each a column beside the built-in one")
    b.add_argument("--kernels", action="store_true", help="with --backward: also each call's GPU kernels and their "
                                                           "times (torch.profiler), listed under the table")
    b.set_defaults(func=func)


def validate_args(args) -> tuple:
    """Schedules and shapes of the arguments (everything checkable without a GPU).

    Raises:
        TargetError: an unknown ``--target``.
        ScheduleError: a bad shape or schedule file; the iteration counts out of range.
    """
    from ..codegen.targets import resolve_or_auto
    from ..dsl import load_schedule_file
    from ..errors import ScheduleError
    from .shapes import parse_shapes

    resolve_or_auto(args.target)  # an unknown name: TargetError before any work
    if args.iters < 1 or args.warmup < 0:
        raise ScheduleError(f"--iters must be >= 1 and --warmup >= 0 (got {args.iters}, {args.warmup})")
    shapes = parse_shapes(args.shapes or "blog")
    schedules = [(f, None if f == "default" else load_schedule_file(f)) for f in args.files]
    for path in (args.csv, args.json, args.md, args.png):
        if path and not Path(path).resolve().parent.is_dir():
            raise ScheduleError(f"output {path!r}: folder {str(Path(path).resolve().parent)!r} does not exist")
    return schedules, shapes


def run_bench(args, *, timer=None, device=None) -> int:
    """Run the benchmark for parsed ``args``; returns the exit status
    (0, or 1 if a b200c kernel failed or gave a wrong result).

    ``timer``/``device`` replace the CUDA timing and device probe (CPU tests).

    Raises:
        UnsupportedDeviceError: no CUDA GPU (the CLI prints it as one line).
        ScheduleError, BuildError, ...: see :func:`validate_args` and b200c.attention.
    """
    import datetime

    from ..errors import ScheduleError, TargetError
    from . import report
    from .device import current_device
    from .run import measure
    from .timing import time_ms

    if getattr(args, "kernels", False) and not getattr(args, "backward", False):
        raise ScheduleError("--kernels lists the GPU kernels of the backward table: use it with --backward")
    _refuse_unused(args)
    if getattr(args, "decode", None):
        from . import decode

        cases = decode.parse_cases(args.decode)  # a bad case is refused before anything needs a GPU
        if args.files and args.files != ["default"]:
            raise ScheduleError(f"--decode times the built-in schedules: give no schedule files (got "
                                f"{' '.join(args.files)})")
        if device is None:
            current_device()  # no CUDA GPU: UnsupportedDeviceError (one line from the CLI), not a traceback
        rows = decode.measure(cases, iters=args.iters, warmup=args.warmup, target=args.target)
        table = decode.markdown(rows)
        print(table)
        if args.md:
            report.write_md_text(table + "\n", args.md)
        if args.json:
            import json

            Path(args.json).write_text(json.dumps(rows, indent=1))
        return 0
    if getattr(args, "backward", False):
        return _bench_backward(args, device, timer or time_ms)
    if not args.files:
        raise ScheduleError("b200c bench needs schedule files or 'default' (the built-in schedules), --decode or "
                            "--backward")
    schedules, shapes = validate_args(args)
    dev = device if device is not None else current_device()
    rows = measure(schedules, shapes, dev, target=args.target, timer=timer or time_ms, warmup=args.warmup,
                   iters=args.iters, check=not args.no_check, progress=not args.quiet,
                   with_baselines=not args.no_baselines)
    meta = {"device": dev.name, "capability": f"{dev.capability[0]}.{dev.capability[1]}", "sms": dev.sms,
            "target": args.target, "iters": args.iters, "warmup": args.warmup,
            "date": datetime.date.today().isoformat(), "shapes": [s.label for s in shapes]}
    table = report.markdown(rows, meta)
    print(table)
    if args.csv:
        report.write_csv(rows, args.csv)
    if args.json:
        report.write_json(rows, meta, args.json)
    if args.md:
        report.write_md(rows, meta, args.md)
    if args.png:
        report.plot_png(rows, meta, args.png)
    if args.profile:
        from .trace import profile

        outdir = Path(args.profile)
        outdir.mkdir(parents=True, exist_ok=True)
        for _, sched in schedules:
            if sched is None:
                continue
            base = outdir / sched.name
            try:
                res = profile(sched, shapes[0], f"{base}.trace.json", ctas=args.profile_ctas, target=args.target,
                              png=f"{base}.timeline.png")
            except TargetError as e:  # sm100a: the tcgen05 templates have no stamps yet
                print(f"profile {sched.name}: not available: {e}", file=sys.stderr)
                continue
            print(f"profile {sched.name}: {res['events']} stamps on tracks {', '.join(res['tracks'])} -> "
                  f"{res['path']}", file=sys.stderr)
    bad = [r for r in rows if r.kind == "b200c" and (r.error or r.correct is False)]
    return 1 if bad else 0


def _refuse_unused(args) -> None:
    """The decode and backward tables take fewer options than the forward one: an option they would not use is
    refused (ScheduleError naming it and what the table takes) rather than silently dropped."""
    from ..errors import ScheduleError

    table = "--decode" if getattr(args, "decode", None) else "--backward" if getattr(args, "backward", False) else None
    if table is None:
        return
    if getattr(args, "decode", None) and getattr(args, "backward", False):
        raise ScheduleError("--decode and --backward are two tables: run them one at a time")
    opt = lambda name: getattr(args, name, None)  # noqa: E731
    unused = [flag for flag, name in (("--csv", "csv"), ("--png", "png"), ("--profile", "profile"),
                                      ("--no-baselines", "no_baselines")) if opt(name)]
    if table == "--decode":
        unused += [flag for flag, name in (("--shapes", "shapes"), ("--no-check", "no_check")) if opt(name)]
    elif opt("target") not in (None, "auto"):
        from ..codegen.targets import resolve

        if not resolve(opt("target")).backward:  # no backward design there (an unknown name: TargetError)
            unused.append(f"--target {opt('target')}")
    if unused:
        takes = ("--iters, --warmup, --target, --md and --json" if table == "--decode" else
                 "--shapes, --iters, --warmup, --no-check, --kernels, --md and --json (target sm90a)")
        raise ScheduleError(f"b200c bench {table} does not use {', '.join(unused)}: it takes {takes}")


def _bench_backward(args, device, timer) -> int:
    """``b200c bench --backward``: the backward table (b200c/bench/backward.py) on --shapes (the 'backward' set
    when not given)."""
    import datetime

    from ..errors import ScheduleError
    from . import backward
    from .device import current_device
    from .shapes import parse_shapes

    schedules = []
    for f in args.files or ():
        if f == "default":
            continue  # the built-in schedules: always a column
        from ..runtime.schedule_files import backward_schedule_of_file

        try:
            schedules.append(backward_schedule_of_file(f))
        except ScheduleError as e:
            raise ScheduleError(f"--backward takes backward schedule files (a module-level `schedule` that is a "
                                f"b200c.BackwardSchedule, e.g. examples/backward/hopper_backward_d128.py): {f}: {e}") \
                from None
    names = [x.name for x in schedules]
    if len(set(names)) < len(names):
        raise ScheduleError(f"--backward: the schedules' names are the table's columns and must differ (got "
                            f"{', '.join(names)}): set name= in each file")
    shapes = parse_shapes(args.shapes or "backward")
    dev = device if device is not None else current_device()
    per_kernel = None
    if getattr(args, "kernels", False):
        from .kernel_times import kernel_times as per_kernel
    rows = backward.measure(shapes, dev, timer=timer, warmup=args.warmup, iters=args.iters,
                            check=not args.no_check, kernel_times=per_kernel, schedules=tuple(schedules))
    meta = {"device": dev.name, "iters": args.iters, "date": datetime.date.today().isoformat()}
    table = backward.markdown(rows, meta)
    print(table)
    if args.md:
        from .report import write_md_text

        write_md_text(table, args.md)
    if args.json:
        import json
        from dataclasses import asdict

        Path(args.json).write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    bad = [r for r in rows if backward.ours_column(r.kernel) and r.error and not r.unsupported]
    wrong = [r for r in rows if r.rel_diff is not None and r.rel_diff > backward.MAX_REL_DIFF]
    return 1 if bad or wrong else 0

