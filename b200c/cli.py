"""The ``b200c`` command line.

    b200c compile FILE [-o OUT] [--emit plan|ir|cu|ptx|cubin] [--target sm100a|sm90a]
    b200c check FILE... [--target sm100a|sm90a]   validate + nvcc/ptxas + SASS counts, one row per schedule
    b200c build FILE... [--target sm_100a|emulate|sm_90a] [-j N]   build into the on-disk cache
    b200c bench FILE... [--shapes ...] [--csv/--json/--png/--md OUT] [--profile]   TFLOPS next to torch SDPA

User errors print one line (``b200c: error: ...``) and exit with status 2;
no Python traceback.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import B200cError


def _compile(args) -> int:
    from . import load_schedule_file
    from .codegen import generate
    from .codegen.targets import backend_name

    schedule = load_schedule_file(args.file)
    if args.emit == "plan":
        from .codegen import make_plan

        return _write(str(make_plan(schedule, args.target)), args.output)
    if args.emit == "ir":
        from .codegen import lower

        return _write(lower(schedule, target=args.target).text(), args.output)
    kernel = generate(schedule, args.target)
    if args.emit == "cu":
        return _write(kernel.source, args.output)
    import tempfile

    from .nvcc import compile_cuda

    arch = "sm_90a" if backend_name(args.target) == "sm90" else "sm_100a"
    out = Path(args.output) if args.output else Path(Path(args.file).stem + "." + args.emit)
    src = Path(tempfile.mkdtemp(prefix="b200c_")) / "kernel.cu"  # kept: a failing build names it
    res = compile_cuda(kernel.source, out, fmt=args.emit, target=arch, keep_source=src)
    if args.emit == "cubin":
        r = res.resources()
        print(f"wrote {out} ({arch}: {r['registers']} registers, {r['spill_bytes']} spill bytes)", file=sys.stderr)
    else:
        print(f"wrote {out} ({arch} PTX)", file=sys.stderr)
    return 0


def _write(text: str, output) -> int:
    if output:
        Path(output).write_text(text)
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _check(args) -> int:
    from .check import check_files

    return check_files(args.files, sass=not args.no_sass, jobs=args.jobs, target=args.target)


def _build(args) -> int:
    from .runtime.build_cli import run_build

    return run_build(args.files, args.target, args.jobs)


def _bench(args) -> int:
    from .bench.cli import run_bench

    return run_bench(args)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="b200c", description="Compile declarative attention schedules to sm_100a "
                                                          "(B200) or sm_90a (Hopper) CUDA.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="emit the plan, IR, CUDA, PTX or cubin of one schedule file")
    c.add_argument("file", help="schedule file (Python defining a module-level `schedule`)")
    c.add_argument("-o", "--output", help="output file (default: stdout for plan/ir/cu)")
    c.add_argument("--emit", choices=("plan", "ir", "cu", "ptx", "cubin"), default="cu")
    c.add_argument("--target", default="sm100a", help="sm100a (B200, default) or sm90a (Hopper)")
    c.set_defaults(func=_compile)
    k = sub.add_parser("check", help="validate, emit and compile schedules for sm_100a; print a resource table")
    k.add_argument("files", nargs="+")
    k.add_argument("--no-sass", action="store_true", help="skip the SASS instruction counts")
    k.add_argument("-j", "--jobs", type=int, default=2, help="parallel nvcc runs (default 2)")
    k.add_argument("--target", default="sm100a", help="sm100a (default) or sm90a")
    k.set_defaults(func=_check)
    b = sub.add_parser("build", help="build schedules into the on-disk kernel cache (parallel, via ninja)")
    b.add_argument("files", nargs="+")
    b.add_argument("--target", default="sm_100a", help="sm_100a (native B200), emulate (the sm_100a kernel "
                                                        "emulated on Hopper) or sm_90a (native Hopper)")
    b.add_argument("-j", "--jobs", type=int, default=None)
    b.set_defaults(func=_build)
    from .bench.cli import add_parser as _add_bench

    _add_bench(sub, _bench)
    return p


def main(argv=None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except B200cError as e:
        print(f"b200c: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. an output path in a folder that does not exist
        print(f"b200c: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
