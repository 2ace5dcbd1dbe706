"""The generated sm_90a backward module (issue 48 step 1): its layout worked out by hand, what it refuses
by name, its golden file, its compile (0 spill bytes, every kernel) and the launch numbers and parameters
the runtime derives from the host model's decomposition (CPU tensors: no device)."""
import math
from pathlib import Path

import pytest

import b200c
from b200c.codegen.backward_work import BackwardDecomposition
from b200c.codegen.sm90.backward import (MAIN_KERNEL, POSTPROCESS_KERNEL, PREPROCESS_KERNEL, backward_kernel_ir,
                                         backward_layout, generate_backward)
from b200c.errors import BackwardNotSupportedError

GOLDEN = Path(__file__).parent / "golden" / "backward"


def test_d128_layout_by_hand():
    lay = backward_layout(b200c.default_backward_schedule(128))
    kb = 128 * 128 * 2  # one 128-key x 128-column BF16 tile
    qb = 64 * 128 * 2   # one 64-row tile
    assert (lay.block_m, lay.block_n, lay.wg_keys, lay.dq_cols, lay.threads) == (64, 128, 64, 64, 384)
    offsets = {name: off for name, off, _, _ in lay.regions}
    dq = 2 * kb + 4 * qb + 2 * (128 * 64 * 2)  # 163840: the two warpgroups' 64 x 64 FP32 dQ parts after dS^T
    assert offsets == {"k": 0, "v": kb, "q": 2 * kb, "do": 2 * kb + 2 * qb, "ds": 2 * kb + 4 * qb, "dq": dq,
                       "lse": dq + 64 * 128 * 4, "dpsum": dq + 64 * 128 * 4 + 1024,
                       "barriers": dq + 64 * 128 * 4 + 1024 + 512}
    assert lay.visit_tx_bytes == 2 * qb + 2 * 64 * 4
    assert [(b[0], b[1], b[2], b[3]) for b in lay.barriers] == [("kv_full", 0, 1, 1), ("q_full", 1, 2, 1),
                                                                ("q_empty", 3, 2, 8)]
    assert lay.smem_bytes == 198144 + 5 * 8 + 1024 and lay.dq_store == "bulk"
    # dQ: each warpgroup 64 of the 128 columns over all 128 keys; warpgroup 1 starts at K's second slice
    assert (lay.dq_split, lay.dq_keys, lay.dq_wg_key_bytes, lay.dq_wg_col_bytes, lay.dq_wg_col0) == \
        ("columns", 128, 0, 128 * 128, 64)


def test_d64_layout_by_hand():
    """The built-in head-dim-64 schedule takes FA3's 128 x 128 tiles (test_d64_128_by_128_splits_dq_by_rows
    has its layout); with 64-row visits each warpgroup's half of dQ's 64 columns would be half a 128-byte
    swizzle atom, so each takes all 64 columns over its own 64 keys and the warpgroups add into the same part."""
    lay = backward_layout(b200c.default_backward_schedule(64))
    assert (lay.block_m, lay.block_n, lay.wg_keys, lay.threads, lay.slices, lay.dq_split) == (128, 128, 64, 384, 1, "rows")
    lay = backward_layout(b200c.default_backward_schedule(64).replace(block_m=64))
    kb = 128 * 64 * 2  # one 128-key x 64-column BF16 tile
    qb = 64 * 64 * 2   # one 64-row tile
    offsets = {name: off for name, off, _, _ in lay.regions}
    dq = 2 * kb + 4 * qb + 2 * (128 * 64 * 2)  # 98304: each warpgroup's whole 64 x 64 FP32 dQ (split by keys)
    assert offsets == {"k": 0, "v": kb, "q": 2 * kb, "do": 2 * kb + 2 * qb, "ds": 2 * kb + 4 * qb, "dq": dq,
                       "lse": dq + 2 * 64 * 64 * 4, "dpsum": dq + 2 * 64 * 64 * 4 + 1024,
                       "barriers": dq + 2 * 64 * 64 * 4 + 1024 + 512}
    assert lay.smem_bytes == 132608 + 5 * 8 + 1024 and lay.dq_store == "bulk" and lay.dq_wg_part == 0
    # its rows of the dS^T and K tiles start 64 rows x 128 B further on
    assert (lay.dq_split, lay.dq_cols, lay.dq_keys, lay.dq_wg_key_bytes, lay.dq_wg_col_bytes, lay.dq_wg_col0) == \
        ("keys", 64, 64, 64 * 128, 0, 0)
    ir = backward_kernel_ir(b200c.default_backward_schedule(64).replace(block_m=64))
    named = {nb.name: (nb.first_id, nb.count, nb.threads) for nb in ir.plan.named_barriers}
    assert named == {"ds_ready": (1, 2, 128), "dq_full": (3, 2, 128)}  # one per warpgroup, its own 128 threads
    assert {nb.name: (nb.first_id, nb.count, nb.threads) for nb in _ir().plan.named_barriers} == \
        {"ds_ready": (1, 1, 256), "dq_full": (2, 2, 128)}


