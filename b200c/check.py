"""``b200c check FILE... [--target sm100a|sm90a]``: validate, emit and compile
each schedule for the target, then print one row per schedule (stage, warps
per role, threads, dynamic SMEM, TMEM columns, registers and spills from
ptxas, SASS counts; for sm90a also the consumer's hot-loop size and the wgmma
register-hazard count, :mod:`b200c.sass_loops`). Exit status 1 if any
schedule fails to validate or compile, spills, or (sm90a) has a hazard."""
from __future__ import annotations

import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import B200cError

SASS_COLS = ("MUFU.EX2", "FMUL", "FSETP.GEU", "predicated", "LDL/STL", "UTC*MMA")
SASS_COLS_SM90 = ("MUFU.EX2", "FFMA", "FMUL", "LDL/STL", "HGMMA", "loop", "steady", "hazards")


def check_one(path: str, workdir: Path, sass: bool = True, target: str = "sm100a") -> dict:
    """Check one schedule file for ``target``; returns a row dict (``error`` set on failure)."""
    from . import load_schedule_file
    from .codegen import generate, make_plan
    from .nvcc import compile_cuda

    row = {"file": path}
    try:
        s = load_schedule_file(path)
        row.update(stage=s.blog_stage, name=s.name)
        plan = make_plan(s, target)
        roles = {}
        for r in plan.roles:
            roles[r.name] = roles.get(r.name, 0) + len(r.warps)
        row["warps"] = " ".join(f"{k}:{v}" for k, v in roles.items())
        row.update(threads=plan.threads, smem=plan.smem_bytes, tmem=plan.tmem_alloc_cols)
        kernel = generate(s, target)
        out = workdir / f"{Path(path).stem}.cubin"
        res = compile_cuda(kernel.source, out, "cubin", "sm_90a" if plan.backend == "sm90" else "sm_100a")
        row.update(res.resources())
        if sass:
            from .sass import count, disassemble

            text = disassemble(out)
            row.update(count(text))
            if plan.backend == "sm90":
                from .sass_loops import async_register_hazards, hot_loop

                loop = hot_loop(text)
                if loop:
                    hz = async_register_hazards(loop["body"])
                    row.update(loop=loop["instructions"], steady=loop["steady"], hazards=len(hz))
                    if hz:
                        row["error"] = f"{len(hz)} wgmma register hazard(s), first: {hz[0]}"
        if row.get("spill_bytes"):
            row["error"] = f"{row['spill_bytes']} spill bytes"
    except B200cError as e:
        row["error"] = str(e)
    return row


def format_table(rows: list, sass: bool = True, target: str = "sm100a") -> str:
    """The check table (one row per schedule)."""
    sm90 = target in ("sm90a", "sm_90a")
    cols = [("stage", "stage"), ("name", "schedule"), ("warps", "warps per role"), ("threads", "threads"),
            ("smem", "dyn SMEM B")] + ([] if sm90 else [("tmem", "TMEM cols")]) + [
            ("registers", "regs"), ("spill_bytes", "spill B"), ("stack_frame", "stack B")]
    if sass:
        cols += [(c, c) for c in (SASS_COLS_SM90 if sm90 else SASS_COLS)]
    table = [[h for _, h in cols]]
    for r in rows:
        if "error" in r and "registers" not in r:
            table.append([str(r.get("stage", "?")), r.get("name", r["file"]), "FAILED: " + r["error"]])
            continue
        line = [str(r.get(k, "")) for k, _ in cols]
        if "error" in r:
            line.append("FAILED: " + r["error"])
        table.append(line)
    widths = [max(len(t[i]) for t in table if i < len(t) and len(t) > 3) for i in range(len(cols))]
    out = []
    for t in table:
        if len(t) == 3 and t[2].startswith("FAILED"):
            out.append(f"{t[0]:>{widths[0]}}  {t[1]:<{widths[1]}}  {t[2]}")
        else:
            out.append("  ".join(c.rjust(widths[i]) if i not in (1, 2) else c.ljust(widths[i])
                                 for i, c in enumerate(t[:len(cols)])) + ("  " + t[-1] if len(t) > len(cols) else ""))
    return "\n".join(out)


def check_files(files: list, sass: bool = True, jobs: int = 2, target: str = "sm100a") -> int:
    """Check schedule files for ``target``, print the table, return the exit
    status (0 ok, 1 if any schedule failed validation or compilation, spilled,
    or has a wgmma register hazard)."""
    if sass:
        from .sass import find_cuobjdump

        try:
            find_cuobjdump()
        except B200cError as e:
            print(f"note: no SASS counts ({e})", file=sys.stderr)
            sass = False
    d = tempfile.mkdtemp(prefix="b200c_check_")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        rows = list(ex.map(lambda f: check_one(f, Path(d), sass, target), files))
    print(format_table(rows, sass, target))
    if any(r.get("stack_frame") for r in rows):
        print("stack B / LDL/STL: local memory of runtime-indexed phase-bit arrays (not spills); "
              "phase_tracking='bitmask' removes it (minor 17)")
    bad = [r for r in rows if "error" in r]
    if bad:
        print(f"{len(bad)} of {len(rows)} schedules failed; generated sources kept in {d}", file=sys.stderr)
        return 1
    shutil.rmtree(d, ignore_errors=True)
    print(f"{len(rows)} schedules ok ({'sm_90a' if target in ('sm90a', 'sm_90a') else 'sm_100a'}, 0 spill bytes)")
    return 0
