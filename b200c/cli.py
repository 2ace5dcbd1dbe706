"""The ``b200c`` command line (also ``python -m b200c``).

    b200c compile FILE [-o OUT|-] [--emit plan|ir|cu|ptx|cubin] [--target auto|sm100a|sm90a]
                  [--score-mod FILE.py:FUNC] [--mask-mod FILE.py:FUNC]
    b200c check FILE... [--no-sass] [-j N] [--json] [--target auto|sm100a|sm90a]   validate + nvcc/ptxas +
                        SASS counts, one row per schedule, + each warp role's steady-state loop
    b200c build FILE... [--target auto|sm100a|emulate|sm90a] [-j N]   build into the on-disk kernel cache
    b200c bench FILE... [--shapes ...] [--csv/--json/--png/--md OUT] [--profile]   TFLOPS next to torch SDPA
    b200c draw FILE [-o OUT.svg|OUT.png] [--iterations N] [--target auto|sm100a|sm90a]   picture of the pipeline
    b200c --version

Exit status: 0 success; 1 ``check`` ran and at least one schedule failed it
(its table row says why); 2 error: bad arguments, a missing or invalid
schedule file, nvcc/ninja missing, a failed build. Errors print one line,
``b200c: error: ...``, and no Python traceback; 130 when interrupted.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from .errors import B200cError, ScheduleError

EXIT_STATUS = """exit status:
  0  success
  1  check: at least one schedule failed (its row says why)
  2  error (one line "b200c: error: ..."): bad arguments, missing or invalid
     schedule file, nvcc/ninja missing, failed build
"""
EXIT_STATUS_PLAIN = """exit status:
  0  success
  2  error (one line "b200c: error: ..."): bad arguments, missing or invalid
     schedule file, nvcc/ninja missing, failed build
"""


class UsageError(B200cError):
    """A command-line argument is wrong (printed as ``b200c: error: ...``, exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse with b200c's one-line error format (``b200c: error: ...``, exit 2)."""

    def error(self, message):
        sub = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        if "arguments are required" in message:
            # a mistyped option hides behind the missing argument it pushed out ('b200c compile --bogus')
            unknown = [a for a in _argv if a.startswith("-") and a != "-" and a.split("=", 1)[0] not in
                       self._option_string_actions]
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}"
        message += _did_you_mean(message, self._option_string_actions)
        hint = f"b200c {sub} --help" if sub else "b200c --help"
        self.exit(2, f"b200c: error: {message}; see '{hint}'\n")


def _did_you_mean(message: str, options) -> str:
    """``" (did you mean 'compile'?)"`` for argparse's message about a mistyped subcommand or choice
    (``b200c compil``, ``--emit cuu``) or option (``--ouput``: against ``options``, the parser's option
    strings); ``""`` when nothing is close."""
    import difflib
    import re

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if m:
        words, choices = [m.group(1)], re.findall(r"[\w.-]+", m.group(2))
    elif message.startswith("unrecognized arguments:"):
        words = [w.split("=", 1)[0] for w in message.split(":", 1)[1].split() if w.startswith("--")]
        choices = [o for o in options if o.startswith("--")]
    else:
        return ""
    found = [c for w in words for c in difflib.get_close_matches(w, choices, n=1, cutoff=0.75)]
    return f" (did you mean {' or '.join(repr(c) for c in found)}?)" if found else ""


_argv: list = []  # the arguments main() parses (for _Parser.error)


def _shape(text: str) -> tuple:
    """``B,H,H_kv,S_q,S_kv`` of ``--shape`` (argparse type)."""
    parts = text.split(",")
    try:
        vals = tuple(int(x) for x in parts)
    except ValueError:
        vals = ()
    if len(vals) != 5 or min(vals) < 1 or vals[1] % vals[2]:
        raise argparse.ArgumentTypeError(f"{text!r}: write B,H,H_kv,S_q,S_kv as five integers >= 1 with H a multiple "
                                         "of H_kv, e.g. 1,32,8,1,32768")
    return vals


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= 1")
    return n


