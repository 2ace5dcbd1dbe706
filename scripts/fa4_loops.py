#!/usr/bin/env python3
"""FlashAttention-4's steady-state loops next to a b200c schedule's, from SASS.

    pip install -e ".[dev,fa4]"
    python scripts/fa4_loops.py [SCHEDULE.py]     # default: examples/variants/fa4_knobs.py (FA4's knobs)

Rebuilds FA4's own sm_100a forward kernel (flash-attn-4 4.0.0b36, CuTe DSL
4.8.1) on a machine without a GPU: ``flash_attn.cute.interface._flash_attn_fwd``
runs on FakeTensorMode tensors of shape (B=4, S=8192, H=16, D=128) bf16 on
device "cuda", causal=False, with ``FA_DISABLE_2CTA=1`` (the 1-CTA kernel),
``FLASH_ATTENTION_ARCH``/``CUTE_DSL_ARCH=sm_100a``, ``CUTE_DSL_KEEP=ptx,cubin``
into ``CUTE_DSL_DUMP_DIR`` (which must exist beforehand), and the CuTe DSL's
hardware queries answered for a B200 (148 SMs, 148 / cluster size active
clusters, 126 MiB L2) instead of asking a driver. The kept PTX is assembled
again by our nvcc/ptxas (``-arch=sm_100a -cubin``, its ``.version`` lowered
to 8.8 for ptxas 13.0), so both kernels go through the same ptxas.

Both cubins are counted by b200c's own code: loops from
:func:`b200c.sass.loops.find_loops`, counts from :func:`b200c.sass.loops.mix`.
The b200c kernel's loops are attributed to warp roles through line info and
its section markers (:mod:`b200c.sass.roles`). FA4's kernel has no markers:
its loops are attributed by instruction mix (:func:`b200c.sass.loops.loops_by_mix`):
a loop with UTC*MMA is the MMA warp's, with UTMALDG the load warp's, with
MUFU.EX2 softmax's, with LDTM and STTM (and none of those) the correction
warps'; a role's steady-state loop is its innermost loop of that mix, since
FA4's persistent per-tile loop encloses each K/V loop (those enclosing loops
are listed under the table). Counts are static instructions per K/V tile as
each loop body stands. Without flash-attn-4 the script prints one line and
exits 0.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from b200c.errors import B200cError, BuildError  # noqa: E402

SHAPE = (4, 8192, 16, 128)  # B, S, H, D (FA4's bshd layout)
B200_SMS = 148
B200_L2_BYTES = 126 * 1024 * 1024
PTX_VERSION = "8.8"  # the PTX ISA that ptxas 13.0 assembles for sm_100a
ROLE_ORDER = ("softmax", "correction", "load", "mma")


def fa4_version():
    """flash-attn-4's installed version, or None."""
    try:
        return importlib.metadata.version("flash-attn-4")
    except importlib.metadata.PackageNotFoundError:
        return None


def _answer_hardware_queries():
    """Make the CuTe DSL's HardwareInfo describe a B200 without a driver."""
    import cutlass.utils.hardware_info as hw

    cls = hw.HardwareInfo
    cls.__init__ = lambda self, device_id=0: setattr(self, "device_id", device_id)
    cls.get_device_multiprocessor_count = lambda self: B200_SMS
    cls.get_max_active_clusters = lambda self, cluster_size, stream=None: B200_SMS // cluster_size
    cls.get_l2_cache_size_in_bytes = lambda self: B200_L2_BYTES


def build_fa4_ptx(dump: Path) -> Path:
    """Run FA4's forward on fake tensors so the CuTe DSL compiles the kernel;
    returns the PTX it kept in ``dump``.

    Raises:
        BuildError: the build failed or kept no forward-kernel PTX.
    """
    dump.mkdir(parents=True, exist_ok=True)
    os.environ.update(FLASH_ATTENTION_ARCH="sm_100a", CUTE_DSL_ARCH="sm_100a", CUTE_DSL_KEEP="ptx,cubin",
                      CUTE_DSL_DUMP_DIR=str(dump), FA_DISABLE_2CTA="1", FLASH_ATTENTION_NUM_SMS=str(B200_SMS))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
            from torch._subclasses.fake_tensor import FakeTensorMode

            _answer_hardware_queries()
            from flash_attn.cute.interface import _flash_attn_fwd

            with FakeTensorMode():
                q, k, v = (torch.empty(*SHAPE, dtype=torch.bfloat16, device="cuda") for _ in range(3))
                _flash_attn_fwd(q, k, v, causal=False)
    except Exception as e:  # FA4 / CuTe DSL internals: report one line
        first = (str(e).strip().splitlines() or [""])[0]
        raise BuildError(f"FlashAttention-4 build failed: {type(e).__name__}: {first[:300]}") from None
    ptx = sorted(dump.glob("*FlashAttentionForwardSm100*.ptx"))
    if not ptx:
        raise BuildError(f"FlashAttention-4 kept no forward-kernel PTX in {dump}")
    return ptx[-1]


