"""The knob space: every Schedule field's type and allowed values, written once. The validation rules
(b200c/dsl/validate.py) check against it, ``help(b200c.Schedule)`` prints it, and the schedule-space
property tests draw from it. Target rules narrow it further (b200c/codegen/<backend>/knobs.py)."""
from __future__ import annotations

ENUMS = {
    "p_storage": ("smem", "tmem", "registers"),
    "swizzle": ("none", "128B"),
    "kv_tokens": ("paired", "separate"),
    "exp2": ("expf", "ex2.approx.ftz"),
    "rowsum": ("fp32", "bf16"),
    "phase_tracking": ("array", "bitmask"),
    "tma_l2_promotion": ("none", "64B", "128B", "256B"),
}

# field -> the allowed values, as help(b200c.Schedule) prints them
ALLOWED = {
    "name": "1-64 letters, digits or '_.+-'",
    "blog_stage": "an int (0: not a blog stage)",
    "block_m": "128 (sm100a) or 64 (sm90a)",
    "block_n": "a multiple of 16 in 16..256 (sm100a: 128; sm90a: <= 224 / 192 / 80 at head dim 64 / 128 / 256)",
    "head_dim": "64, 128 or 256",
    "q_stages": "1..4 (sm100a: TMEM permitting; sm90a: 1 or 2)",
    "kv_stages": "1..8 (SMEM permitting)",
    "issue_order": "None or an order such as 'P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)'",
    "pingpong": "True (sm90a, q_stages=2) or False",
    "sw_exp2_per16": "0, 2, 4, 6 or 8 (needs exp2='ex2.approx.ftz')",
    "s_cache_cols": "0 or a multiple of 16 (and of s_load_cols) up to block_n (needs p_storage='tmem')",
    "rescale_threshold": "None or a number of log2 units in [0, 64] (needs exp2='ex2.approx.ftz')",
    "correction_warps": "0 or 4",
    "early_pv_cols": "0 or a multiple of 16 in 16..112 (needs s_cache_cols)",
    "s_load_cols": "8, 16 or 32",
    "rowmax_chains": "1, 2, 4 or 8",
    "o_load_cols": "8, 16 or 32",
    "softmax_regs": "None or a multiple of 8 in 24..256 (all register budgets or none)",
    "correction_regs": "None or a multiple of 8 in 24..256 (with correction_warps=4)",
    "other_regs": "None or a multiple of 8 in 24..256",
    "kv_splits": "None (per call), 0 (split-KV build, count per call), 1 (never split) or 2..128",
}
BOOLS = ("warp_specialized", "persistent", "deferred_s_wait", "split_rowsum", "f32x2", "rowmax_max3", "pingpong")


def allowed(field: str) -> str:
    """The allowed values of a Schedule field, in words."""
    if field in ENUMS:
        return " or ".join(repr(v) for v in ENUMS[field])
    if field in ALLOWED:
        return ALLOWED[field]
    if field in BOOLS:
        return "True or False"
    return "see the validation rules"


def table(fields) -> str:
    """The "Allowed values" section of Schedule's docstring."""
    lines = ["", "    Allowed values (validation refuses anything else; a target may narrow them):", ""]
    for f in fields:
        lines.append(f"    * ``{f}``: {allowed(f)}")
    return "\n".join(lines) + "\n"