def _split_choice(schedule, target: str, shape: tuple, causal: bool, sms) -> str:
    """One line: the split count the runtime gives a call of ``shape`` with this schedule's kernel."""
    import types

    from .codegen import generate
    from .runtime import launcher
    from .runtime.inputs import Problem
    from .runtime.split_kv import kv_tiles, splits_for

    b, h, h_kv, s_q, s_kv = shape
    from .codegen.targets import resolve

    sms = sms or resolve(target).num_sms  # the target's devices (H100 SXM / H200: 132; B200: 148)
    info = generate(schedule, target).launch
    folded = s_q == 1 and h > h_kv  # launcher.fold_gqa: a decoding step's query heads become rows of its K/V head
    heads, rows, causal_run = (h_kv, h // h_kv, False) if folded else (h, s_q, causal)
    lk = types.SimpleNamespace(built=types.SimpleNamespace(launch=info), num_sms=sms)
    pack = launcher.packing(lk, Problem(b, heads, h_kv, rows, s_kv, info.head_dim), causal_run)
    items = info.num_work_items(b, heads, rows, pack)
    n = splits_for(info, items, rows, s_kv, causal_run, sms) if info.kv_splits != 1 else 1
    fold = f"; its {h // h_kv} query heads per K/V head run as rows (a decoding step)" if folded else ""
    return (f"split-KV for B={b} H={h} H_kv={h_kv} S_q={s_q} S_kv={s_kv}{' causal' if causal else ''} on {sms} SMs: "
            f"{n} split{'s' if n != 1 else ''} per work item ({items} work items of up to {kv_tiles(info, s_kv)} K/V "
            f"tiles{fold})")


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of parallel jobs >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (parallel jobs), got {n}")
    return n


def _output_path(output: str) -> Path:
    """Check that ``-o`` names a file in an existing folder (before any work)."""
    if not output.strip():
        raise UsageError("-o was given an empty name; give a file name (or leave -o out for the default)")
    out = Path(output)
    if out.is_dir():
        raise UsageError(f"output {output!r} is a directory; give a file name, e.g. {str(out / 'kernel.cu')!r}")
    parent = out.parent
    if not parent.is_dir():
        raise UsageError(f"cannot write output {output!r}: folder {str(parent)!r} does not exist; create it first")
    return out


_WRITES = {"plan": "the plan (text)", "ir": "the IR (text)", "cu": "CUDA source", "ptx": "PTX",
           "cubin": "a cubin (binary)"}
_EXTENSIONS = {".cu": "cu", ".cuh": "cu", ".ptx": "ptx", ".cubin": "cubin"}


def _warn_extension(out: Path | None, emit: str) -> None:
    """One line on stderr when ``-o``'s extension names another format than ``--emit`` writes
    (``--emit ptx -o k.cu`` writes PTX into k.cu); the file is written as asked."""
    if out is None:
        return
    named = _EXTENSIONS.get(out.suffix.lower())
    if named is not None and named != emit:
        print(f"b200c: note: --emit {emit} writes {_WRITES[emit]} into {str(out)!r}, whose extension "
              f"{out.suffix!r} suggests {_WRITES[named]}; pass --emit {named} for that", file=sys.stderr)


def _not_an_input(out: Path | None, *inputs: str, loaded: tuple = ()) -> None:
    """Refuse an output that is one of the command's input files (``b200c compile s.py -o s.py`` would
    replace the schedule with CUDA) or a file the schedule was built from (``loaded``: the schedule files
    and helper modules it loaded, :func:`b200c.dsl.loader.load_with_dependencies`)."""
    if out is None or not out.exists():
        return
    for f, what in [(f, "the input schedule file") for f in inputs] + [(f, "a file the schedule loads") for f in loaded]:
        try:
            same = Path(f).exists() and out.resolve().samefile(Path(f).resolve())
        except OSError:
            same = False
        if same:
            raise UsageError(f"output {str(out)!r} is {what} {f!r}; writing it would replace it: give another -o")


def _writable(out: Path) -> None:
    """Check that ``out`` can be written before any work (a failed nvcc output write blamed nvcc and left its
    temporary folder behind)."""
    existed = out.exists()
    try:
        with open(out, "ab"):
            pass
    except OSError as e:
        raise UsageError(f"cannot write output {str(out)!r}: {e.strerror or e}; give a writable -o") from None
    if not existed:
        out.unlink(missing_ok=True)


def _check_schedule_paths(files: list[str], one: bool = False) -> None:
    """Each of ``files`` is an existing ``.py`` file (a schedule file), else a UsageError naming it."""
    for f in files:
        p = Path(f)
        if p.is_dir():
            what = f"one of its .py files (e.g. {f}/<name>.py)" if one else f"its .py files (e.g. {f}/*.py)"
            raise UsageError(f"schedule file {f!r} is a directory, not a file; pass {what}")
        if not p.is_file():
            raise UsageError(f"schedule file {f!r} does not exist (relative to {Path.cwd()})")
        if p.suffix != ".py":
            raise UsageError(f"{f!r} is not a schedule file: a schedule file is Python (.py) defining a module-level "
                             f"`schedule`, e.g. examples/07_compute_pipeline.py")


def _target_or_auto(text: str):
    """``--target``: :data:`~b200c.codegen.targets.AUTO` or the Target record of a name."""
    from .codegen.targets import resolve_or_auto

    try:
        return resolve_or_auto(text)
    except B200cError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _target_help(what: str) -> str:
    """Help text of ``--target``: auto, then every registered target (name: summary)."""
    from .codegen.targets import REGISTRY

    return (f"auto: {what} (default); " + "; ".join(f"{t.name}: {t.summary}" for t in REGISTRY)
            + " (also spelled " + ", ".join(s for t in REGISTRY for s in t.spellings) + ")")


def _compile(args) -> int:
    from .codegen import generate
    from .codegen.targets import AUTO, schedule_target
    from .dsl.loader import load_compile_input

    if args.shape is None and (args.causal or args.sms is not None):
        raise UsageError("--causal and --sms go with --shape B,H,H_kv,S_q,S_kv")
    if args.shape is not None and args.emit != "plan":
        raise UsageError("--shape prints the split-KV choice under the plan: use it with --emit plan")
    if args.file == "default" and not Path(args.file).exists():
        return _compile_default(args)
    if Path(args.file).is_file():
        _check_schedule_paths([args.file], one=True)  # a missing file or a folder: the loader's own message
    to_stdout = args.output in (None, "-") if args.emit in ("plan", "ir", "cu") else args.output == "-"
    out = None if to_stdout else _output_path(args.output) if args.output is not None else Path(
        Path(args.file).stem + "." + args.emit)
    _warn_extension(out, args.emit)
    schedule, deps = load_compile_input(args.file)  # deps: args.file and every file it loaded
    if args.head_dim is not None and args.head_dim != schedule.head_dim:
        raise UsageError(f"--head-dim {args.head_dim} goes with 'default'; {args.file} sets head_dim = "
                         f"{schedule.head_dim}: change it in the file (schedule = ....replace(head_dim="
                         f"{args.head_dim}))")
    _not_an_input(out, args.file, loaded=tuple(f for f, _ in deps))
    if out is not None:
        _writable(out)
    from .dsl.backward_schedule import BackwardSchedule

    if isinstance(schedule, BackwardSchedule):
        return _compile_backward(args, schedule, out)
    if args.target == AUTO:
        args.target = schedule_target(schedule)
    mods = _traced_mods(args)
    if mods is not None and args.emit in ("plan", "ir"):
        raise UsageError(f"--score-mod / --mask-mod change the kernel's source, not its {args.emit}; use --emit cu, "
                         f"ptx or cubin")
    if args.emit == "plan":
        from .codegen import make_plan

        text = str(make_plan(schedule, args.target))
        if args.shape is not None:
            text = (text.rstrip("\n") + "\n" + _split_choice(schedule, args.target, args.shape, args.causal, args.sms)
                    + "\n")
        return _write(text, out)
    if args.emit == "ir":
        from .codegen import lower

        return _write(lower(schedule, target=args.target).text(), out)
    kernel = generate(schedule, args.target, mods=mods)
    if args.emit == "cu":
        return _write(kernel.source, out)
    return _emit_binary(kernel.source, out, args.emit, args.target)


def _emit_binary(source: str, out, emit: str, target, function: str = "") -> int:
    """Compile ``source`` to ``emit`` (``ptx`` or ``cubin``) for ``target`` into ``out`` (None: stdout) and say
    what was written on stderr (a cubin: the registers and spill bytes of ``function``, default the
    forward's entry point)."""
    import tempfile

    from .nvcc import compile_cuda
    from .toolchain import find_nvcc

    find_nvcc()  # a missing nvcc is the error before any temporary folder exists (none is left behind)
    work = Path(tempfile.mkdtemp(prefix="b200c_"))
    dest = work / f"kernel.{emit}" if out is None else out
    res = compile_cuda(source, dest, fmt=emit, target=target, keep_source=work / "kernel.cu")
    # success: the temporary folder goes (on failure it stays: the error names its kernel.cu)
    if out is None:
        sys.stdout.flush()
        getattr(sys.stdout, "buffer", sys.stdout).write(dest.read_bytes())
        sys.stdout.flush()
    shutil.rmtree(work, ignore_errors=True)
    where = "stdout" if out is None else str(out)
    if emit == "cubin":
        r = res.resources(function) if function else res.resources()
        name = f"{function} " if function else ""
        print(f"wrote {where} ({target.arch}: {name}{r['registers']} registers, {r['spill_bytes']} spill bytes)",
              file=sys.stderr)
    else:
        print(f"wrote {where} ({target.arch} PTX)", file=sys.stderr)
    return 0


def _compile_backward(args, schedule, out) -> int:
    """``b200c compile`` of a BackwardSchedule file: its plan, the main kernel's IR (verified), the generated
    backward module (CUDA) or its PTX / cubin (the cubin line reports the main kernel's registers and spill
    bytes)."""
    from .codegen.backward_plan import plan_backward
    from .codegen.sm90.backward import MAIN_KERNEL, generate_backward
    from .codegen.targets import AUTO, REGISTRY

    if args.shape is not None:
        raise UsageError("--shape prints a forward kernel's split-KV choice; a backward schedule has none")
    if args.score_mod or args.mask_mod:
        raise UsageError("--score-mod / --mask-mod: the backward kernels take no score_mod or mask_mod yet")
    target = next(t for t in REGISTRY if t.backward) if args.target == AUTO else args.target
    if args.emit == "plan":
        from .codegen.sm90.backward import supported

        plan = plan_backward(schedule, target)
        supported(schedule)  # a plan that fits but has no generated kernel yet is refused here too
        return _write(plan.describe() + "\n", out)
    if args.emit == "ir":
        from .codegen.sm90.backward import backward_kernel_ir

        return _write(backward_kernel_ir(schedule, target.name).text(), out)
    source = generate_backward(schedule, target.name).source
    if args.emit == "cu":
        return _write(source, out)
    return _emit_binary(source, out, args.emit, target, MAIN_KERNEL)


def _mod_function(spec: str, option: str):
    """The function ``spec`` names: ``FILE.py:NAME`` (a Python file, relative to the working folder) or
    ``MODULE:NAME`` (an importable module)."""
    import importlib
    import importlib.util

    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise UsageError(f"{option} {spec!r}: write FILE.py:FUNCTION or MODULE:FUNCTION (e.g. my_mods.py:bias)")
    if where.endswith(".py"):
        if not Path(where).is_file():
            raise UsageError(f"{option} {spec!r}: file {where!r} does not exist (relative to {Path.cwd()})")
        loaded = importlib.util.spec_from_file_location(f"_b200c_mods_{Path(where).stem}", where)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise UsageError(f"{option} {spec!r}: cannot import module {where!r} ({e})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"{option} {spec!r}: {where!r} defines no function {name!r}")
    return fn


def _traced_mods(args):
    """The ModSet of ``--score-mod`` / ``--mask-mod`` (traced as :func:`b200c.attention` traces them,
    with the index math of calls whose B, H and S are below 2^21, as nearly every call's), or None.
    Only these options import torch."""
    if not (args.score_mod or args.mask_mod):
        return None
    import msgspec

    from .dsl.mods import trace_mods

    score = _mod_function(args.score_mod, "--score-mod") if args.score_mod else None
    mask = _mod_function(args.mask_mod, "--mask-mod") if args.mask_mod else None
    try:
        mods, _ = trace_mods(score_mod=score, mask_mod=mask)
    except ScheduleError as e:  # the function's mistake, not the schedule file's
        named = " / ".join(o for o, v in (("--score-mod", args.score_mod), ("--mask-mod", args.mask_mod)) if v)
        raise UsageError(f"{named}: {e}") from None
    return msgspec.structs.replace(mods, small_indices=True)


def _compile_default(args) -> int:
    """``b200c compile default``: the built-in schedule's plan, IR or CUDA (with the mods of --score-mod /
    --mask-mod: the schedule and kernel a call with them runs, b200c.kernel_source)."""
    from . import default_schedule
    from .codegen import generate
    from .codegen.targets import AUTO, default_target

    if args.emit in ("ptx", "cubin"):
        raise UsageError("'default' prints the plan, IR or CUDA (--emit plan|ir|cu); for ptx/cubin, compile a "
                         "schedule file")
    target = default_target() if args.target == AUTO else args.target
    mods = _traced_mods(args)
    if mods is not None and args.emit in ("plan", "ir"):
        raise UsageError(f"--score-mod / --mask-mod change the kernel's source, not its {args.emit}; use --emit cu")
    schedule = default_schedule(args.head_dim or 128, target, mods=mods if mods is not None else False)
    out = None if args.output in (None, "-") else _output_path(args.output)
    if out is not None:
        _writable(out)
    if args.emit == "plan":
        from .codegen import make_plan

        text = str(make_plan(schedule, target))
        if args.shape is not None:
            text = text.rstrip("\n") + "\n" + _split_choice(schedule, target, args.shape, args.causal, args.sms) + "\n"
        return _write(text, out)
    if args.emit == "ir":
        from .codegen import lower

        return _write(lower(schedule, target=target).text(), out)
    return _write(generate(schedule, target, mods=mods).source, out)


def _write(text: str, out: Path | None) -> int:
    if out is not None:
        out.write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _check(args) -> int:
    from .check import check_files
    from .toolchain import find_nvcc

    _check_schedule_paths(args.files)
    find_nvcc()  # a missing nvcc is an error for the whole command, not one failed row per schedule
    return check_files(args.files, sass=not args.no_sass, jobs=args.jobs or _cpu_count(), as_json=args.json,
                       target=args.target)


def _cpu_count() -> int:
    """``-j``'s default for check and build: the CPU count."""
    import os

    return os.cpu_count() or 1


def _build(args) -> int:
    from .runtime.build_cli import run_build

    _check_schedule_paths(args.files)
    return run_build(args.files, args.target, args.jobs)


def _iterations(text: str) -> int:
    from .draw.timeline import MAX_ITERATIONS

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of K/V tiles (visits of a backward schedule), got "
                                         f"{text!r}") from None
    if not 1 <= n <= MAX_ITERATIONS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_ITERATIONS} K/V tiles (visits of a backward "
                                         f"schedule), got {n}")
    return n


