"""The block mask of a boolean mask tensor in one launch (``b200c_block_mask_ranges``, run by
b200c/runtime/mask_ranges.py) against its torch-ops model, ``block_mask.tensor_ranges``: the same
(kv_lo, full_lo, full_hi, kv_hi) rows, exactly, for random and structured masks, every broadcast
pattern, partial tiles, GQA packing, masks that are not contiguous, expanded, or not 16-byte aligned,
and more K/V tiles than the kernel's 1,024 threads scan at once. On sm90a (native) and the emulation
target's build (the sm100a source). The end-to-end attention with an SDPA bool mask is
tests/gpu/test_mods.py::test_sdpa_attn_mask."""
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if tuple(torch.cuda.get_device_capability()) != (9, 0):
        pytest.skip("the sm90a and emulate builds run on compute capability 9.0")
    return torch


def _loaded(torch, target, head_dim):
    import b200c
    from b200c.codegen import generate
    from b200c.runtime.op import kernel_for_generated
    from b200c.runtime.sdpa_mask import mod_call_of_mask

    mods = mod_call_of_mask(torch.ones(2, 2, 2, 2, dtype=torch.bool, device="cuda")).mods
    schedule = b200c.default_schedule(head_dim, target="sm90a" if target == "sm90a" else "sm100a")
    return kernel_for_generated(generate(schedule, target, mods=mods), target, torch.cuda.current_device())


def _masks(torch, gen, b, h, s_q, s_kv):
    """(name, mask) of shapes broadcastable to (b, h, s_q, s_kv)."""
    dev = "cuda"
    rnd = lambda *shape, p=0.5: torch.rand(*shape, generator=gen, device=dev) < p
    rows = torch.arange(s_q, device=dev).view(-1, 1)
    cols = torch.arange(s_kv, device=dev).view(1, -1)
    causal = (cols <= rows + s_kv - s_q).view(1, 1, s_q, s_kv)
    pad_len = torch.randint(0, s_kv + 1, (b,), generator=gen, device=dev)
    key_pad = (cols.view(1, 1, 1, -1) < pad_len.view(-1, 1, 1, 1))
    window = ((cols <= rows + s_kv - s_q) & (cols > rows + s_kv - s_q - 70)).view(1, 1, s_q, s_kv)
    out = [
        ("all true", torch.ones(1, 1, 1, s_kv, dtype=torch.bool, device=dev)),
        ("all false", torch.zeros(b, 1, 1, s_kv, dtype=torch.bool, device=dev)),
        ("random", rnd(b, h, s_q, s_kv)),
        ("dense random", rnd(b, h, s_q, s_kv, p=0.999)),
        ("random per head, broadcast rows", rnd(1, h, 1, s_kv, p=0.7)),
        ("causal", causal),
        ("key padding", key_pad),
        ("sliding window", window.expand(b, h, s_q, s_kv)),  # expanded: stride 0
        ("transposed", rnd(b, h, s_kv, s_q).transpose(2, 3)),
        ("same per key", rnd(b, h, s_q, 1, p=0.6)),
    ]
    big = rnd(b, h, s_q, s_kv + 1, p=0.97)
    out.append(("not 16-byte aligned", big[..., 1:]))
    runs = torch.ones(b, h, s_q, s_kv, dtype=torch.bool, device=dev)
    runs[..., ::301] = False  # full-tile runs broken here and there
    out.append(("broken runs", runs))
    return out


@pytest.mark.parametrize("target,head_dim", [("sm90a", 64), ("sm90a", 128), ("sm90a", 256), ("emulate", 128)])
def test_kernel_equals_torch_model(torch, target, head_dim):
    from b200c.runtime import mask_ranges
    from b200c.runtime.block_mask import tensor_ranges

    lk = _loaded(torch, target, head_dim)
    work = lk.built.launch.work()
    gen = torch.Generator(device="cuda").manual_seed(head_dim)
    bn = work.block_n
    checked = 0
    for b, h, s_q, s_kv in [(2, 4, 1, 3 * bn + 5), (1, 8, 300, 4 * bn), (3, 2, 257, 2 * bn - 1), (1, 4, 64, 1),
                            (2, 8, 4, 5 * bn + 17)]:
        for name, m in _masks(torch, gen, b, h, s_q, s_kv):
            for pack in (False, True):
                if pack and not (work.q_stages > 1 and h % work.q_stages == 0):
                    continue
                kw = dict(batch=b, heads=h, seq_q=s_q, seq_kv=s_kv, pack_heads=pack)
                assert mask_ranges.usable(lk, work, s_kv, m.device)
                got = mask_ranges.launch(lk, m, work, **kw)
                want = tensor_ranges(m, work, **kw)
                assert torch.equal(got, want), (name, b, h, s_q, s_kv, pack, got, want)
                checked += 1
    assert checked >= 60


def test_more_tiles_than_threads(torch):
    """1,500 K/V tiles: the scan carries its state across chunks of 1,024 tiles. Head 0: a full run
    across the chunk boundary (tiles 11..1199) is the longest; head 1: two runs of 499 full tiles
    (1..499, 501..999), the first wins (as torch's max returns the first maximum)."""
    from b200c.runtime import mask_ranges
    from b200c.runtime.block_mask import tensor_ranges

    lk = _loaded(torch, "sm90a", 128)
    work = lk.built.launch.work()
    bn = work.block_n
    n = 1500
    s_kv = n * bn - 3  # the last tile is partial
    m = torch.ones(1, 2, 1, s_kv, dtype=torch.bool, device="cuda")
    m[0, 0, 0, 10 * bn] = False
    m[0, 0, 0, 1200 * bn + 7] = False
    m[0, 1, 0, :5] = False
    m[0, 1, 0, 500 * bn] = False
    m[0, 1, 0, 1000 * bn] = False
    kw = dict(batch=1, heads=2, seq_q=1, seq_kv=s_kv, pack_heads=False)
    got = mask_ranges.launch(lk, m, work, **kw)
    want = tensor_ranges(m, work, **kw)
    assert torch.equal(got, want), (got, want)
    assert got[0].tolist() == [0, 11, 1200, n] and got[1].tolist() == [0, 1, 500, n]


def test_sdpa_decode_mask_is_one_launch(torch):
    """transformers' decoding step: a new all-true (1, 1, 1, S_kv) bool mask per call. The block mask is
    the one kernel above (no torch ops), and the output equals the unmasked call's."""
    import b200c

    gen = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, 32, 1, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 32, 4099, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 32, 4099, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
    mask = torch.ones(1, 1, 1, 4099, dtype=torch.bool, device="cuda")
    b200c.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # builds the kernel
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = b200c.scaled_dot_product_attention(q, k, v, attn_mask=mask.clone())
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert sum("b200c_block_mask_ranges" in n for n in names) == 1, names
    ref = b200c.scaled_dot_product_attention(q, k, v)
    assert (out.float() - ref.float()).abs().max().item() <= 2e-3
