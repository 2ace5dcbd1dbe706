"""The parameter block is packed from the kernel's signature by name (b200c.codegen.signature ->
LaunchInfo.params); the grid rule and the pack_heads rule (CPU only)."""
from __future__ import annotations

import ctypes
import dataclasses

import pytest
import torch

import b200c
from b200c.codegen.signature import ATTENTION_PARAMS
from b200c.errors import LaunchError
from b200c.runtime import fake_driver, launcher, op
from b200c.runtime.params import KINDS, ParamBlock, decode, layout

BF16 = torch.bfloat16
SCHED = b200c.Schedule(name="params_test")
SPEC = tuple((p.name, p.kind) for p in ATTENTION_PARAMS)


def sample_values(spec=SPEC):
    vals = {}
    for i, (name, kind) in enumerate(spec):
        if kind == "tensor_map":
            vals[name] = bytes([i]) * 128
        elif kind == "f32":
            vals[name] = 0.5 + i
        else:
            vals[name] = 1000 + i
    return vals


# ---- the block ----------------------------------------------------------------------


def test_every_parameter_at_its_natural_alignment_in_signature_order():
    offsets, size = layout(SPEC)
    assert list(offsets) == sorted(offsets) and len(set(offsets)) == len(offsets)
    for (name, kind), off in zip(SPEC, offsets):
        assert off % KINDS[kind][1] == 0, name
    blk = ParamBlock(SPEC, sample_values())
    ptrs = (ctypes.c_void_p * len(SPEC)).from_address(blk.array_addr)
    for (name, kind), p in zip(SPEC, ptrs):
        assert p % KINDS[kind][1] == 0, name  # absolute addresses too (tensor maps: 64 B)
    assert decode(SPEC, blk.array_addr) == {n: (v if not isinstance(v, float) else pytest.approx(v))
                                            for n, v in sample_values().items()}


def test_slots_write_through_to_the_launch_array():
    blk = ParamBlock(SPEC, sample_values())
    blk.slot("out").value = 0xDEADBEEF0
    blk.slot("softmax_scale").value = 0.25
    d = decode(SPEC, blk.array_addr)
    assert d["out"] == 0xDEADBEEF0 and d["softmax_scale"] == 0.25
    with pytest.raises(LaunchError, match="tensor map, not a scalar"):
        blk.slot("tmap_q")
    with pytest.raises(LaunchError, match="no parameter 'window'"):
        blk.slot("window")


def test_a_new_parameter_needs_only_its_value():
    spec = SPEC[:-1] + (("window_left", "i32"),) + SPEC[-1:]
    vals = sample_values(spec)
    blk = ParamBlock(spec, vals)  # kept alive while decoded
    d = decode(spec, blk.array_addr)
    assert d["window_left"] == vals["window_left"] and d["softmax_scale"] == pytest.approx(vals["softmax_scale"])


def test_block_errors_name_the_parameter():
    vals = sample_values()
    del vals["heads_kv"]
    with pytest.raises(LaunchError, match="kernel parameter 'heads_kv' \\(i32\\) has no value"):
        ParamBlock(SPEC, vals)
    with pytest.raises(LaunchError, match="kernel parameter 'x' has kind 'u16', unknown"):
        layout((("x", "u16"),))
    vals = sample_values()
    vals["batch"] = 1 << 31
    with pytest.raises(LaunchError, match="'batch' \\(i32\\) = 2147483648 does not fit"):
        ParamBlock(SPEC, vals)
    vals = sample_values()
    vals["tmap_k"] = b"short"
    with pytest.raises(LaunchError, match="'tmap_k': expected 128 bytes"):
        ParamBlock(SPEC, vals)


def test_launcher_packs_by_the_kernels_own_order(monkeypatch):
    """A kernel whose signature lists its parameters in another order gets each value at its place."""
    real = op.kernel_for_generated

    with fake_driver.install() as fd:
        fake_load = op.kernel_for_generated

        def reordered(generated, target, device):
            info = generated.launch
            gen = dataclasses.replace(generated, launch=dataclasses.replace(info, params=tuple(reversed(info.params))))
            return fake_load(gen, target, device)

        monkeypatch.setattr(op, "kernel_for_generated", reordered)
        q = torch.randn(1, 4, 200, 128).to(BF16)
        k = torch.randn(1, 2, 300, 128).to(BF16)
        out, lse = b200c.attention(q, k, k, schedule=SCHED, causal=True, return_lse=True, softmax_scale=0.3)
        (L,) = fd.launches
        # the attention parameters, then the work decomposition's (b200c.codegen.work.params: the varlen item order)
        assert list(L.params) == [n for n, _ in reversed(SPEC + (("item_order", "i32_ptr"),))]
        assert L.out_ptr == out.data_ptr() and L.lse_ptr == lse.data_ptr()
        assert L.sizes == (1, 4, 200, 300) and L.params["heads_kv"] == 2 and L.params["causal"] == 1
        assert L.scale == pytest.approx(0.3)
    assert op.kernel_for_generated is real


# ---- grid and work items (codegen/launch.py) -------------------------------------------


def info_of(**changes):
    return op.generated_kernel(SCHED.replace(**changes).to_json()).launch


