"""Built-in schedules: what ``b200c.attention(schedule=None)`` and ``b200c.scaled_dot_product_attention``
run when no schedule is given, one per head dim for each family of targets.

B200 (sm100a, and its emulation): ``D128`` is the blog's final stage
(``examples/18_tma_l2_promotion.py``) with every knob written out; ``D64`` and
``D256`` are its head-dim variants (``examples/variants/hdim64.py``,
``hdim256.py``): at D = 256 one Q stage (two would need 768 of 512 TMEM
columns) and a two-slot K/V ring.

Hopper (sm90a): ``HOPPER_D128`` is the Hopper progression's last stage
(``examples/hopper/h11_persistent.py``: two ping-pong consumer warpgroups of 64
rows, 176-row K/V tiles in a 4-slot ring, FA3's intra-warpgroup overlap, ex2,
the ch.11 threshold, persistent); ``HOPPER_D64`` takes 224-row K/V tiles (its
accumulators fit more columns) and no ping-pong (measured faster at D = 64),
``HOPPER_D256`` 80-row ones (FA3's tile at head dim 256; 4 slots of 40 KiB), not
persistent (its consumers need 240 registers, which leaves the producer 24, too
few for the persistent producer).

Tests check that the B200 presets equal those files apart from the name. The
target record names its family (``Target.presets``: ``"b200"`` or ``"hopper"``).
"""
from __future__ import annotations

import functools

from .backward_schedule import BackwardSchedule
from .schedule import Schedule

D128 = Schedule(
    name="default_d128",
    blog_stage=18,
    head_dim=128,
    p_storage="tmem",                       # ch.2: P in TMEM
    swizzle="128B",                         # ch.3
    warp_specialized=True,                  # ch.4
    q_stages=2,                             # ch.5: two Q tiles (or two packed heads) per CTA
    kv_tokens="separate",                   # ch.6: K and V as separate tokens
    kv_stages=3,                            #       in a 3-slot ring
    issue_order="P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)",  # ch.7
    exp2="ex2.approx.ftz",                  # ch.8
    f32x2=True,
    sw_exp2_per16=2,                        # ch.9
    s_cache_cols=96,                        # ch.10
    rescale_threshold=8.0,                  # ch.11
    correction_warps=4,                     # ch.12
    early_pv_cols=96,                       # ch.13
    persistent=True,                        # ch.14
    s_load_cols=16,                         # minor 15
    deferred_s_wait=True,
    rowmax_chains=4,
    rowmax_max3=True,
    o_load_cols=32,
    split_rowsum=True,                      # minor 16
    phase_tracking="bitmask",               # minor 17
    tma_l2_promotion="256B",                # minor 18
    softmax_regs=192,
    correction_regs=80,
    other_regs=48,
)

D64 = D128.replace(name="default_d64", head_dim=64, kv_stages=4)

D256 = D128.replace(name="default_d256", head_dim=256, q_stages=1, kv_stages=2, issue_order="P0V(i) Q0K(i+1)",
                    softmax_regs=224, correction_regs=232, other_regs=48)  # 128 x 504 = 64512: the launch allocation

PRESETS = {64: D64, 128: D128, 256: D256}

HOPPER_D128 = Schedule(
    name="hopper_default_d128",
    blog_stage=11,                          # the Hopper progression (docs/hopper-progression.md)
    block_m=64,                             # one consumer warpgroup's rows (wgmma M)
    block_n=176,                            # FA3's K/V tile at head dim 128
    head_dim=128,
    p_storage="registers",                  # P is the A operand of an RS wgmma
    swizzle="128B",
    warp_specialized=True,                  # a producer warpgroup, consumer warpgroups
    q_stages=2,                             # two consumer warpgroups
    kv_tokens="separate",
    kv_stages=4,
    issue_order="Q0K(i+1) P0V(i) Q1K(i+1) P1V(i)",  # FA3 §3.2: softmax(i+1) overlaps PV(i)
    pingpong=True,                          # FA3 §3.1
    exp2="ex2.approx.ftz",                  # blog ch.8
    rescale_threshold=8.0,                  # blog ch.11
    persistent=True,                        # blog ch.14
    phase_tracking="bitmask",               # minor 17
    tma_l2_promotion="256B",                # minor 18
    softmax_regs=232,                       # 128 x 40 + 256 x 232 = 64512: the launch allocation at 384 threads
    other_regs=40,                          # the persistent producer spilled at 24
)