def assemble(ptx: Path, out: Path) -> Path:
    """Assemble FA4's PTX with our nvcc/ptxas for sm_100a (``.version`` lowered
    to :data:`PTX_VERSION`); returns the cubin path.

    Raises:
        BuildError: nvcc missing or ptxas failing.
    """
    from b200c.toolchain import find_nvcc

    text, n = re.subn(r"^\.version \d+\.\d+$", f".version {PTX_VERSION}", ptx.read_text(), count=1, flags=re.M)
    if n != 1:
        raise BuildError(f"no .version line in {ptx}")
    src = out.with_suffix(".ptx")
    src.write_text(text)
    cmd = [find_nvcc(), "-arch=sm_100a", "-cubin", "-O3", str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise BuildError(f"ptxas failed on {src}: {(proc.stderr or proc.stdout).strip()[:300]}")
    return out


def fa4_rows(cubin: Path):
    """([(role, counts)], [note]) of FA4's steady-state loops, by instruction mix."""
    from b200c.sass.loops import disassemble_lines, loops_by_mix, mix, parse_listing

    rows, notes = [], []
    by_role = loops_by_mix(parse_listing(disassemble_lines(cubin)))
    for role, found in sorted(by_role.items(), key=lambda kv: _role_rank(kv[0])):
        for n, loop in enumerate(found.steady):
            rows.append((role if n == 0 else f"{role}#{n + 1}", mix(loop.body)))
        for loop in found.enclosing:
            m = mix(loop.body)
            key = {k: v for k, v in m.items() if v and k not in ("static", "predicated")}
            notes.append(f"FA4 {role}: enclosing (per-tile) loop {m['static']} instructions {key}")
    return rows, notes


def b200c_rows(schedule: Path, work: Path):
    """(schedule name, [(role, counts)]) of a b200c schedule's steady-state loops."""
    import b200c
    from b200c.sass.roles import compile_with_lines, cubin_role_loops

    s = b200c.load_schedule_file(schedule)
    source = b200c.generate(s).source
    cubin = work / "b200c.cubin"
    compile_with_lines(source, cubin)
    loops = cubin_role_loops(source, cubin)
    return s.name, [(role, {k: v for k, v in c.items() if k != "line"}) for role, c in loops.items()]


def _role_rank(role: str) -> int:
    return ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)


def side_by_side(fa4: list, name: str, ours: list) -> list:
    """Table entries (kernel, role, counts), grouped by role, FA4 first."""
    entries = []
    for role in ROLE_ORDER:
        entries += [("FA4", r, c) for r, c in fa4 if r.split("#")[0] == role]
        entries += [(name, r, c) for r, c in ours if r.split("[")[0] == role]
    entries += [(k, r, c) for k, rows in (("FA4", fa4), (name, ours)) for r, c in rows
                if r.split("#")[0].split("[")[0] not in ROLE_ORDER]
    return entries


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("schedule", nargs="?", default=str(ROOT / "examples/variants/fa4_knobs.py"),
                    help="b200c schedule file (default: examples/variants/fa4_knobs.py, FA4's own knobs)")
    ap.add_argument("--keep", help="keep FA4's PTX and both cubins in this folder")
    args = ap.parse_args(argv)
    version = fa4_version()
    if version is None:
        print("fa4_loops: skipped: flash-attn-4 is not installed (pip install -e '.[fa4]')")
        return 0
    from b200c.check import format_loop_table

    with tempfile.TemporaryDirectory(prefix="b200c_fa4_") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            name, ours = b200c_rows(Path(args.schedule), work)
            ptx = build_fa4_ptx(work / "cute_dsl_dump")
            fa4, notes = fa4_rows(assemble(ptx, work / "fa4.cubin"))
        except B200cError as e:
            print(f"fa4_loops: error: {e}", file=sys.stderr)
            return 2
    print(f"steady-state K/V loops, static SASS instructions per K/V tile as each loop body stands "
          f"(ptxas of nvcc on PATH, sm_100a): FA4 = flash-attn-4 {version} forward, 1-CTA, "
          f"B,S,H,D={','.join(map(str, SHAPE))} bf16, non-causal; {name} = {args.schedule}")
    print(format_loop_table(side_by_side(fa4, name, ours)))
    for note in notes:
        print(note)
    if args.keep:
        print(f"kept {ptx.name}, fa4.cubin and b200c.cubin in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