def _draw(args) -> int:
    from .draw import draw_schedule
    from .dsl.loader import load_compile_input
    from .draw.render import check_format

    _check_schedule_paths([args.file], one=True)
    out = _output_path(args.output) if args.output is not None else Path(Path(args.file).stem + ".svg")
    _not_an_input(out, args.file)
    check_format(out)  # before any work: a wrong extension is an error at once
    schedule, _ = load_compile_input(args.file)  # a forward Schedule or a BackwardSchedule
    t = draw_schedule(schedule, out, target=args.target, iterations=args.iterations)
    print(f"wrote {out} ({len(t.lanes)} warp-role lanes, {len(t.steps)} steps, {len(t.edges)} barrier arrows)",
          file=sys.stderr)
    return 0


def _bench(args) -> int:
    from .bench.cli import run_bench

    return run_bench(args)


def make_parser() -> argparse.ArgumentParser:
    """The ``b200c`` argument parser (subcommands compile, check, build, bench, draw)."""
    from .version import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    p = _Parser(prog="b200c", description="Compile declarative attention schedules to sm_100a (B200) or sm_90a "
                                          "(Hopper) CUDA.",
                epilog=EXIT_STATUS, formatter_class=fmt)
    p.add_argument("--version", action="version", version=f"b200c {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{compile,check,build,bench,draw}")
    c = sub.add_parser("compile", help="emit the plan, IR, CUDA, PTX or cubin of one schedule file",
                       description="Emit the plan, IR, CUDA, PTX or cubin of one schedule file.",
                       epilog=EXIT_STATUS_PLAIN, formatter_class=fmt)
    c.add_argument("file", help="schedule file (Python defining a module-level `schedule`), or 'default': the "
                                "built-in schedule b200c.attention(schedule=None) runs (with --score-mod / "
                                "--mask-mod: for those mods) at --head-dim on --target (auto: sm90a)")
    c.add_argument("--head-dim", type=int, choices=(64, 128, 256), default=None,
                   help="with 'default': the inputs' head dim (default 128); a schedule file sets its own")
    c.add_argument("-o", "--output", metavar="OUT",
                   help="output file, '-' for stdout (default: stdout for plan/ir/cu, FILE's stem + .ptx/.cubin "
                        "in the current folder for ptx/cubin)")
    c.add_argument("--emit", choices=("plan", "ir", "cu", "ptx", "cubin"), default="cu",
                   help="plan: SMEM/TMEM/barrier/warp-role plan; ir: what each warp role does; cu: CUDA source "
                        "(default); ptx, cubin: nvcc output for the target")
    c.add_argument("--target", type=_target_or_auto, default="auto",
                   help=_target_help("the schedule's own target (sm90a for examples/hopper and backward "
                                     "schedules, else sm100a)"))
    c.add_argument("--score-mod", metavar="FILE.py:FUNC",
                   help="compile a score_mod into the kernel: FILE.py:FUNCTION or MODULE:FUNCTION, "
                        "score_mod(score, b, h, q_idx, kv_idx) -> score (the kernel b200c.attention(..., "
                        "schedule=FILE, score_mod=FUNCTION) runs; needs torch)")
    c.add_argument("--mask-mod", metavar="FILE.py:FUNC",
                   help="compile a mask_mod into the kernel: FILE.py:FUNCTION or MODULE:FUNCTION, "
                        "mask_mod(b, h, q_idx, kv_idx) -> bool (needs torch)")
    c.add_argument("--shape", metavar="B,H,H_kv,S_q,S_kv", type=_shape,
                   help="with --emit plan: also print how many split-KV splits a call of this shape takes "
                        "(b200c.runtime.split_kv.splits_for, as the runtime decides it; needs torch)")
    c.add_argument("--causal", action="store_true", help="with --shape: a causal call")
    c.add_argument("--sms", type=_positive, default=None,
                   help="with --shape: the GPU's SM count (default 132 for sm90a and emulate: H100/H200; 148 for "
                        "sm100a: B200)")
    c.set_defaults(func=_compile)
    k = sub.add_parser("check", help="validate, emit and compile schedules for their target; print a resource "
                                        "table and each warp role's steady-state loop",
                       description="Validate, emit and compile each schedule for its target (nvcc/ptxas), then print "
                                   "one row per schedule (warps per role, threads, SMEM, TMEM, registers, spills, "
                                   "SASS counts) and each warp role's steady-state K/V loop (instruction count and "
                                   "mix). With --target emulate a build that spills is also compiled for sm100a: "
                                   "the emulator's software model spills, not the schedule, so the row passes when "
                                   "the sm100a build is clean. The generated sources of failing schedules are kept "
                                   "(the last line names them); the rest are deleted.",
                       epilog=EXIT_STATUS, formatter_class=fmt)
    k.add_argument("files", nargs="+", metavar="FILE", help="schedule files")
    k.add_argument("--no-sass", action="store_true", help="skip the SASS instruction counts")
    k.add_argument("-j", "--jobs", type=_jobs, default=None, help="parallel nvcc runs, >= 1 (default: CPU count)")
    k.add_argument("--json", action="store_true",
                   help="print the rows (with each role's steady-state loop counts) as JSON instead of tables")
    k.add_argument("--target", type=_target_or_auto, default="auto",
                   help=_target_help("each schedule's own target (sm90a for examples/hopper and backward "
                                     "schedules, else sm100a; one table "
                                     "per target)"))
    k.set_defaults(func=_check)
    b = sub.add_parser("build", help="build schedules into the on-disk kernel cache (parallel, via ninja)",
                       description="Build schedules into the on-disk kernel cache ($B200C_CACHE_DIR) in one "
                                   "parallel ninja run; prints 'built' or 'cached' per file.",
                       epilog=EXIT_STATUS_PLAIN, formatter_class=fmt)
    b.add_argument("files", nargs="+", metavar="FILE", help="schedule files")
    b.add_argument("--target", type=_target_or_auto, default="auto",
                   help=_target_help("each schedule's own target (sm90a for examples/hopper and backward "
                                     "schedules, else sm100a)"))
    b.add_argument("-j", "--jobs", type=_jobs, default=None, help="parallel nvcc runs, >= 1 (default: CPU count)")
    b.set_defaults(func=_build)
    from .bench.cli import add_parser as _add_bench

    _add_bench(sub, _bench)
    d = sub.add_parser("draw", help="draw a schedule's pipeline (warp-role lanes, barriers, SMEM/TMEM maps) "
                                    "to .svg or .png",
                       description="Draw one schedule's pipeline as SVG or PNG: one lane per warp role (softmax per "
                                   "Q stage), each role's steps in issue order over a few K/V tiles, the barriers "
                                   "between them as labelled arrows, and the SMEM and TMEM maps beside it; derived "
                                   "from the plan and the IR. Needs matplotlib (pip install \"b200c[draw]\").",
                       epilog=EXIT_STATUS_PLAIN, formatter_class=fmt)
    d.add_argument("file", help="schedule file (Python defining a module-level `schedule`)")
    d.add_argument("-o", "--output", metavar="OUT",
                   help="picture file, .svg or .png (the extension picks the format; default: FILE's stem + .svg "
                        "in the current folder)")
    d.add_argument("--iterations", type=_iterations, default=3, metavar="N",
                   help="K/V tiles to unroll, 1-6 (a backward schedule: visits, Q tiles, of one K/V tile; default 3: "
                        "prologue, two steady-state iterations, epilogue)")
    d.add_argument("--target", type=_target_or_auto, default="auto",
                   help=_target_help("the schedule's own target (sm90a for examples/hopper and backward "
                                     "schedules, else sm100a)"))
    d.set_defaults(func=_draw)
    for sp in sub.choices.values():
        sp.set_defaults(subparser=sp)  # main() names a stray argument against this subcommand's help
    return p