def test_d256_layout_by_hand():
    """Head dim 256, 64 x 64 tiles: dK and dV of 64 keys x 256 columns would take 256 registers per thread in
    one warpgroup, so the two warpgroups split them by columns (128 each: warpgroup 1's B operands start at the
    third 64-column slice of Q and dO, 2 x 64 rows x 128 B further on) and each computes S^T and dP^T of all 64
    keys; each stores half of the dS^T rows (two of its four warps), and dQ is split by columns as at 128."""
    lay = backward_layout(b200c.default_backward_schedule(256))
    kb = 64 * 256 * 2  # one 64-key x 256-column BF16 tile (also one 64-row Q tile)
    assert (lay.block_m, lay.block_n, lay.q_stages, lay.slices, lay.threads) == (64, 64, 2, 4, 384)
    assert (lay.kv_split, lay.wg_keys, lay.wg_key_stride, lay.kv_cols, lay.kv_wg_col_bytes, lay.kv_wg_col0,
            lay.ds_rows_by_warp) == ("columns", 64, 0, 128, 2 * 64 * 128, 128, True)
    assert (lay.dq_split, lay.dq_cols, lay.dq_keys, lay.dq_wg_key_bytes, lay.dq_wg_col_bytes, lay.dq_wg_col0) == \
        ("columns", 128, 64, 0, 2 * 64 * 128, 128)
    offsets = {name: off for name, off, _, _ in lay.regions}
    assert offsets == {"k": 0, "v": kb, "q": 2 * kb, "do": 4 * kb, "ds": 6 * kb, "lse": 6 * kb + 2 * 64 * 64 * 2,
                       "dpsum": 6 * kb + 2 * 64 * 64 * 2 + 1024, "barriers": 6 * kb + 2 * 64 * 64 * 2 + 1024 + 512}
    assert lay.smem_bytes == offsets["barriers"] + 5 * 8 + 1024
    assert {nb.name: (nb.first_id, nb.count, nb.threads) for nb in _ir(256).plan.named_barriers} == \
        {"ds_ready": (1, 1, 256)}  # each warpgroup's dQ reads the dS^T rows both stored
    src = generate_backward(b200c.default_backward_schedule(256)).source
    assert "wgmma_rs_n<128>" in src and "wgmma_ss_tt_n<128>" in src and "wgmma_rs_n<256>" not in src
    assert "constexpr bool DS_ROWS_BY_WARP = true" in src
    d128 = generate_backward(b200c.default_backward_schedule(128)).source
    assert "constexpr bool DS_ROWS_BY_WARP = false" in d128 and "constexpr int WG_KEY_STRIDE = 64;" in d128


@pytest.mark.parametrize("change,word", [
    (dict(head_dim=64, block_m=96), "block_m = 96"),  # 64, or one 64-row slice per consumer warpgroup
    (dict(block_m=32), "block_m = 32"),
    (dict(block_n=32), "block_n = 32 at head dim 128"),  # dK, dV split by columns: 64 keys only
    # from a new-user trial: the advice named only block_n = 64, though the built-in schedule splits by keys
    (dict(block_n=80), "use block_n = 64; or block_n = 128, dK and dV split by keys"),
    (dict(persistent=True), "persistent"),
])
def test_not_yet_generated_is_refused_by_name(change, word):
    s = b200c.default_backward_schedule(128).replace(**change)
    with pytest.raises(BackwardNotSupportedError, match="not support") as e:
        generate_backward(s)
    assert word in str(e.value)


def _schedule(d, deterministic=False):
    s = b200c.default_backward_schedule(d)
    return s.replace(dq_reduction="deterministic", name=s.name + "_deterministic") if deterministic else s


@pytest.mark.parametrize("d,deterministic", [(64, False), (128, False), (128, True), (256, False), (256, True)])
def test_golden(request, d, deterministic):
    g = generate_backward(_schedule(d, deterministic))
    golden = GOLDEN / f"hopper_backward_d{d}{'_deterministic' if deterministic else ''}.cu"
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(g.source)
    assert golden.exists(), f"no golden file {golden}; run pytest --update-golden and review it"
    assert g.source == golden.read_text(), "generated backward differs from its golden file (--update-golden)"
    for name in (MAIN_KERNEL, PREPROCESS_KERNEL, POSTPROCESS_KERNEL):
        assert f"\n{name}(" in g.source


# per head dim: the visit loop's wgmmas and MUFU.EX2, and its static SASS instructions with nvcc 13.0.88
# (pinned on purpose). Since dQ goes through the dq region and one thread's bulk reduce-add (64, 128) the loop
# holds that thread's address arithmetic (about 20 instructions the other 127 threads branch over) in place of
# every thread's 16 red.global.add.v2 (711 at 128 and 774 at 64 before); at 256 the red.global.add.v4 of the
# fragment order replaced them (1113 before). Earlier: nvcc 13.5.37 gave 771 at 64, 713 at 128 and 1111 at
# 256 with red.global.add.v2; before dQ's additions took
# one address per thread with immediate offsets the loop was 844 at 64 and 828 at 128, and head dim 256
# spilled 16 B; with dQ issued while dK ran, 256 had every wgmma serialized, C7512, 1192). Wgmmas per
# consumer warpgroup and visit: S^T and dP^T D / 16 each (k16 steps over D), dV and dK one per 16 rows of the
# visit (4; 8 at D = 64's 128 rows), dQ one per 16 keys it sums over (128 at D = 128 and 64, the tile's 64 at
# D = 256); 32 P values per thread (64 keys x 64 rows / 128: at 256 every warpgroup computes all 64 keys), 64
# at D = 64 (64 keys x 128 rows). Head dim 64's loop with 64-row visits was 793 (for half the work of a visit).
LOOPS = {128: (8 + 8 + 4 + 4 + 8, 32, 734), 64: (4 + 4 + 8 + 8 + 8, 64, 1154), 256: (16 + 16 + 4 + 4 + 4, 32, 1089)}


@pytest.mark.nvcc
@pytest.mark.parametrize("d,deterministic", [(64, False), (128, False), (256, False), (64, True), (128, True),
                                             (256, True)])
