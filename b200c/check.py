"""``b200c check FILE... [--target sm100a|sm90a]``: validate, emit and compile
each schedule for the target, then print one row per schedule (stage, warps
per role, threads, dynamic SMEM, TMEM columns, registers and spills from
ptxas, SASS counts). For sm100a a second table gives each warp role's
steady-state (K/V) loop from the SASS (:mod:`b200c.sass.roles`); for sm90a
the row has the consumer's hot-loop size and the wgmma register-hazard count
(:mod:`b200c.sass.hopper`). ``--json`` prints the rows as JSON instead. Exit
status 1 if any schedule fails to validate or compile, spills, has its wgmmas
serialized by ptxas (C751x: too few registers), or (sm90a) has a hazard. On an emulation target (``emulate``) a build that spills is also
compiled for the target it emulates (sm100a): the emulator's software model
takes registers the schedule does not, so the row passes, saying so, when that
build is clean. The temporary folder goes when every row passes; otherwise only
the failing schedules' generated sources stay, named in the last line."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import B200cError

SASS_COLS = ("MUFU.EX2", "FMUL", "FSETP.GEU", "predicated", "LDL/STL", "UTC*MMA")
SASS_COLS_SM90 = ("MUFU.EX2", "FFMA", "FMUL", "LDL/STL", "HGMMA", "loop", "steady", "hazards")


def _hot_loop(target) -> bool:
    """Whether ``target``'s SASS analysis is the consumer's hot loop (sm90a) rather than the per-role loops."""
    from .codegen.targets import resolve

    return resolve(target).sass == "hot_loop"


def check_one(path: str, workdir: Path, sass: bool = True, target="auto") -> dict:
    """Check one schedule file for ``target`` (``"auto"``: its own); returns a row dict (``error`` set on
    failure; ``target``: the target it was checked for).

    With ``sass`` on sm100a the kernel is compiled with ``-lineinfo`` (which leaves the
    SASS as it is; tests/test_sass_loops.py checks that on every example) and
    the row also holds ``loops``: {role label: counts of its steady-state
    loop} (see :func:`b200c.sass.roles.role_loops`), or ``loops_error`` when
    the loops cannot be attributed (the schedule itself is not failed for it).
    On sm90a the row holds the hot loop's size and its wgmma register hazards.
    """
    from .codegen import generate, make_plan
    from .dsl.backward_schedule import BackwardSchedule
    from .dsl.loader import load_compile_input
    from .nvcc import compile_cuda
    from .sass.roles import LINEINFO

    from .codegen.targets import AUTO, resolve_or_auto, schedule_target

    row = {"file": path}
    try:
        target = resolve_or_auto(target)
        s, _ = load_compile_input(path)
        if isinstance(s, BackwardSchedule):
            return _check_backward(row, s, target, workdir, sass)
        row.update(stage=s.blog_stage, name=s.name, phase_tracking=s.phase_tracking)
        if target == AUTO:
            target = schedule_target(s)
        row["target"] = target.name
        plan = make_plan(s, target)
        roles = {}
        for r in plan.roles:
            roles[r.name] = roles.get(r.name, 0) + len(r.warps)
        row["warps"] = " ".join(f"{k}:{v}" for k, v in roles.items())
        row.update(threads=plan.threads, smem=plan.smem_bytes, tmem=plan.tmem_alloc_cols)
        kernel = generate(s, target)
        out = workdir / f"{Path(path).stem}.cubin"
        sm90 = target.sass == "hot_loop"
        roles = target.sass == "role_loops"
        row["sources"] = [str(out.with_suffix(".cu"))]  # compile_cuda writes it there (kept if the row fails)
        res = compile_cuda(kernel.source, out, "cubin", target, extra=LINEINFO if sass and roles else ())
        row.update(res.resources())
        _serialized(row, res)
        if sass:
            from .codegen.signature import KERNEL_NAME
            from .sass import count, disassemble, function_sass

            text = function_sass(disassemble(out), KERNEL_NAME)  # the attention kernel (not the module's others)
            row.update(count(text))
            if sm90:
                _hopper_loop(row, text)
            elif roles:
                from .sass.roles import cubin_role_loops

                try:
                    row["loops"] = cubin_role_loops(kernel.source, out)
                except B200cError as e:
                    row["loops_error"] = str(e)
        if row.get("spill_bytes") and target.emulates:
            _native_spills(row, s, target, workdir / f"{Path(path).stem}.{target.emulates}.cubin")
        elif row.get("spill_bytes"):
            row["error"] = f"{row['spill_bytes']} spill bytes"
    except B200cError as e:
        row["error"] = str(e)
    return row


def _check_backward(row: dict, schedule, target, workdir: Path, sass: bool) -> dict:
    """The check row of a BackwardSchedule file: its sm90a backward module compiled (the main kernel's
    registers, spill bytes and stack), and with ``sass`` the main kernel's visit loop (its size and
    wgmma register hazards, as a Hopper forward's hot loop)."""
    from .codegen.backward_plan import plan_backward
    from .codegen.sm90.backward import MAIN_KERNEL, generate_backward
    from .codegen.targets import AUTO, REGISTRY
    from .nvcc import compile_cuda

    if target == AUTO:
        target = next(t for t in REGISTRY if t.backward)
    row.update(stage=None, name=schedule.name, phase_tracking="", target=target.name)
    plan = plan_backward(schedule, target)
    row.update(warps=f"load:1 spare:3 consumer:{4 * schedule.mma_warpgroups}", threads=plan.threads,
               smem=plan.smem_bytes, tmem=0)
    gen = generate_backward(schedule, target.name)
    out = workdir / f"{Path(row['file']).stem}.cubin"
    row["sources"] = [str(out.with_suffix(".cu"))]
    res = compile_cuda(gen.source, out, "cubin", target)
    row.update(res.resources(MAIN_KERNEL))
    _serialized(row, res)
    if sass:
        from .sass import count, disassemble

        text = disassemble(out)
        row.update(count(text))
        _hopper_loop(row, text)
    if row.get("spill_bytes"):
        row["error"] = f"{row['spill_bytes']} spill bytes"
    return row


