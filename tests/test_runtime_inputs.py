"""Input validation, target/architecture checks and empty inputs (CPU only, no driver)."""
from __future__ import annotations

import logging

import pytest
import torch

import b200c
from b200c.errors import BuildError, LaunchError, UnsupportedDeviceError
from b200c.runtime import driver, inputs, op
from b200c.runtime.inputs import Problem, check_grid, empty_result, tma_strides, validate_inputs

BF16 = torch.bfloat16


def t(b=2, h=4, s=256, d=128, dtype=BF16, device="cpu"):
    return torch.zeros(b, h, s, d, dtype=dtype, device=device)


def valid(q, k, v):
    return validate_inputs(q, k, v, check_device=False)


# ---- accepted layouts ---------------------------------------------------------------


def test_bhsd_layout_ok():
    p = valid(t(), t(s=384), t(s=384))
    assert p == Problem(2, 4, 4, 256, 384, 128)
    assert p.needs_launch and not p.empty


def test_bshd_layout_ok_without_copy():
    x = torch.zeros(2, 256, 4, 128, dtype=BF16)  # (B, S, H, D) memory
    q = x.transpose(1, 2)
    assert not q.is_contiguous()
    assert valid(q, q, q).seq_q == 256
    assert tma_strides(q) == (4 * 128 * 2, 128 * 2, 256 * 4 * 128 * 2)


def test_size_one_dims_with_odd_strides_ok():
    base = torch.zeros(1, 1, 256, 128, dtype=BF16)
    q = base.as_strided((1, 1, 256, 128), (3, 5, 128, 1))  # strides of size-1 dims are never used
    assert valid(q, q, q).batch == 1
    assert all(s % 16 == 0 for s in tma_strides(q))


# ---- every rule ---------------------------------------------------------------------


def test_cpu_tensor_rejected_last():
    with pytest.raises(LaunchError, match="tensor q is on cpu; b200c kernels need a CUDA tensor"):
        validate_inputs(t(), t(), t())


def test_cpu_tensor_through_attention():
    with pytest.raises(LaunchError, match="tensor q is on cpu"):
        b200c.attention(t(), t(), t(), schedule=b200c.Schedule())


def test_not_a_tensor():
    with pytest.raises(LaunchError, match="k must be a torch.Tensor, got list"):
        validate_inputs(t(), [1], t())


@pytest.mark.parametrize("which", [0, 1, 2])
def test_wrong_dtype(which):
    ts = [t(), t(), t()]
    ts[which] = ts[which].to(torch.float16)
    name = "qkv"[which]
    with pytest.raises(LaunchError, match=f"tensor {name} has dtype torch.float16; b200c kernels need torch.bfloat16"):
        valid(*ts)


def test_not_4d():
    q = torch.zeros(4, 256, 128, dtype=BF16)
    with pytest.raises(LaunchError, match=r"tensor q has 3 dims \(shape \(4, 256, 128\)\)"):
        valid(q, t(), t())


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(b=3), "batch B = 3 but q has 2"),
        (dict(d=64), "head dim D = 64 but q has 128"),
    ],
)
def test_mismatched_bd(kwargs, msg):
    with pytest.raises(LaunchError, match=f"tensor k has {msg}"):
        valid(t(), t(**kwargs), t())


def test_mismatched_kv_length():
    with pytest.raises(LaunchError, match="tensor v has S = 128 but k has S = 256"):
        valid(t(), t(), t(s=128))


def test_gqa_heads():
    assert valid(t(h=8), t(h=2), t(h=2)).heads_kv == 2  # GQA
    assert valid(t(h=8), t(h=1), t(h=1)).heads_kv == 1  # MQA
    with pytest.raises(LaunchError, match="tensor v has H_kv = 4 heads but k has 2"):
        valid(t(h=8), t(h=2), t(h=4))
    with pytest.raises(LaunchError, match="q has H = 6 heads but k and v have H_kv = 4; H must be a multiple of H_kv"):
        valid(t(h=6), t(h=4), t(h=4))
    with pytest.raises(LaunchError, match="q has H = 4 heads but k and v have H_kv = 8"):
        valid(t(h=4), t(h=8), t(h=8))
    with pytest.raises(LaunchError, match="H_kv = 0"):
        valid(t(h=4), t(h=0), t(h=0))
    assert valid(t(h=0), t(h=0), t(h=0)).empty


@pytest.mark.parametrize("d", [64, 128, 256])
def test_head_dims(d):
    assert valid(t(d=d), t(d=d), t(d=d)).head_dim == d