def test_compiles_without_spills(tmp_path, d, deterministic):
    from b200c.nvcc import compile_cuda

    g = generate_backward(_schedule(d, deterministic))
    res = compile_cuda(g.source, tmp_path / "bwd.cubin", "cubin", "sm_90a")
    for name in (MAIN_KERNEL, PREPROCESS_KERNEL, POSTPROCESS_KERNEL):
        r = res.resources(name)
        assert r["registers"] is not None, res.log
        assert r["spill_bytes"] == 0 and r["stack_frame"] == 0, (name, res.log)
    # ptxas serializes no wgmma for lack of registers (C7511 / C7512: every wgmma would wait for the last)
    assert "(C751" not in res.log, res.log
    # the main kernel runs under the setmaxnreg budgets: ptxas compiles it for the entry allotment
    assert res.resources(MAIN_KERNEL)["registers"] <= 168
    from b200c import sass

    try:
        sass.find_cuobjdump()
    except b200c.BuildError:
        pytest.skip("cuobjdump not found: the SASS counts below need it")
    from b200c.sass import disassemble
    from b200c.sass.hopper import async_register_hazards, hot_loop

    loop = hot_loop(disassemble(tmp_path / "bwd.cubin"))
    mma, ex2, count = LOOPS[d]
    assert (loop["mma"], loop["mufu_ex2"]) == (mma, ex2)
    assert async_register_hazards(loop["body"]) == []  # no register written while a wgmma reading it runs
    from b200c.toolchain import find_nvcc, nvcc_release, tested

    release = nvcc_release(find_nvcc())
    if tested(release) and not deterministic:  # the count is pinned for the tested release
        assert loop["instructions"] == count


@pytest.mark.parametrize("b,h,hk,sq,skv", [(1, 1, 1, 1, 1), (2, 16, 16, 8192, 8192), (3, 32, 8, 1000, 4097),
                                           (1, 4, 2, 65, 129)])