def _serialized(row: dict, res) -> None:
    """Fail the row when ptxas serialized the wgmmas (:meth:`b200c.nvcc.CompileResult.serialized_wgmma`): as a
    spill, a build that compiles but runs slowly for want of registers."""
    lines = res.serialized_wgmma()
    if lines:
        row["error"] = f"ptxas serialized the wgmma instructions: {lines[0].split(': ', 1)[-1]}"


def _hopper_loop(row: dict, text: str) -> None:
    """Add an sm_90a kernel's hot loop (its size and wgmma register hazards; a hazard fails the row)."""
    from .sass.hopper import async_register_hazards, hot_loop

    loop = hot_loop(text)
    if loop:
        hz = async_register_hazards(loop["body"])
        row.update(loop=loop["instructions"], steady=loop["steady"], hazards=len(hz))
        if hz:
            row["error"] = f"{len(hz)} wgmma register hazard(s), first: {hz[0]}"


def _native_spills(row: dict, schedule, target, out: Path) -> None:
    """An emulation target's build spilled: its software model of the emulated hardware (tcgen05, TMEM)
    takes registers the schedule does not. Compile the schedule for the target it emulates too and judge
    the schedule by that build: ``row["verdict"]`` says so when it is clean (sets ``native_spill_bytes``),
    ``row["error"]`` when it spills as well."""
    from .codegen import generate
    from .codegen.targets import resolve
    from .nvcc import compile_cuda

    native = resolve(target.emulates)
    source = generate(schedule, native).source
    row["sources"].append(str(out.with_suffix(".cu")))
    res = compile_cuda(source, out, "cubin", native)
    n = res.resources().get("spill_bytes") or 0
    row["native_spill_bytes"] = n
    emulated = f"emulated build spills {row['spill_bytes']} B: the emulator's software model"
    if n:
        row["error"] = f"{n} spill bytes in the {native.name} build of this schedule ({emulated})"
    else:
        row["verdict"] = f"ok ({emulated}; the {native.name} build of this schedule: 0)"