# at head dim 64 a GEMM is half as long and the consumers' turns cost more than they hide: without
# ping-pong and with 224-row K/V tiles, measured on the H200 in one run next to the ping-pong 192-row
# tiles (b200c bench, 8x16x4096 / 4x16x8192 / 2x16x16384, dense then causal): 481/478/471 and
# 414/466/488 TFLOPS against 435/466/463 and 394/434/462 (cuDNN 483/491/476, 434/463/462);
# docs/hopper-progression.md lists the ten neighbours tried
HOPPER_D64 = HOPPER_D128.replace(name="hopper_default_d64", head_dim=64, block_n=224, pingpong=False)

# at head dim 256 the consumers need their 240 registers (232 spilled, measured), which leaves the producer 24:
# not persistent (the persistent producer spills at 24)
HOPPER_D256 = HOPPER_D128.replace(name="hopper_default_d256", head_dim=256, block_n=80, persistent=False,
                                  softmax_regs=240, other_regs=24)

HOPPER_PRESETS = {64: HOPPER_D64, 128: HOPPER_D128, 256: HOPPER_D256}

# with a score_mod / mask_mod the consumers also compute the mods per score: at the presets' K/V tiles ptxas
# spilled (softcap + a document mask: 316 / 264 B of spill stores at head dim 64 / 128; nvcc 13.0); at 160 / 128
# rows softcap, a document mask, key padding and softcap + document compile without spills; at head dim 128 ALiBi
# keeps 16 B, causal & document 40 B, both 56-92 B (spill stores + loads, a fresh-user trial). With the current
# kernels (nvcc 13.0) softcap, a document mask, a sliding window and softcap + document compile with 0 B at every
# head dim (tests/test_mods_runtime.py); causal & document keeps 40 / 36 B at head dim 64 / 128 and ALiBi + a
# window 20 B at 128, all outside the K/V loop (stored once, read back once per work item;
# measured in SASS, no test pins them). Light mods (ALiBi, a
# per-head bias: b200c.codegen.mods.light) keep the dense presets' tiles: ALiBi compiles without spills at 224 / 176 /
# 80 rows and ran faster at 176 than at 128 rows on the H200 (571 against 548 TFLOPS, 4x16x8192x128), while the
# masks ran as fast or faster at 128 rows (sliding window 1024: 0.56 against 0.65 ms, document: 0.52 against 0.73)
HOPPER_MOD_PRESETS = {
    64: HOPPER_D64.replace(name="hopper_mods_d64", block_n=160),
    128: HOPPER_D128.replace(name="hopper_mods_d128", block_n=128),
    256: HOPPER_D256.replace(name="hopper_mods_d256", block_n=64),
}

# the split-KV builds of the mods presets (what masked decoding runs): from the preset, kv_splits=0 spilled with a
# mask (a document mask, softcap + document: 20 B at head dim 64; those and a sliding window: 48 B at 256, its
# producer at 24 registers; nvcc 13.0); not persistent at 64 and a 40-register producer at 256 (consumers 232)
# compile with 0 B with each mod of tests/test_mods_runtime.py. b200c.dsl.split_build takes these for the presets
HOPPER_MOD_SPLIT_BUILDS = {
    64: HOPPER_MOD_PRESETS[64].replace(name="hopper_mods_split_d64", kv_splits=0, persistent=False),
    128: HOPPER_MOD_PRESETS[128].replace(kv_splits=0),
    256: HOPPER_MOD_PRESETS[256].replace(name="hopper_mods_split_d256", kv_splits=0, softmax_regs=232, other_regs=40),
}


def preset_split_build(s: Schedule):
    """The split-KV build a built-in preset runs instead of its own with ``kv_splits=0``
    (:data:`HOPPER_MOD_SPLIT_BUILDS`), or None for any other schedule."""
    for d, preset in HOPPER_MOD_PRESETS.items():
        if s == preset:
            return HOPPER_MOD_SPLIT_BUILDS[d]
    return None