def test_launch_plan_follows_the_decomposition(b, h, hk, sq, skv):
    from b200c.runtime.backward_launch import launch_plan

    lay = backward_layout(b200c.default_backward_schedule(128))
    lp = launch_plan(lay, b, h, hk, sq, skv)
    dec = BackwardDecomposition(64, 128)
    assert lp.num_work == dec.num_work(b, hk, skv) == b * hk * math.ceil(skv / 128)
    assert lp.seq_pad % 64 == 0 and 0 <= lp.seq_pad - sq < 64
    assert lp.row_grid == (lp.seq_pad // 64, h, b)
    assert (lp.threads, lp.smem) == (384, lay.smem_bytes)


def test_param_values_name_every_parameter():
    import torch

    from b200c.runtime.backward_launch import MAIN_SPEC, POST_SPEC, PRE_SPEC, launch_plan, param_values
    from b200c.runtime.params import ParamBlock, decode

    b, h, hk, sq, skv, d = 2, 4, 2, 100, 300, 128
    q = torch.zeros(b, sq, h, d, dtype=torch.bfloat16).transpose(1, 2)  # a BHSD view of BSHD memory
    k = torch.zeros(b, hk, skv, d, dtype=torch.bfloat16)
    v, out, dout = torch.zeros_like(k), torch.zeros_like(q), torch.zeros(b, h, sq, d, dtype=torch.bfloat16)
    lse = torch.zeros(b, h, sq)
    lay = backward_layout(b200c.default_backward_schedule(128))
    lp = launch_plan(lay, b, h, hk, sq, skv)
    dq, dk, dv = torch.zeros(b, h, sq, d, dtype=torch.bfloat16), torch.zeros_like(k), torch.zeros_like(k)
    bufs = [torch.zeros(b, h, lp.seq_pad), torch.zeros(b, h, lp.seq_pad), torch.zeros(b, h, lp.seq_pad, d)]
    maps = [bytes([i]) * 128 for i in range(4)]
    pre, main, post = param_values(lp, q, k, v, out, dout, lse, dq, dk, dv, *bufs, maps, causal=True, scale=0.125)
    for spec, values in ((PRE_SPEC, pre), (MAIN_SPEC, main), (POST_SPEC, post)):
        assert [n for n, _ in spec] == list(values)  # every parameter, in the entry's order
        blk = ParamBlock(spec, values)
        back = decode(spec, blk.array_addr)
        assert back == values
    assert (pre["out_stride_b"], pre["out_stride_h"], pre["out_stride_s"]) == (sq * h * d, d, h * d)
    assert (main["seq_pad"], main["causal"], main["heads_kv"], main["softmax_scale"]) == (128, 1, hk, 0.125)
    assert main["tmap_do"] == maps[3] and main["dq_accum"] == bufs[2].data_ptr()
    assert (post["dq_stride_s"], post["seq_q"]) == (d, sq)


# ---- the warp roles' IR and the barrier-protocol verifier (mutation tests, as the forward's) ----


def _ir(d=128):
    from b200c.codegen.sm90.backward import backward_kernel_ir

    return backward_kernel_ir(b200c.default_backward_schedule(d))


def _edit(ir, role, fn):
    """``ir`` with every node of role ``role`` passed through ``fn`` (node -> node, a tuple of nodes, or None
    to drop it), recursively."""
    import msgspec

    def walk(nodes):
        out = []
        for n in nodes:
            if getattr(n, "body", ()):
                n = msgspec.structs.replace(n, body=walk(n.body))
            r = fn(n)
            if r is None:
                continue
            out.extend(r if isinstance(r, tuple) else (r,))
        return tuple(out)

    roles = tuple(msgspec.structs.replace(r, body=walk(r.body)) if r.name == role else r for r in ir.roles)
    return msgspec.structs.replace(ir, roles=roles)


def _broken(ir, match):
    from b200c.codegen.verify import verify
    from b200c.errors import ProtocolError

    with pytest.raises(ProtocolError, match=match):
        verify(ir, cached=False)


def test_the_protocol_verifier_passes_the_generated_roles():
    from b200c.codegen.verify import problem_sizes, verify

    ir = _ir()
    verify(ir, cached=False)
    # visits per work item around the two-stage ring: 1, 2, 3 and 5 (every stage's phase wraps twice)
    assert {n for n, _ in problem_sizes(ir.plan)} >= {1, 2, 3, 4, 5}


def test_verifier_catches_a_dropped_stage_release():
    from b200c.codegen.ir import Arrive

    ir = _edit(_ir(), "consumer", lambda n: None if isinstance(n, Arrive) and n.barrier == "q_empty" else n)
    _broken(ir, "q_empty")


def test_verifier_catches_a_wrong_parity():
    import msgspec

    from b200c.codegen.ir import PhaseRef, Wait

    def fn(n):
        if isinstance(n, Wait) and n.barrier == "q_empty":
            return msgspec.structs.replace(n, phase=PhaseRef("(v / Q_STAGES) & 1", storage="value"))
        return n

    _broken(_edit(_ir(), "load", fn), "q_empty")


def test_verifier_catches_a_producer_that_does_not_wait():
    from b200c.codegen.ir import Wait

    _broken(_edit(_ir(), "load", lambda n: None if isinstance(n, Wait) else n), "nobody waits on barrier q_empty")


def test_verifier_catches_wrong_transaction_bytes():
    import msgspec

    from b200c.codegen.sm90.ir import BulkLoad

    ir = _edit(_ir(), "load", lambda n: msgspec.structs.replace(n, tx_bytes="128") if isinstance(n, BulkLoad) else n)
    _broken(ir, "q_full")


def test_verifier_catches_a_missing_named_barrier():
    from b200c.codegen.ir import NamedBarSync

    _broken(_edit(_ir(), "consumer", lambda n: None if isinstance(n, NamedBarSync) else n),
            "nobody uses named barrier ds_ready")


def test_verifier_catches_a_doubled_release():
    from b200c.codegen.ir import Arrive

    ir = _edit(_ir(), "consumer", lambda n: (n, n) if isinstance(n, Arrive) and n.barrier == "q_empty" else n)
    _broken(ir, "q_empty")


def test_emit_ir_prints_the_roles():
    text = _ir().text()
    assert text.startswith("kernel b200c_attention_backward  // hopper_backward_d128")
    assert "role consumer (q=0: warps 4-7, q=1: warps 8-11, setmaxnreg 240)" in text
    assert "bar.sync ds_ready" in text and "arrive q_empty[st] by warp" in text


# ---- a backward launch under the fake driver (no device) --------------------------------------


def test_fake_driver_backward_launch_follows_the_decomposition():
    import torch

    from b200c.runtime import fake_driver
    from b200c.runtime.backward_launch import attention_backward

    b, h, hk, sq, skv, d = 2, 4, 2, 100, 300, 128
    q = torch.randn(b, sq, h, d).to(torch.bfloat16).transpose(1, 2)  # a BHSD view of BSHD memory
    k, v = (torch.randn(b, hk, skv, d).to(torch.bfloat16) for _ in range(2))
    out, dout = torch.randn(b, h, sq, d).to(torch.bfloat16), torch.randn(b, h, sq, d).to(torch.bfloat16)
    lse = torch.randn(b, h, sq)
    lay = backward_layout(b200c.default_backward_schedule(128))
    with fake_driver.install(target="sm90a") as fd:
        dq, dk, dv = attention_backward(q, k, v, out, dout, lse, causal=True, scale=0.125)
    pre, main, post = fd.launches
    seq_pad = 128  # 100 rows in Q tiles of 64
    # preprocess and postprocess: one CTA per (Q tile, head, sequence); main: one per work item
    assert (pre.grid, pre.grid_yz, pre.block) == (2, (h, b), 128) and (post.grid, post.grid_yz) == (2, (h, b))
    dec = BackwardDecomposition(64, 128)
    assert (main.grid, main.grid_yz, main.block, main.smem) == (dec.num_work(b, hk, skv), (1, 1), 384, lay.smem_bytes)
    assert main.grid == b * hk * 3  # 300 keys in K/V tiles of 128
    p = main.params
    assert (p["batch"], p["heads"], p["heads_kv"], p["seq_q"], p["seq_kv"], p["seq_pad"], p["causal"]) == \
        (b, h, hk, sq, skv, seq_pad, 1)
    assert p["softmax_scale"] == 0.125 and p["dk"] == dk.data_ptr() and p["dv"] == dv.data_ptr()
    assert p["dk_stride_s"] == d and p["dq_accum"] == post.params["dq_accum"] == pre.params["dq_accum"]
    assert pre.params["lse"] == lse.data_ptr() and pre.params["seq_q"] == sq and post.params["dq"] == dq.data_ptr()
    # the four tensor maps (q, k, v, dO): dims {D, S, H, B}, boxes of 64 columns x block_m / block_n rows
    encodes = fd.encodes
    assert [(e[1], e[3], e[4]) for e in encodes] == [((d, sq, h, b), 64, 64), ((d, skv, hk, b), 64, 128),
                                                      ((d, skv, hk, b), 64, 128), ((d, sq, h, b), 64, 64)]
    assert encodes[0][0] == q.data_ptr() and encodes[2][0] == v.data_ptr()
    assert encodes[0][2][0] == h * d * 2  # q's row stride in bytes: BSHD memory read through the view
    assert [p[n][:8] for n in ("tmap_q", "tmap_k", "tmap_v", "tmap_do")] == \
        [e[0].to_bytes(8, "little") for e in encodes]  # each map is the one encoded for its tensor
    with fake_driver.install(target="sm100a"):  # a compute capability 10.0 device: no backward design there
        with pytest.raises(b200c.BackwardNotSupportedError, match="compute capability 10.0"):
            attention_backward(q, k, v, out, dout, lse)


def test_fake_driver_d256_backward_launch():
    """Head dim 256: one CTA per 64-key K/V tile (300 keys: 5 tiles), 215592 B of shared memory, K/V boxes of
    64 columns x 64 rows, and the kernel module generated from the 256 schedule."""
    import torch

    from b200c.runtime import fake_driver
    from b200c.runtime.backward_launch import attention_backward

    b, h, hk, sq, skv, d = 2, 4, 2, 100, 300, 256
    q, out, dout = (torch.randn(b, h, sq, d).to(torch.bfloat16) for _ in range(3))
    k, v = (torch.randn(b, hk, skv, d).to(torch.bfloat16) for _ in range(2))
    with fake_driver.install(target="sm90a") as fd:
        dq, dk, dv = attention_backward(q, k, v, out, dout, torch.randn(b, h, sq))
    pre, main, post = fd.launches
    assert (main.grid, main.block, main.smem) == (b * hk * 5, 384, 215592)
    assert (pre.grid, pre.grid_yz) == (2, (h, b)) and dq.shape == q.shape and dk.shape == k.shape
    assert [(e[1], e[3], e[4]) for e in fd.encodes] == [((d, sq, h, b), 64, 64), ((d, skv, hk, b), 64, 64),
                                                         ((d, skv, hk, b), 64, 64), ((d, sq, h, b), 64, 64)]


def test_deterministic_module_takes_turns_in_kv_tile_order():
    """dq_reduction="deterministic" (FA3's Deterministic): the visit's dQ addition sits inside the Q tile's
    turn (wait for it, meet, add, meet, take it) with one named barrier per warpgroup; at head dim 64 the
    warpgroups of a CTA also take turns (they add into the same dQ elements), at 128 and 256 not (their
    columns differ; the built-in 64's 128-row visits split dQ by rows). The launch passes an int32
    (B, H, S_pad / block_m) counter buffer that the preprocess zeroes."""
    import torch

    from b200c.codegen.sm90.backward import backward_kernel_ir
    from b200c.runtime import fake_driver
    from b200c.runtime.backward_launch import attention_backward

    m64 = _schedule(64, True).replace(block_m=64)  # dQ split by keys: both warpgroups add into the same elements
    for sched, ds_ready, by_wg in ((_schedule(128, True), (1, 1, 256), False), (m64, (1, 2, 128), True),
                                   (_schedule(64, True), (1, 1, 256), False), (_schedule(256, True), (1, 1, 256), False)):
        lay = backward_layout(sched)
        assert lay.deterministic and lay.dq_turn_wait_by_wg is by_wg
        ir = backward_kernel_ir(sched)
        named = {nb.name: (nb.first_id, nb.count, nb.threads) for nb in ir.plan.named_barriers}
        assert named == {"ds_ready": ds_ready, "dq_turn": (ds_ready[0] + ds_ready[1], 2, 128)}
        src = generate_backward(sched).source
        add = src.index("red_add_v4(dq_thread")
        assert src.rindex("dq_turn_wait(", 0, add) < src.rindex("named_bar_sync(NBAR_DQ_TURN", 0, add) < add
        assert add < src.index("named_bar_sync(NBAR_DQ_TURN", add) < src.index("dq_turn_done(", add)
        assert f"DQ_TURN_WAIT_BY_WG = {'true' if by_wg else 'false'}" in src
    assert "dq_turn_wait(c." not in generate_backward(_schedule(128)).source  # the atomic module: no turns
    b, h, hk, sq, skv, d = 2, 4, 2, 100, 300, 64
    q, out, dout = (torch.randn(b, h, sq, d).to(torch.bfloat16) for _ in range(3))
    k, v = (torch.randn(b, hk, skv, d).to(torch.bfloat16) for _ in range(2))
    lse = torch.randn(b, h, sq)
    with fake_driver.install(target="sm90a") as fd:
        attention_backward(q, k, v, out, dout, lse, deterministic=True)
        attention_backward(q, k, v, out, dout, lse)
        torch.use_deterministic_algorithms(True)
        try:
            attention_backward(q, k, v, out, dout, lse)  # torch's switch picks the deterministic module too
        finally:
            torch.use_deterministic_algorithms(False)
    (pre, main, _), (pre2, main2, _), (pre3, main3, _) = (fd.launches[i:i + 3] for i in (0, 3, 6))
    assert main.params["dq_semaphore"] == pre.params["dq_semaphore"] != 0  # one buffer: zeroed, then counted
    assert main2.params["dq_semaphore"] == pre2.params["dq_semaphore"] == 0  # atomic: null
    assert main3.params["dq_semaphore"] == pre3.params["dq_semaphore"] != 0
    assert pre.grid == 1 and pre.grid_yz == (h, b)  # one counter per (Q tile, head, sequence): 1 x 4 x 2 (128 rows)


def test_fake_driver_varlen_backward_launch():
    """Varlen (issue 48 step 3): packed (total, H, D) tensors read through (1, H, total, D) views, one TMA
    "batch"; B is the number of sequences and S_q / S_kv the longest, every batch stride 0 (the kernels
    address packed rows from cu_seqlens); an LSE of (H, total_q) as the varlen forward returns it."""
    import torch

    from b200c.runtime import fake_driver
    from b200c.runtime.backward_launch import attention_backward_varlen

    lens_q, lens_k, h, hk, d = [5, 0, 130], [7, 3, 300], 4, 2, 64
    tq, tk = sum(lens_q), sum(lens_k)
    cu_q = torch.tensor([0, 5, 5, 135], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 10, 310], dtype=torch.int32)
    q, out, dout = (torch.randn(tq, h, d).to(torch.bfloat16) for _ in range(3))
    k, v = (torch.randn(tk, hk, d).to(torch.bfloat16) for _ in range(2))
    lse = torch.randn(h, tq)
    with fake_driver.install(target="sm90a") as fd:
        dq, dk, dv = attention_backward_varlen(q, k, v, out, dout, lse, cu_q, cu_k, 130, 300, causal=True)
        with pytest.raises(b200c.LaunchError, match="lse must be FP32"):
            attention_backward_varlen(q, k, v, out, dout, lse.t(), cu_q, cu_k, 130, 300)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    pre, main, post = fd.launches
    assert main.grid == 3 * hk * 3  # 3 sequences x 2 K/V heads x ceil(300 / 128) K/V tiles
    assert (pre.grid, pre.grid_yz) == (2, (h, 3))  # ceil(130 / 128) Q tiles of the longest sequence
    p = main.params
    assert (p["batch"], p["seq_q"], p["seq_kv"], p["seq_pad"], p["causal"]) == (3, 130, 300, 256, 1)
    assert (p["cu_seqlens_q"], p["cu_seqlens_k"]) == (cu_q.data_ptr(), cu_k.data_ptr())
    assert (p["dk_stride_b"], p["dk_stride_h"], p["dk_stride_s"]) == (0, d, hk * d)
    assert pre.params["cu_seqlens_q"] == post.params["cu_seqlens_q"] == cu_q.data_ptr()
    assert (pre.params["lse_stride_b"], pre.params["lse_stride_h"], pre.params["lse_stride_s"]) == (0, tq, 1)
    assert (pre.params["out_stride_b"], pre.params["out_stride_s"], post.params["dq_stride_b"]) == (0, h * d, 0)
    assert [e[1] for e in fd.encodes] == [(d, tq, h, 1), (d, tk, hk, 1), (d, tk, hk, 1), (d, tq, h, 1)]