@pytest.mark.parametrize("seq_q,pack,want", [
    (1, False, 1), (128, False, 1), (129, False, 1), (256, False, 1), (257, False, 2), (1000, False, 4),
    (1, True, 1), (129, True, 2), (1000, True, 8),
])
def test_num_work_items(seq_q, pack, want):
    two = b200c.load_schedule_file(b200c.__path__[0] + "/../examples/18_tma_l2_promotion.py").replace(name="w")
    info = op.generated_kernel(two.to_json()).launch
    assert info.q_stages == 2
    B, H = 3, 8
    per = (H // 2) if pack else H
    assert info.num_work_items(B, H, seq_q, pack) == B * per * want
    assert info.grid(B, H, seq_q, 132, pack) == min(B * per * want, 132)  # persistent


def test_non_persistent_grid_is_every_work_item():
    info = info_of()
    assert not info.persistent and info.q_stages == 1
    assert info.grid(2, 3, 4095, 132) == 2 * 3 * 32


# ---- pack_heads rule ---------------------------------------------------------------------


@pytest.mark.parametrize("q_stages,h,h_kv,s,causal,varlen,want", [
    (1, 8, 1, 100, True, False, False),     # one Q stage: nothing to pack
    (2, 8, 8, 100, True, False, False),     # MHA: group 1 is not a multiple of 2
    (2, 6, 2, 100, False, False, False),    # group 3
    (2, 8, 2, 100, False, False, True),     # S_q <= 128: tiles mode would leave stage 1 idle
    (2, 8, 2, 300, False, False, True),     # 3 Q tiles: the last item half idle
    (2, 8, 2, 256, False, False, False),    # whole items: same work, keep tiles together
    (2, 8, 2, 256, True, False, True),      # causal: packed heads share one diagonal
    (2, 8, 2, 256, False, True, True),      # varlen: sequences of any length
    (2, 8, 1, 4096, True, False, True),     # MQA
])
def test_pack_heads_rule(q_stages, h, h_kv, s, causal, varlen, want):
    assert launcher.pack_heads(q_stages, h, h_kv, s, causal, varlen) is want


def test_pack_heads_reaches_the_kernel():
    two = b200c.load_schedule_file(b200c.__path__[0] + "/../examples/18_tma_l2_promotion.py")
    with fake_driver.install(num_sms=1000) as fd:
        q = torch.randn(2, 8, 100, 128).to(BF16)
        k = torch.randn(2, 2, 100, 128).to(BF16)
        b200c.attention(q, k, k, schedule=two)
        mha = torch.randn(2, 8, 100, 128).to(BF16)
        b200c.attention(mha, mha, mha, schedule=two)
        packed, tiles = fd.launches
        assert packed.params["pack_heads"] == 1 and packed.grid == 2 * 4 * 1
        assert tiles.params["pack_heads"] == 0 and tiles.grid == 2 * 8 * 1


def test_causal_packing_keeps_the_persistent_grid_balanced():
    """A causal GQA launch packs heads (one diagonal per item) unless the packed items load the persistent
    CTAs worse (launcher.pack_balances, from the work decomposition's own model): a Llama-style prefill
    (2, 16, 4096) with 8 K/V heads on the Hopper preset's 132 CTAs has its most loaded CTA at 134 K/V
    tiles packed (mean 95) against 100 unpacked, so it launches unpacked; (2, 32, 4096) stays packed
    (198 against 200)."""
    from b200c.dsl.presets import HOPPER_PRESETS

    info = op.generated_kernel(HOPPER_PRESETS[128].to_json(), "sm90a").launch
    work = info.work()
    assert launcher._max_cta_tiles(work, 2, 16, 8, 4096, 4096, 132, True) == 134
    assert launcher._max_cta_tiles(work, 2, 16, 8, 4096, 4096, 132, False) == 100
    assert launcher.pack_balances(info, 2, 16, 8, 4096, 4096, 132) is False
    assert launcher.pack_balances(info, 2, 32, 8, 4096, 4096, 132) is True
    with fake_driver.install(target="sm90a") as fd:
        k = torch.empty(2, 8, 4096, 128, dtype=BF16)
        for h in (16, 32):
            q = torch.empty(2, h, 4096, 128, dtype=BF16)
            b200c.attention(q, k, k, causal=True, target="sm90a")
            b200c.attention(q[..., :4000, :], k[..., :4000, :], k[..., :4000, :], target="sm90a")  # not causal
        causal16, dense16, causal32, dense32 = fd.launches
        assert causal16.params["pack_heads"] == 0 and causal32.params["pack_heads"] == 1
        assert dense16.params["pack_heads"] == dense32.params["pack_heads"] == 1  # 4000 rows: a part-idle item


def test_work_items_past_int32_refused():
    with fake_driver.install() as fd:
        q = torch.empty(1 << 16, 1 << 8, 1 << 14, 128, dtype=BF16, device="meta")  # 2^31 work items
        with pytest.raises(LaunchError, match="2147483648 work items exceed the kernel's limit 2\\^31-1"):
            b200c.attention(q, q, q, schedule=SCHED)
        assert not fd.launches