# short key sequences (cross-attention to a few hundred text or audio tokens): the dense presets' long K/V
# tiles leave most of the last tile empty (S_kv = 251 at head dim 64: two tiles of 224 rows, 448 keys computed
# for 251; LTX-2's video-to-audio attention ran at 0.55x cuDNN on the H200, 0.83x on these 128-row tiles).
# short_kv_tiles takes them for at most SHORT_KV_TILES of the preset's tiles when the preset's tiles would
# compute more than SHORT_KV_WASTE times the keys these compute; at head dim 128 and 256 they are the mods
# presets' tiles
HOPPER_SHORT_KV_PRESETS = {
    64: HOPPER_D64.replace(name="hopper_short_kv_d64", block_n=128),
    128: HOPPER_D128.replace(name="hopper_short_kv_d128", block_n=128),
    256: HOPPER_D256.replace(name="hopper_short_kv_d256", block_n=64),
}
SHORT_KV_WASTE = 1.15
SHORT_KV_TILES = 4

# at most two 128-row K/V tiles at head dim 64 (LTX-2's video-to-audio attention: 251 keys): one warpgroup per
# CTA (blog stage 1's roles with exp2), not persistent, 42 KB of shared memory and 128 registers, so several CTAs
# share an SM and one's Q load and O store overlap another's GEMMs, where the two-consumer kernel's item is mostly
# its own fixed cost. Measured by b200c bench on the H200 in one run (1x32x12288 against 251 keys): 269 TFLOPS
# (95 % of cuDNN's 282) against the short preset's 236 (84 %); 64-row tiles 265. At head dim 128 the same kernel
# was slower than the short preset (1x32x12288 against 77 keys: 105 against 139; 300 keys: 239 against 343), so
# only head dim 64, and only where measured: up to FEW_KV_TILES of its tiles
HOPPER_FEW_KV_PRESETS = {
    64: Schedule(name="hopper_few_kv_d64", block_m=64, block_n=128, head_dim=64, swizzle="128B",
                 p_storage="registers", exp2="ex2.approx.ftz", tma_l2_promotion="256B", phase_tracking="bitmask"),
}
FEW_KV_TILES = 2

FAMILIES = {"b200": PRESETS, "hopper": HOPPER_PRESETS}
MOD_FAMILIES = {"b200": PRESETS, "hopper": HOPPER_MOD_PRESETS}
SHORT_KV_FAMILIES = {"hopper": HOPPER_SHORT_KV_PRESETS}
FEW_KV_FAMILIES = {"hopper": HOPPER_FEW_KV_PRESETS}