def test_launch_layer_input_checks():
    import torch

    from b200c.errors import LaunchError
    from b200c.runtime import fake_driver
    from b200c.runtime.backward_launch import _strides_ok, attention_backward

    q = torch.zeros(1, 2, 64, 128, dtype=torch.bfloat16)
    # a size-1 dimension's stride is never used: an odd one is fine (no copy); stride 0 elsewhere is not
    odd = torch.zeros(2, 64, 128, dtype=torch.bfloat16).as_strided((1, 2, 64, 128), (3, 64 * 128, 128, 1))
    assert _strides_ok(odd) and not _strides_ok(q.expand(1, 2, 64, 128).as_strided((1, 2, 64, 128), (0, 0, 128, 1)))
    with fake_driver.install(target="sm90a"):
        attention_backward(odd, q, q, q, q, torch.zeros(1, 2, 64))  # accepted as it is
        with pytest.raises(LaunchError, match="lse is on meta and q on cpu"):
            attention_backward(q, q, q, q, q, torch.zeros(1, 2, 64, device="meta"))


def test_varlen_backward_launch_rules():
    """Found by review: a dO of stride 0 (the gradient of out.sum()) is copied before the kernels' vector
    loads read it; sequences longer than max_seqlen are refused by name (as the forward's check), not read
    past the buffers; no keys or no queries anywhere: zero gradients without a launch."""
    import torch

    from b200c.runtime import fake_driver
    from b200c.runtime.backward_launch import attention_backward_varlen

    h, d = 2, 128
    cu = torch.tensor([0, 100, 300], dtype=torch.int32)
    q, out = (torch.randn(300, h, d).to(torch.bfloat16) for _ in range(2))
    lse = torch.randn(h, 300)
    dout = torch.ones(1, 1, 1).to(torch.bfloat16).expand(300, h, d)  # stride (0, 0, 0)
    with fake_driver.install(target="sm90a") as fd:
        attention_backward_varlen(q, q, q, out, dout, lse, cu, cu, 200, 200)
        (pre, _, _) = fd.launches
        assert (pre.params["dout_stride_h"], pre.params["dout_stride_s"]) != (0, 0)  # a copy, not stride 0
        with pytest.raises(b200c.LaunchError, match="max_seqlen"):
            attention_backward_varlen(q, q, q, out, out, lse, cu, cu, 150, 200)  # a sequence of 200 rows
        empty = torch.tensor([0, 0, 0], dtype=torch.int32)
        grads = attention_backward_varlen(q, q, q, out, out, lse, cu, empty, 200, 0)
        assert len(fd.launches) == 3 and all(bool((g == 0).all()) for g in grads)  # no new launch, zeros