@pytest.mark.parametrize("d", [32, 96, 192, 512])
def test_other_head_dims_refused(d):
    with pytest.raises(LaunchError, match=f"head dim D = {d}; b200c kernels support D = 64, 128 or 256"):
        valid(t(d=d), t(d=d), t(d=d))


@pytest.mark.parametrize("s_q,s_kv", [(1, 1), (63, 200), (129, 1), (1000, 4095)])
def test_any_sequence_length(s_q, s_kv):
    p = valid(t(s=s_q), t(s=s_kv), t(s=s_kv))
    assert (p.seq_q, p.seq_kv) == (s_q, s_kv) and p.needs_launch


def test_sliced_head_dim_view_rejected():
    big = t(d=129)[..., 1:]  # D = 128 starting 1 element in
    with pytest.raises(LaunchError, match="tensor q starts 1 elements into its storage"):
        valid(big, big, big)
    with pytest.raises(LaunchError, match="D = 127"):
        q = t()[..., 1:]
        valid(q, q, q)


def test_storage_offset_one_element():
    n = 2 * 4 * 256 * 128
    q = torch.zeros(n + 1, dtype=BF16)[1:].view(2, 4, 256, 128)
    assert q.storage_offset() == 1
    with pytest.raises(LaunchError, match="tensor q starts 1 elements into its storage .2 bytes., not 16-byte aligned"):
        valid(q, t(), t())


def test_misaligned_data_ptr():
    n = 1 * 2 * 128 * 128
    buf = bytearray(2 * n + 64)
    base = torch.frombuffer(buf, dtype=torch.uint8).data_ptr()
    off = (2 - base) % 16  # data_ptr % 16 == 2, storage offset 0
    v = torch.frombuffer(buf, dtype=BF16, offset=off, count=n).view(1, 2, 128, 128)
    assert v.storage_offset() == 0 and v.data_ptr() % 16 == 2
    with pytest.raises(LaunchError, match="tensor v has data_ptr 0x[0-9a-f]+, not 16-byte aligned"):
        valid(t(1, 2, 128), t(1, 2, 128), v)


def test_stride_not_multiple_of_16_bytes():
    k = torch.zeros(2, 4, 256, 130, dtype=BF16)[..., :128]
    with pytest.raises(LaunchError, match="tensor k has S stride 130 elements = 260 bytes, not a multiple of 16"):
        valid(t(), k, t())


def test_last_dim_not_contiguous():
    q = torch.zeros(2, 4, 128, 256, dtype=BF16).transpose(2, 3)
    with pytest.raises(LaunchError, match="tensor q has last-dim stride 256; the head dim must be contiguous"):
        valid(q, t(), t())


def test_stride_limit_2_pow_40():
    big = 1 << 39  # elements -> 2^40 bytes
    q = torch.empty_strided((1, 2, 128, 128), (2 * big, big, 128, 1), dtype=BF16, device="meta")
    with pytest.raises(LaunchError, match="tensor q has H stride .* bytes; TMA strides must be < 2.40"):
        valid(q, q, q)


def test_sizes_below_2_pow_31():
    s = 1 << 31
    q = torch.empty((1, 1, s, 128), dtype=BF16, device="meta")
    with pytest.raises(LaunchError, match="tensor q has S = 2147483648; must be < 2.31"):
        valid(q, q, q)


def test_grid_limit():
    check_grid((1 << 31) - 1)
    with pytest.raises(LaunchError, match="grid of 2147483648 CTAs exceeds the limit"):
        check_grid(1 << 31)


def test_fake_tensors_skip_only_data_ptr():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 4, 256, 128, dtype=BF16, device="cuda")
        assert validate_inputs(q, q, q).seq_q == 256  # CUDA device check passes on fake cuda tensors
        flat = torch.empty(2 * 4 * 256 * 128 + 8, dtype=BF16, device="cuda")
        bad = flat.as_strided((2, 4, 256, 128), (4 * 256 * 128, 256 * 128, 128, 1), 1)
        with pytest.raises(LaunchError, match="not 16-byte aligned"):
            validate_inputs(bad, q, q)


# ---- empty inputs -------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 4, 256), (2, 0, 256), (2, 4, 0)])
def test_empty_outputs(shape):
    b, h, s = shape
    q = torch.zeros(b, h, s, 130, dtype=BF16)[..., :128]  # layout rules do not apply to empty outputs
    k = t(b, h, 256)
    p = valid(q, k, k)
    assert p.empty and not p.needs_launch
    out = empty_result(q, p)
    assert out.shape == q.shape and out.numel() == 0


