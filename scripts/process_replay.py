"""Process replay: what the generator emits for a fixed set of schedules, to diff before/after a refactor.

Generates every example, variant and Hopper schedule for each target that takes it, at each head
dim it holds, and each of them with every single knob changed to every other legal value (the
ones that generate); writes one line per kernel (sha256 of the CUDA source, of ``--emit ir`` and of
``--emit plan``, or the error a refused schedule raises) to a JSON manifest. Comparing two
manifests names the kernels whose text changed:

    python scripts/process_replay.py --out /tmp/before.json      # on the old commit
    python scripts/process_replay.py --out /tmp/after.json --compare /tmp/before.json

``--keep DIR`` also writes each source (``DIR/<key>.cu``) so a changed one can be diffed. Exit
status 1 when ``--compare`` finds a difference. (Like tinygrad's process replay; the golden
files cover only the 18 examples.)
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# alternative values tried for each knob (one knob changed at a time)
KNOB_VALUES = {
    "block_n": (64, 128, 176, 192),
    "p_storage": ("smem", "tmem", "registers"),
    "swizzle": ("none", "128B"),
    "q_stages": (1, 2),
    "kv_tokens": ("paired", "separate"),
    "kv_stages": (1, 2, 3, 4),
    "pingpong": (False, True),
    "rowsum": ("fp32", "bf16"),
    "exp2": ("expf", "ex2.approx.ftz"),
    "f32x2": (False, True),
    "sw_exp2_per16": (0, 2, 4),
    "s_cache_cols": (0, 32, 96),
    "rescale_threshold": (None, 0.0, 8.0),
    "correction_warps": (0, 4),
    "early_pv_cols": (0, 32, 96),
    "persistent": (False, True),
    "s_load_cols": (8, 16, 32),
    "deferred_s_wait": (False, True),
    "rowmax_chains": (1, 2, 4),
    "rowmax_max3": (False, True),
    "o_load_cols": (8, 16, 32),
    "split_rowsum": (False, True),
    "phase_tracking": ("array", "bitmask"),
    "tma_l2_promotion": ("none", "256B"),
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def schedules():
    """(key, Schedule, targets) for every schedule of the replay."""
    import b200c
    from b200c.errors import B200cError

    files = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")) + sorted((ROOT / "examples/variants").glob("*.py"))
    hopper = sorted((ROOT / "examples/hopper").glob("h[0-9][0-9]_*.py"))
    base = []
    for p in files:
        base.append((p.relative_to(ROOT / "examples").with_suffix("").as_posix(), b200c.load_schedule_file(p),
                     ("sm100a",)))
    for p in hopper:
        base.append((p.relative_to(ROOT / "examples").with_suffix("").as_posix(), b200c.load_schedule_file(p),
                     ("sm90a",)))
    for key, s, targets in base:
        yield key, s, targets
        for d in (64, 256):
            if d != s.head_dim:
                yield f"{key}@d{d}", s.replace(head_dim=d), targets
        for knob, values in KNOB_VALUES.items():
            for v in values:
                if getattr(s, knob) == v:
                    continue
                try:
                    t = s.replace(**{knob: v})
                except B200cError:
                    continue
                yield f"{key}+{knob}={v}", t, targets


def manifest(keep: Path | None = None) -> dict:
    import b200c
    from b200c.codegen import lower, make_plan
    from b200c.errors import B200cError

    out = {}
    for key, s, targets in schedules():
        for target in targets:
            k = f"{key}:{target}"
            try:
                g = b200c.generate(s, target)
                ir = lower(s, target=target)
                plan = make_plan(s, target)
            except B200cError as e:
                out[k] = {"error": f"{type(e).__name__}: {e}"}
                continue
            out[k] = {"cu": _sha(g.source), "ir": _sha(ir.text()), "plan": _sha(str(plan)),
                      "launch": _sha(g.launch.to_json())}
            if keep is not None:
                (keep / (k.replace("/", "__").replace(":", "@") + ".cu")).write_text(g.source)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="manifest to write (JSON)")
    ap.add_argument("--compare", help="an earlier manifest: print the kernels that differ")
    ap.add_argument("--keep", help="also write every generated source into this folder")
    a = ap.parse_args(argv)
    keep = Path(a.keep) if a.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    m = manifest(keep)
    Path(a.out).write_text(json.dumps(m, indent=1, sort_keys=True))
    ok = sum(1 for v in m.values() if "cu" in v)
    print(f"{len(m)} kernels: {ok} generated, {len(m) - ok} refused -> {a.out}")
    if not a.compare:
        return 0
    old = json.loads(Path(a.compare).read_text())
    diffs = [(k, old.get(k), m.get(k)) for k in sorted(set(old) | set(m)) if old.get(k) != m.get(k)]
    for k, was, now in diffs:
        what = [f for f in ("cu", "ir", "plan", "launch", "error") if (was or {}).get(f) != (now or {}).get(f)]
        print(f"  {k}: {', '.join(what)} differ" + (f"\n     was {was.get('error')}" if was and "error" in was else "")
              + (f"\n     now {now.get('error')}" if now and "error" in now else ""))
    print(f"{len(diffs)} of {len(m)} differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