@pytest.mark.nvcc
def test_column_split_at_head_dim_128_compiles(tmp_path):
    """dK and dV split by columns is not only head dim 256's: at 128 with block_n 64 each warpgroup keeps 64
    columns of every key (its B operands one slice into Q and dO), and the module compiles as the built-in
    ones do (0 spill bytes, no serialized wgmma)."""
    from b200c.nvcc import compile_cuda

    s = b200c.default_backward_schedule(128).replace(block_n=64, name="d128_n64")
    lay = backward_layout(s)
    assert (lay.kv_split, lay.kv_cols, lay.kv_wg_col_bytes, lay.wg_key_stride, lay.dq_split, lay.dk_before_dq) == \
        ("columns", 64, 64 * 128, 0, "columns", False)
    res = compile_cuda(generate_backward(s).source, tmp_path / "bwd.cubin", "cubin", "sm_90a")
    r = res.resources(MAIN_KERNEL)
    assert r["spill_bytes"] == 0 and r["stack_frame"] == 0 and "(C751" not in res.log, res.log


def test_dq_store_bulk_where_the_dq_region_fits():
    """Head dims 64 and 128 (atomic): each warpgroup's dQ goes to its dq region and one thread adds it with a TMA
    bulk reduce-add; that thread waits for the previous one to have read the region before ds_ready (which
    every thread of the warpgroup passes before writing it again) and for all of them before the CTA exits.
    Head dim 256 (no room: 215592 B without the region, 65536 more needed) and deterministic dQ keep
    red.global.add.v4 from every thread."""
    from b200c.codegen.backward_plan import plan_backward

    for d, det, store in ((64, False, "bulk"), (128, False, "bulk"), (256, False, "red"), (64, True, "red"),
                          (128, True, "red"), (256, True, "red")):
        assert backward_layout(_schedule(d, det)).dq_store == store, (d, det)
        assert f"dQ added into dq_accum by {'a TMA bulk' if store == 'bulk' else 'red.global'}" in \
            plan_backward(_schedule(d, det)).describe()
    assert plan_backward(_schedule(256, False)).smem_bytes + 64 * 256 * 4 > 232448
    # one Q/dO stage at 256 leaves room for the region, but its visit completes dK before dQ (dk_before_dq),
    # the bulk visit's order the other way round: red.global.add, and the kernel generates
    one = _schedule(256, False).replace(q_stages=1)
    assert plan_backward(one).dk_first and backward_layout(one).dq_store == "red"
    assert "red_add_v4(dq_thread" in generate_backward(one).source
    src = generate_backward(_schedule(128, False)).source
    body = src[src.index("__device__ __forceinline__ void role_consumer"):src.index("// ==== end section: role consumer")]
    free = body.index("bulk_wait_read<0>();")
    assert free < body.index("named_bar_sync(NBAR_DS_READY") < body.index("wgmma_dq(")
    stage = body.index("st.shared.v4.f32")
    # FA3's order: dK's wgmmas queued behind dQ's, dQ staged and added while they run, then the stage freed
    dk = body.index("wgmma_kv(dk, ds")
    assert body.index("wgmma_dq(") < dk < body.index("wgmma_wait<1>();  // dV and dQ done", dk) < stage < \
        body.index("fence_proxy_async_smem();", stage) < body.index("named_bar_sync(NBAR_DQ_FULL") < \
        body.index("bulk_reduce_add_f32(") < \
        body.index("wgmma_wait<0>();  // dK done") < body.index("BAR_Q_EMPTY") < body.index("bulk_wait<0>();")
    assert body.count("wgmma_kv(dk, ds") == 1
    assert "red_add" not in body
    assert "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32" in src
    for d, det in ((256, False), (128, True)):
        src = generate_backward(_schedule(d, det)).source
        assert "red_add_v4(dq_thread" in src and "bulk_reduce_add_f32(" not in src.split("section: role consumer")[1]