def short_kv_tiles(head_dim: int, family: str, seq_kv) -> bool:
    """Whether a dense call with ``seq_kv`` keys takes the family's short-K/V-tile preset
    (:data:`HOPPER_SHORT_KV_PRESETS`): ``seq_kv`` fits in :data:`SHORT_KV_TILES` of the dense preset's K/V
    tiles and those, rounded up to whole tiles, cover more than :data:`SHORT_KV_WASTE` times the keys the
    short preset's tiles cover (S_kv = 251 at head dim 64: 448 against 256 keys). False for a family
    without such presets, another head dim, ``seq_kv`` None or 0.

    Raises:
        ScheduleError: ``seq_kv`` is not None and not a non-negative integer (a bool is not one).
    """
    if seq_kv is None:
        return False
    import operator

    from ..errors import ScheduleError

    try:
        n = -1 if isinstance(seq_kv, bool) else operator.index(seq_kv)
    except TypeError:
        n = -1
    if n < 0:
        raise ScheduleError(f"seq_kv={seq_kv!r}: the key length must be a non-negative integer (or None)")
    short = SHORT_KV_FAMILIES.get(family, {}).get(head_dim)
    if short is None or n == 0:
        return False
    dense = FAMILIES[family][head_dim].block_n

    def padded(bn):
        return -(-n // bn) * bn

    return n <= SHORT_KV_TILES * dense and padded(dense) > SHORT_KV_WASTE * padded(short.block_n)


def short_kv_preset(head_dim: int, family: str, seq_kv) -> Schedule | None:
    """The preset a dense call with ``seq_kv`` keys takes in place of the head dim's because its keys are
    few, or None: where :func:`short_kv_tiles` holds, the few-K/V-tile preset (:data:`HOPPER_FEW_KV_PRESETS`,
    one warpgroup per CTA) if ``seq_kv`` fits in :data:`FEW_KV_TILES` of its K/V tiles (head dim 64: 1-128
    and 225-256 keys; 129-224 fit one of the preset's 224-row tiles, which it keeps), else the short-K/V-tile
    one (:data:`HOPPER_SHORT_KV_PRESETS`).

    Raises:
        ScheduleError: ``seq_kv`` is not None and not a non-negative integer (a bool is not one).
    """
    if not short_kv_tiles(head_dim, family, seq_kv):
        return None
    few = FEW_KV_FAMILIES.get(family, {}).get(head_dim)
    if few is not None and int(seq_kv) <= FEW_KV_TILES * few.block_n:
        return few
    return SHORT_KV_FAMILIES[family][head_dim]


@functools.lru_cache(maxsize=None)
def short_kv_breakpoints(head_dim: int, family: str) -> tuple:
    """The key lengths where :func:`short_kv_preset`'s choice changes: ``n_1 < n_2 < ...`` such that every
    ``seq_kv`` in ``(n_(i-1), n_i]`` gets the preset ``n_i`` gets, and every one past the last the head dim's
    preset (empty: a family or head dim without short-key presets). Found by evaluating the rule at every
    length up to :data:`SHORT_KV_TILES` dense tiles (past those it never takes a short preset). What
    torch.compile's dynamic shapes use: a symbolic key length is compared with these (a guard each), never
    read."""
    if SHORT_KV_FAMILIES.get(family, {}).get(head_dim) is None:
        return ()
    top = SHORT_KV_TILES * FAMILIES[family][head_dim].block_n
    pick = [short_kv_preset(head_dim, family, n) for n in range(1, top + 2)]  # pick[n - 1]: seq_kv = n
    return tuple(n for n in range(1, top + 1) if pick[n - 1] != pick[n])


def _check_head_dim_type(head_dim) -> None:
    """A ScheduleError unless ``head_dim`` is an integer (``operator.index`` takes it; a bool is not one)."""
    import operator

    from ..errors import ScheduleError

    try:
        ok = not isinstance(head_dim, bool) and operator.index(head_dim) is not None
    except TypeError:
        ok = False
    if not ok:
        raise ScheduleError(f"the head dim must be an int (64, 128 or 256), got the {type(head_dim).__name__} "
                            f"{head_dim!r}")


def default_schedule(head_dim: int, family: str = "b200", mods: bool = False, seq_kv=None) -> Schedule:
    """The built-in schedule for head dim 64, 128 or 256 of a family of targets (``"b200"``:
    sm100a and its emulation; ``"hopper"``: sm90a). ``b200c.default_schedule(head_dim, target=...)``
    takes a target name instead (and a traced ModSet for ``mods``). ``mods`` (truthy): the schedule for
    calls with a score_mod / mask_mod that is not light (Hopper: smaller K/V tiles,
    :data:`HOPPER_MOD_PRESETS`; light mods, :func:`b200c.codegen.mods.light`, keep the dense ones).
    ``seq_kv``: the call's key length (int) for a dense call: on Hopper a short one takes smaller K/V
    tiles (:func:`short_kv_tiles`: it fits in :data:`SHORT_KV_TILES` (4) of the preset's K/V tiles and
    those, rounded up to whole tiles, would compute more than :data:`SHORT_KV_WASTE` (1.15) times the
    keys the smaller tiles compute; a rule on padding, not a key-count threshold), and of those at head
    dim 64 the ones within :data:`FEW_KV_TILES` (2) 128-row tiles one warpgroup per CTA
    (:func:`short_kv_preset`: 1-128 and 225-256 keys; 129-224 keep the preset's one 224-row tile);
    None (the default) gives the head dim's preset.

    Raises:
        ScheduleError: a head dim that is not an int (a str such as ``"128"``, a float, a bool; an integer
            type such as a numpy integer is taken), another head dim (b200c kernels support 64, 128 and 256)
            or family; a ``seq_kv`` that is not None or a non-negative integer.
    """
    from ..errors import ScheduleError

    if type(head_dim) is not int:
        _check_head_dim_type(head_dim)
    table = (MOD_FAMILIES if mods else FAMILIES).get(family)
    if table is None:
        raise ScheduleError(f"no built-in schedules for {family!r}; families: {', '.join(map(repr, FAMILIES))}")
    try:
        preset = table[head_dim]
    except (KeyError, TypeError):
        pad = next((n for n in (64, 128, 256) if isinstance(head_dim, int) and head_dim < n), None)
        fix = (f"zero-pad q, k and v to head dim {pad} with softmax_scale={head_dim}**-0.5 and slice the output, or "
               if pad else "")
        raise ScheduleError(f"no built-in schedule for head dim {head_dim!r}; b200c supports 64, 128 and 256 ({fix}"
                            "use torch.nn.functional.scaled_dot_product_attention)") from None
    short = short_kv_preset(head_dim, family, seq_kv)  # seq_kv checked with mods too
    if short is not None and not mods:
        return short
    return preset


# The built-in backward schedules on sm_90a, per head dim, after FlashAttention-3's sm90 BF16 tiles
# (hopper/flash_bwd_launch_template.h: kBlockM x kBlockN 128 x 128 at head dim 64, 64 x 128 at 128 for causal
# calls (80 x 128 dense), 64 x 80 at 256 with one Q/dO stage; two MMA warpgroups) and b200c's register split of
# the forward's three-warpgroup kernels (240 / 24: exactly the launch allocation). Where b200c's kernel differs:
# head dim 64 takes FA3's 128 x 128 (dQ split by rows over the warpgroups, P^T packed after dS^T is made so that
# S and dP of 128 rows, 128 registers per thread, fit beside dK and dV); head dim 256
# takes 64 x 64 tiles with dK and dV split over the warpgroups' columns (FA3's 64 x 80 keeps P and dS in shared
# memory, swapped operands b200c's kernel does not have; 80 keys of dK and dV plus S and dP of every key exceed
# the 240 registers) and two Q/dO stages (215592 B of shared memory: the producer loads the next visit's tiles
# while the consumers compute)
SM90_BACKWARD = {
    64: BackwardSchedule(name="hopper_backward_d64", head_dim=64, block_m=128, block_n=128),
    128: BackwardSchedule(name="hopper_backward_d128", head_dim=128, block_m=64, block_n=128),
    256: BackwardSchedule(name="hopper_backward_d256", head_dim=256, block_m=64, block_n=64),
}


BACKWARD_FAMILIES = {"hopper": SM90_BACKWARD}


def default_backward_schedule(head_dim: int, family: str = "hopper") -> BackwardSchedule:
    """The built-in backward schedule of ``family`` (a target's ``backward`` field,
    :attr:`b200c.codegen.targets.Target.backward`) for head dim 64, 128 or 256.

    Args:
        head_dim: D of the inputs (an int: 64, 128 or 256).
        family: a key of :data:`BACKWARD_FAMILIES` (``"hopper"``: sm_90a, H100 / H200).

    Returns:
        A validated :class:`BackwardSchedule` (:data:`SM90_BACKWARD` for ``"hopper"``).

    Raises:
        ScheduleError: another head dim, or a family without built-in backward schedules.
    """
    from ..errors import ScheduleError

    table = BACKWARD_FAMILIES.get(family)
    if table is None:
        raise ScheduleError(f"no built-in backward schedules in family {family!r}; families: "
                            f"{', '.join(map(repr, BACKWARD_FAMILIES))}")
    if type(head_dim) is not int or head_dim not in table:
        *most, last = sorted(table)
        raise ScheduleError(f"no built-in backward schedule for head dim {head_dim!r}; use the int "
                            f"{', '.join(map(str, most))} or {last}")
    return table[head_dim].validate()