def format_table(rows: list, sass: bool = True, target="sm100a") -> str:
    """The check table (one row per schedule) of ``target``'s rows."""
    sm90 = _hot_loop(target)
    cols = [("stage", "stage"), ("name", "schedule"), ("warps", "warps per role"), ("threads", "threads"),
            ("smem", "dyn SMEM B")] + ([] if sm90 else [("tmem", "TMEM cols")]) + [
            ("registers", "regs"), ("spill_bytes", "spill B"), ("stack_frame", "stack B")]
    if sass:
        cols += [(c, c) for c in (SASS_COLS_SM90 if sm90 else SASS_COLS)]
    table = [[h for _, h in cols]]
    failed = set()
    for r in rows:
        stage = str(r["stage"]) if r.get("stage") else "-"  # 0: not a blog stage
        if "error" in r and "registers" not in r:  # failed before compiling: named by its file
            failed.add(len(table))
            table.append([stage, r["file"], "FAILED: " + r["error"]])
            continue
        line = [stage] + [str(r.get(k, "")) for k, _ in cols[1:]]
        if "error" in r:
            line.append("FAILED: " + r["error"])
        elif "verdict" in r:
            line.append(r["verdict"])
        table.append(line)
    # the stage and name columns are as wide as every row's (a failed row's file too); the other columns
    # as the rows that have them
    widths = [max(len(t[i]) for j, t in enumerate(table) if i < len(t) and (i < 2 or j not in failed))
              for i in range(len(cols))]
    out = []
    for j, t in enumerate(table):
        if j in failed:
            out.append(f"{t[0]:>{widths[0]}}  {t[1]:<{widths[1]}}  {t[2]}")
        else:
            out.append("  ".join(c.rjust(widths[i]) if i not in (1, 2) else c.ljust(widths[i])
                                 for i, c in enumerate(t[:len(cols)])) + ("  " + t[-1] if len(t) > len(cols) else ""))
    return "\n".join(out)


def format_loop_table(entries: list) -> str:
    """Text table of steady-state loops: ``entries`` are (kernel, role,
    counts) triples, counts as from :func:`b200c.sass.loops.mix`; one line each."""
    from .sass.loops import LOOP_COLS

    cols = ("static", *LOOP_COLS)
    table = [["schedule", "role", *cols]]
    table += [[str(k), str(r), *(str(c.get(n, "")) for n in cols)] for k, r, c in entries]
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(t))
                     for t in table)


LOOP_TABLE_TITLE = ("steady-state K/V loop of each warp role: static SASS instructions of the loop body, per K/V "
                    "tile as the loop stands (the mma loop issues every Q stage's MMAs; softmax[q] is Q stage q)")


def stack_notes(rows: list, sass: bool = True) -> list:
    """Footer lines saying what the ``stack B`` column holds, for the rows that have a stack frame:
    spilled registers (rows with spill bytes; of an emulated row with a ``verdict``: the emulator's),
    runtime-indexed phase-bit arrays (phase_tracking='array'), or other local arrays."""
    ldl = " / LDL/STL" if sass else ""
    stacked = [r for r in rows if r.get("stack_frame")]
    notes = []
    if any(r.get("spill_bytes") and "verdict" in r for r in stacked):
        notes.append(f"stack B{ldl} of an emulated row marked ok: registers ptxas spilled for the emulator's software "
                     f"model of the emulated hardware, not the schedule's (its native build has no spills)")
    if any(r.get("spill_bytes") and "verdict" not in r for r in stacked):
        notes.append(f"stack B{ldl} of a row with spill B: registers ptxas spilled to local memory; the schedule "
                     f"needs more registers than its roles have (register budgets or threads per CTA)")
    if any(not r.get("spill_bytes") and r.get("phase_tracking") == "array" for r in stacked):
        notes.append(f"stack B{ldl} of a row with phase_tracking='array' and no spills: local memory of "
                     f"runtime-indexed phase-bit arrays (not spills); phase_tracking='bitmask' removes it (minor 17)")
    if any(not r.get("spill_bytes") and r.get("phase_tracking") != "array" for r in stacked):
        notes.append(f"stack B{ldl} of a row with phase_tracking='bitmask' and no spills: local arrays ptxas did not "
                     f"keep in registers (not spills)")
    return notes