_parsers: list = []  # the parser main() uses, built on its first call (building it takes ~2 ms)


def main(argv=None) -> int:
    """Run the ``b200c`` command; returns the exit status (see the module docstring)."""
    if not _parsers:
        _parsers.append(make_parser())
    _argv[:] = list(sys.argv[1:] if argv is None else argv)
    if not _argv:  # bare `b200c`: the help, not an error
        _parsers[0].print_help()
        return 0
    args, extra = _parsers[0].parse_known_args(argv)
    if extra:  # named against the subcommand's help, not the top level's
        args.subparser.error(f"unrecognized arguments: {' '.join(extra)}")
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_printer(warnings.showwarning)
            return args.func(args)
    except B200cError as e:
        msg = _cli_spelling(str(e))
        file = getattr(args, "file", None)
        if file and isinstance(e, ScheduleError) and "schedule file" not in msg:
            msg = f"{file}: {msg}"  # a knob or budget error of the loaded schedule: say which file
        if isinstance(e, UsageError):
            msg += f"; see 'b200c {args.command} --help'"
        print(f"b200c: error: {_one_line(msg)}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. an output file that cannot be written
        where = f" {e.filename!r}" if e.filename else ""
        print(f"b200c: error: cannot write or read{where}: {e.strerror or e}; see 'b200c {args.command} --help'",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _warning_printer(default):
    """A ``warnings.showwarning`` for the command line: b200c's own warnings as one ``b200c: warning: ...``
    line on stderr (not Python's ``path:line: Category: ...`` and the source line); others by ``default``."""
    from .errors import FallbackWarning, PerformanceWarning, UntestedCompilerWarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (UntestedCompilerWarning, PerformanceWarning, FallbackWarning)):
            print(f"b200c: warning: {_one_line(str(message))}", file=sys.stderr if file is None else file)
        else:
            default(message, category, filename, lineno, file, line)

    return show


def _cli_spelling(text: str) -> str:
    """Messages written for the Python API name targets as ``target='sm90a'``; on the command line that is
    ``--target sm90a``."""
    import re

    return re.sub(r"\btarget=['\"]([\w.]+)['\"]", r"--target \1", text)


def _one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text else text


if __name__ == "__main__":
    sys.exit(main())
