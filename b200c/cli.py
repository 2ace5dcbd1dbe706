"""The ``b200c`` command line.

    b200c compile FILE [-o OUT] [--emit plan|ir|cu|ptx|cubin]
    b200c check FILE... [--json]   validate + nvcc/ptxas + SASS counts, one row per schedule,
                                   + each warp role's steady-state loop
    b200c build FILE... [--target sm_100a|emulate] [-j N]   build into the on-disk cache

User errors print one line (``b200c: error: ...``) and exit with status 2;
no Python traceback.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import B200cError


def _compile(args) -> int:
    from . import generate, load_schedule_file

    schedule = load_schedule_file(args.file)
    if args.emit == "plan":
        from .codegen import make_plan

        return _write(str(make_plan(schedule)), args.output)
    if args.emit == "ir":
        from .codegen import lower

        return _write(lower(schedule).text(), args.output)
    kernel = generate(schedule)
    if args.emit == "cu":
        return _write(kernel.source, args.output)
    import tempfile

    from .nvcc import compile_cuda

    out = Path(args.output) if args.output else Path(Path(args.file).stem + "." + args.emit)
    src = Path(tempfile.mkdtemp(prefix="b200c_")) / "kernel.cu"  # kept: a failing build names it
    res = compile_cuda(kernel.source, out, fmt=args.emit, target="sm_100a", keep_source=src)
    if args.emit == "cubin":
        r = res.resources()
        print(f"wrote {out} (sm_100a: {r['registers']} registers, {r['spill_bytes']} spill bytes)", file=sys.stderr)
    else:
        print(f"wrote {out} (sm_100a PTX)", file=sys.stderr)
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

    return check_files(args.files, sass=not args.no_sass, jobs=args.jobs, as_json=args.json)


def _build(args) -> int:
    from .runtime.build_cli import run_build

    return run_build(args.files, args.target, args.jobs)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="b200c", description="Compile declarative attention schedules to sm_100a CUDA.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="emit the plan, IR, CUDA, PTX or cubin of one schedule file")
    c.add_argument("file", help="schedule file (Python defining a module-level `schedule`)")
    c.add_argument("-o", "--output", help="output file (default: stdout for plan/ir/cu)")
    c.add_argument("--emit", choices=("plan", "ir", "cu", "ptx", "cubin"), default="cu")
    c.set_defaults(func=_compile)
    k = sub.add_parser("check", help="validate, emit and compile schedules for sm_100a; print a resource table "
                                        "and each warp role's steady-state loop")
    k.add_argument("files", nargs="+")
    k.add_argument("--no-sass", action="store_true", help="skip the SASS instruction counts")
    k.add_argument("-j", "--jobs", type=int, default=2, help="parallel nvcc runs (default 2)")
    k.add_argument("--json", action="store_true",
                   help="print the rows (with each role's steady-state loop counts) as JSON instead of tables")
    k.set_defaults(func=_check)
    b = sub.add_parser("build", help="build schedules into the on-disk kernel cache (parallel, via ninja)")
    b.add_argument("files", nargs="+")
    b.add_argument("--target", default="sm_100a", help="sm_100a (native) or emulate (sm_90a, Hopper)")
    b.add_argument("-j", "--jobs", type=int, default=None)
    b.set_defaults(func=_build)
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