def check_files(files: list, sass: bool = True, jobs: int = 2, as_json: bool = False,
                target="auto") -> int:
    """Check schedule files for ``target`` (``"auto"``: each schedule's own,
    :func:`b200c.codegen.targets.schedule_target`), print the tables, one per
    target (or with ``as_json`` a JSON list of the row dicts on stdout, notes on
    stderr), return the exit status (0 ok, 1 if any schedule failed validation
    or compilation, spilled, or has a wgmma register hazard; on an emulation
    target a build that spills fails only when the schedule's build for the
    target it emulates spills too, :func:`_native_spills`).
    The temporary folder of the generated sources is deleted, except the
    failing schedules' sources, which the last stderr line names."""
    if sass:
        from .sass import find_cuobjdump

        try:
            find_cuobjdump()
        except B200cError as e:
            print(f"b200c: note: no SASS counts ({e})", file=sys.stderr)
            sass = False
    d = tempfile.mkdtemp(prefix="b200c_check_")
    stems = [Path(f).stem for f in files]
    dirs = []  # a file's sources go to d/<stem>.cu; two files of one stem (a/s.py b/s.py) each get a subfolder
    for i, stem in enumerate(stems):  # (else -j N threads write one s.cu / s.cubin at once)
        dirs.append(Path(d) if stems.count(stem) == 1 else Path(d) / str(i))
        dirs[-1].mkdir(exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        rows = list(ex.map(lambda f, w: check_one(f, w, sass, target), files, dirs))
    for r in rows:
        if "error" not in r:
            r.pop("sources", None)  # deleted below: only a failing row's sources are kept
    notes = sys.stderr if as_json else sys.stdout
    from .codegen.targets import AUTO, native_targets, resolve, resolve_or_auto

    given = resolve_or_auto(target)
    targets = sorted({r["target"] for r in rows if "target" in r}) or [
        (native_targets()[0] if given == AUTO else given).name]
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        for i, t in enumerate(targets):  # rows that failed before their target was known: in the first table
            group = [r for r in rows if r.get("target") == t or ("target" not in r and i == 0)]
            if len(targets) > 1:
                print(f"{'' if i == 0 else chr(10)}target {t}:")
            print(format_table(group, sass, t))
        entries = [(r.get("name", r["file"]), role, c) for r in rows for role, c in r.get("loops", {}).items()]
        if entries:
            print(f"\n{LOOP_TABLE_TITLE}\n{format_loop_table(entries)}\n")
    for r in rows:
        if "loops_error" in r:
            print(f"note: {r.get('name', r['file'])}: no steady-state loops ({r['loops_error']})", file=sys.stderr)
    for line in stack_notes(rows, sass):
        print(line, file=notes)
    bad = [r for r in rows if "error" in r]
    if bad:
        where = _keep_failing_sources(d, rows)
        print(f"b200c: {len(bad)} of {len(rows)} schedule{'s' if len(rows) != 1 else ''} failed the check{where}",
              file=sys.stderr)
        return 1
    shutil.rmtree(d, ignore_errors=True)
    arch = ", ".join(resolve(t).arch for t in targets)
    emulated = [r for r in rows if "verdict" in r]
    many = len(emulated) != 1
    spills = "0 spill bytes" if not emulated else (
        f"{len(emulated)} emulated build{'s spill' if many else ' spills'}, the emulator's software model; "
        f"{'their' if many else 'its'} {resolve(emulated[0]['target']).emulates} build{'s' if many else ''}: "
        f"0 spill bytes")
    print(f"{len(rows)} schedule{'s' if len(rows) != 1 else ''} ok ({arch}, {spills})", file=notes)
    print(f"compiled with {_compiler()}", file=notes)
    return 0


def _compiler() -> str:
    """Which nvcc (and so ptxas) the check used, and whether it is the release b200c is tested with."""
    from .toolchain import TESTED_NVCC, find_nvcc, nvcc_release, tested

    nvcc = find_nvcc()
    release = nvcc_release(nvcc)
    return f"nvcc {release} at {nvcc}" + ("" if tested(release) else f", not the tested {TESTED_NVCC}")


def _keep_failing_sources(d: str, rows: list) -> str:
    """Delete the files of the rows that passed from the check's temporary folder ``d`` (the folder too when
    no failing row left a source); returns the message's tail naming each failing schedule's sources."""
    keep = set()
    named = []
    for r in rows:
        sources = [Path(s) for s in r.get("sources", ())]
        if "error" in r and sources:
            keep.update(p for s in sources for p in (s, s.with_suffix(".cubin")))
            named.append(f"{r['file']}: {', '.join(map(str, sources))}")
    if not keep:
        shutil.rmtree(d, ignore_errors=True)
        return ""
    for p in sorted(Path(d).rglob("*"), reverse=True):  # files first, then their emptied subfolders
        if p.is_file() and p not in keep:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    whose = "the failing schedules'" if len(named) != 1 else "the failing schedule's"
    return f"; {whose} generated sources: {'; '.join(named)}"