def test_empty_kv_gives_zeros():
    q = torch.randn(2, 4, 256, 128).to(BF16)
    k = t(s=0)
    p = valid(q, k, k)
    assert not p.empty and not p.needs_launch
    out = empty_result(q, p)
    assert out.shape == q.shape and torch.count_nonzero(out) == 0


def test_empty_inputs_do_not_launch(monkeypatch):
    monkeypatch.setattr(inputs, "_check_devices", lambda ts: None)

    def no_launch(*a, **kw):
        raise AssertionError("launched")

    monkeypatch.setattr(op, "loaded_kernel", no_launch)
    s = b200c.Schedule()
    out = b200c.attention(t(0), t(0), t(0), schedule=s)
    assert out.shape == (0, 4, 256, 128)
    out = b200c.attention(t(), t(s=0), t(s=0), schedule=s)
    assert out.shape == (2, 4, 256, 128) and torch.count_nonzero(out) == 0


# ---- targets and architectures ------------------------------------------------------


def test_arch_sm100a_on_hopper_points_to_emulate():
    with pytest.raises(UnsupportedDeviceError, match=r"needs compute capability 10\.0 .*has 9\.0.*target=\"emulate\""):
        driver.check_arch("sm100a", (9, 0), "H200")


def test_arch_emulate_needs_hopper():
    with pytest.raises(UnsupportedDeviceError, match=r"'emulate' needs compute capability 9\.0 .*has 10\.0"):
        driver.check_arch("emulate", (10, 0))


def test_auto_target(caplog):
    driver._emulate_noted = False
    assert driver.resolve_target("auto", (10, 0)).name == "sm100a"
    with caplog.at_level(logging.WARNING, logger="b200c.runtime"):
        # a B200 schedule on Hopper: auto never emulates; it says so and how to ask for it
        with pytest.raises(UnsupportedDeviceError, match=r"runs only emulated .*pass target='emulate' to run it so, "
                                                         r"or a schedule for it \(b200c.default_schedule\(head_dim, "
                                                         r"target='sm90a'\)"):
            driver.resolve_target("auto", (9, 0), "H200")
        assert driver.resolve_target("auto", (9, 0), schedule_target="sm90a").name == "sm90a"  # a Hopper schedule
        assert driver.resolve_target("emulate", (9, 0)).name == "emulate"  # asked for by name
        assert driver.resolve_target("emulate", (9, 0)).name == "emulate"
    notes = [r for r in caplog.records if "correctness only" in r.getMessage()]
    assert len(notes) == 1  # said once
    with pytest.raises(UnsupportedDeviceError, match=r"'sm90a' needs compute capability 9\.0 .*has 10\.0"):
        driver.resolve_target("sm90a", (10, 0))
    with pytest.raises(UnsupportedDeviceError, match=r"'sm90a' needs compute capability 9\.0 .*has 10\.0"):
        driver.resolve_target("auto", (10, 0), schedule_target="sm90a")  # a Hopper schedule on a B200
    with pytest.raises(UnsupportedDeviceError, match=r"compute capability 8\.9"):
        driver.resolve_target("auto", (8, 9), "L4")


def test_target_aliases_and_unknown():
    assert driver.resolve_target("sm_100", (10, 0)).name == "sm100a"
    assert driver.resolve_target("sm_90", (9, 0)).name == "sm90a"
    with pytest.raises(b200c.TargetError, match="unknown target 'sm_80'; targets: 'sm100a' .*'emulate' .*'sm90a'"):
        driver.resolve_target("sm_80", (8, 0))
    with pytest.raises(b200c.TargetError, match="unknown target 'cpu'"):
        b200c.attention(t(), t(), t(), schedule=b200c.Schedule(), target="cpu")


def test_unsupported_arch_via_fake_capability(monkeypatch):
    """The op path checks the device before generating or building anything."""
    monkeypatch.setattr(op, "device_capability", lambda dev: ((8, 0), "A100"))

    def no_build(*a, **kw):
        raise AssertionError("built")

    monkeypatch.setattr(op, "generated_kernel", no_build)
    with pytest.raises(UnsupportedDeviceError, match=r"\(A100\) of compute capability 8\.0"):
        op.loaded_kernel(b200c.Schedule().to_json(), "auto", 0)
    with pytest.raises(UnsupportedDeviceError, match=r"needs compute capability 10\.0"):
        op.loaded_kernel(b200c.Schedule().to_json(), "sm100a", 0)