def test_d64_128_by_128_splits_dq_by_rows():
    """FA3's tiles at head dim 64 (128 query rows x 128 keys per visit): S^T and dP^T are 64 keys x 128 rows per
    warpgroup (64 registers each), so P^T is packed and dV issued after dS^T is made (P^T's 32 registers not live
    beside them); the dS^T tile is two 64-row slices of 128 keys x 128 B and warpgroup w computes dQ rows
    [64 w, 64 w + 64) from slice w over all 128 keys (every warpgroup's dS^T rows: one barrier across them), so
    no dQ element is added twice; dq_accum's part w holds those rows."""
    from b200c.codegen.backward_plan import plan_backward
    from b200c.codegen.sm90.backward import backward_kernel_ir

    s = b200c.default_backward_schedule(64).replace(name="d64_m128", block_m=128)
    lay = backward_layout(s)
    kb, qb = 128 * 64 * 2, 128 * 64 * 2  # a 128-key K tile, a 128-row Q tile (64 columns)
    offsets = {name: off for name, off, _, _ in lay.regions}
    ds = 2 * kb + 4 * qb  # 98304
    assert offsets == {"k": 0, "v": kb, "q": 2 * kb, "do": 2 * kb + 2 * qb, "ds": ds, "dq": ds + 2 * 128 * 128 * 2,
                       "lse": ds + 65536 + 128 * 64 * 4, "dpsum": ds + 65536 + 32768 + 1024,
                       "barriers": ds + 65536 + 32768 + 2048}
    assert (lay.dq_split, lay.dq_cols, lay.dq_keys, lay.dq_wg_row_bytes, lay.ds_slice_bytes, lay.dq_wg_part) == \
        ("rows", 64, 128, 128 * 128, 128 * 128, 1)
    assert (lay.dq_store, lay.dv_after_ds, lay.dk_before_dq) == ("bulk", True, False)
    plan = plan_backward(s)
    assert dict(plan.acc_parts) == {"dK + dV": 64, "S + dP": 128, "P^T + dS^T": 64, "dQ": 32}
    assert "dQ split by rows" in plan.describe() and "dV issued after dS^T" in plan.describe()
    assert not plan_backward(b200c.default_backward_schedule(128)).dv_late  # 208 of 240: P^T packed early
    named = {nb.name: (nb.first_id, nb.count, nb.threads) for nb in backward_kernel_ir(s).plan.named_barriers}
    assert named == {"ds_ready": (1, 1, 256), "dq_full": (2, 2, 128)}
    src = generate_backward(s).source
    body = src[src.index("__device__ __forceinline__ void role_consumer"):src.index("// ==== end section: role consumer")]
    # dV after the dS^T loop, which packs P^T; the dS^T store picks the row's slice
    assert body.index("wgmma_wait<0>();  // dP^T done") < body.index("p[r / 2] = pack_bf16x2(s[r], s[r + 1])") < \
        body.index("wgmma_kv(dv, p") < body.index("wgmma_dq(")
    assert "constexpr uint32_t DQ_WG_ROW_BYTES = 16384;" in src and "wgmma_ss_n<128>" in src
    assert "constexpr int DQ_PART_ROW_STEP = 64;" in src and "constexpr int DQ_PART_COL_STEP = 0;" in src
    d128 = generate_backward(b200c.default_backward_schedule(128)).source  # split by columns: no row slices
    assert "constexpr uint32_t DQ_WG_ROW_BYTES = 0;" in d128 and "constexpr int DQ_PART_ROW_STEP = 0;" in d128
    assert "constexpr int DQ_PART_COL_STEP = DQ_COLS;" in d128


@pytest.mark.nvcc
@pytest.mark.parametrize("deterministic", [False, True])
def test_d64_128_by_128_compiles_without_spills(tmp_path, deterministic):
    from b200c.nvcc import compile_cuda

    s = b200c.default_backward_schedule(64).replace(name="d64_m128", block_m=128)
    g = generate_backward(s.replace(dq_reduction="deterministic") if deterministic else s)
    res = compile_cuda(g.source, tmp_path / "bwd.cubin", "cubin", "sm_90a")
    r = res.resources(MAIN_KERNEL)
    assert r["spill_bytes"] == 0 and r["stack_frame"] == 0 and "(C751" not in res.log, res.log


def test_attention_backward_is_public_and_takes_a_schedule_file(tmp_path):
    """From a new-user trial: a BackwardSchedule of one's own could only run through an internal function, and
    b200c.attention(schedule=BackwardSchedule) said only 'must be a b200c.Schedule'. b200c.attention_backward
    is public, takes a schedule file, refuses a forward Schedule by name, and attention's error points to it."""
    import torch

    from b200c.runtime import fake_driver

    b, h, s, d = 1, 2, 64, 128
    q, k, v, out, dout = (torch.randn(b, h, s, d).to(torch.bfloat16) for _ in range(5))
    lse = torch.randn(b, h, s)
    path = Path(__file__).resolve().parents[1] / "examples" / "backward" / "hopper_backward_d128.py"
    with fake_driver.install(target="sm90a") as fd:
        dq, dk, dv = b200c.attention_backward(q, k, v, out, dout, lse, schedule=str(path))
        assert len(fd.launches) == 3 and dq.shape == q.shape
        with pytest.raises(b200c.ScheduleError, match="must be a b200c.BackwardSchedule or the path of a file"):
            b200c.attention_backward(q, k, v, out, dout, lse, schedule=b200c.default_schedule(128, target="sm90a"))
        fwd = Path(__file__).resolve().parents[1] / "examples" / "07_compute_pipeline.py"
        with pytest.raises(b200c.ScheduleError, match="07_compute_pipeline.py' defines a Schedule \\(a forward"):
            b200c.attention_backward(q, k, v, out, dout, lse, schedule=str(fwd))
        with pytest.raises(b200c.ScheduleError, match=r"call b200c.attention_backward\(q, k, v, out, dout, lse"):
            b200c.attention(q, k, v, schedule=b200c.default_backward_schedule(128), target="sm90a")
        with pytest.raises(b200c.ScheduleError, match=r"attention_backward\(q, k, v, out, dout, lse, schedule=path\)"):
            b200c.attention(q, k, v, schedule=str(path), target="sm90a")


def test_attention_backward_runs_a_schedule_file_once(tmp_path, monkeypatch):
    """attention_backward(schedule=path) ran the file on every call (a training loop's every step); it is
    now loaded once, and again only after an edit, like b200c.attention(schedule=path)."""
    import os

    import torch

    from b200c.runtime import fake_driver, schedule_files

    f = tmp_path / "my_bwd.py"
    f.write_text("import b200c\nschedule = b200c.default_backward_schedule(128).replace(name='mine')\n")
    old = os.stat(f).st_mtime_ns - 10 * 10**9  # well in the past: no content hashing either
    os.utime(f, ns=(old, old))
    b, h, s, d = 1, 2, 64, 128
    q, k, v, out, dout = (torch.randn(b, h, s, d).to(torch.bfloat16) for _ in range(5))
    lse = torch.randn(b, h, s)
    runs = []
    real = schedule_files._load_backward
    monkeypatch.setattr(schedule_files, "_load_backward", lambda p: runs.append(p) or real(p))
    with fake_driver.install(target="sm90a") as fd:
        for _ in range(3):
            b200c.attention_backward(q, k, v, out, dout, lse, schedule=str(f))
        assert len(runs) == 1 and len(fd.launches) == 9
        f.write_text("import b200c\nschedule = b200c.default_backward_schedule(128).replace(name='mine', "
                     "dq_reduction='deterministic')\n")
        os.utime(f, ns=(old + 10**9, old + 10**9))
        b200c.attention_backward(q, k, v, out, dout, lse, schedule=str(f))
        assert len(runs) == 2
    assert schedule_files.backward_schedule_of_file(str(f)).dq_reduction == "deterministic"
    with pytest.raises(b200c.ScheduleError, match="defines a Schedule"):
        schedule_files.backward_schedule_of_file(Path(__file__).resolve().parents[1] / "examples" / "07_compute_pipeline.py")
