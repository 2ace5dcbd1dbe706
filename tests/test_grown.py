"""Launch entries of a grown K/V cache (b200c.runtime.grown): a decoding step whose K/V tensors are new and one
row longer (transformers' cache) gets its entry from the last step's, and every launch it makes equals, parameter
for parameter, the launch of the full miss path on the same tensors (the entry cache emptied before each)."""
from __future__ import annotations

import pytest
import torch

import b200c
from b200c.errors import LaunchError
from b200c.runtime import fake_driver, grown, launcher

pytestmark = pytest.mark.filterwarnings("ignore::b200c.FallbackWarning")


def _launches(fd, fn):
    n = len(fd.launches)
    fn()
    return [(L.grid, L.block, L.smem, L.params) for L in fd.launches[n:]]


def _no_out(launches):
    """The launches without the per-call pointers (out, LSE, the split workspace: new allocations each call)."""
    per_call = {"out", "lse", "o_part", "lse_part"}
    return [(g, b, s, {k: v for k, v in p.items() if k not in per_call}) for g, b, s, p in launches]


def _counting_full_path(monkeypatch):
    calls = []
    full = launcher._new_entry

    def counted(*a, **kw):
        calls.append(a[0])
        return full(*a, **kw)

    monkeypatch.setattr(launcher, "_new_entry", counted)
    return calls


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("B,H,HK,L", [(1, 32, 8, 4096), (4, 16, 16, 300), (2, 8, 8, 1)])
def test_grown_cache_launches_equal_the_full_path(monkeypatch, layout, B, H, HK, L):
    full_calls = _counting_full_path(monkeypatch)
    g = torch.Generator().manual_seed(0)
    shape = (lambda s, h: (B, h, s, 128)) if layout == "bhsd" else (lambda s, h: (B, s, h, 128))
    sd = 2 if layout == "bhsd" else 1
    with fake_driver.install(target="sm90a") as fd:
        k = torch.randn(*shape(L, HK), generator=g).bfloat16()
        v = torch.randn(*shape(L, HK), generator=g).bfloat16()
        for step in range(6):
            k = torch.cat([k, torch.randn(*shape(1, HK), generator=g).bfloat16()], sd)  # a new tensor each step
            v = torch.cat([v, torch.randn(*shape(1, HK), generator=g).bfloat16()], sd)
            q = torch.randn(*shape(1, H), generator=g).bfloat16()
            call = lambda: b200c.attention(q, k, v, target="sm90a", layout=layout)  # noqa: E731
            before = len(full_calls)
            got = _launches(fd, call)
            assert len(full_calls) - before == (1 if step == 0 else 0), step  # steps 1.. from the template
            entries, families = dict(launcher._entries), dict(grown._families)
            launcher._entries.clear(), grown.clear()
            want = _launches(fd, call)  # the same tensors through the full miss path
            assert len(full_calls) - before == (2 if step == 0 else 1)
            assert _no_out(got) == _no_out(want), step
            assert got[0][3]["seq_kv"] == L + step + 1
            launcher._entries.clear(), launcher._entries.update(entries)
            grown.clear(), grown._families.update(families)


def test_a_broken_layout_raises_the_full_paths_error(monkeypatch):
    with fake_driver.install(target="sm90a"):
        q = torch.randn(1, 8, 1, 128).bfloat16()
        k = torch.randn(1, 8, 64, 128).bfloat16()
        b200c.attention(q, k, k, target="sm90a")
        bad = torch.randn(1, 8, 65, 132).bfloat16()[..., :128]  # S stride 264 bytes: not a multiple of 16
        with pytest.raises(LaunchError) as grown_err:
            b200c.attention(q, bad, bad, target="sm90a")
        launcher.clear()
        with pytest.raises(LaunchError) as full_err:
            b200c.attention(q, bad, bad, target="sm90a")
        assert str(grown_err.value) == str(full_err.value) and "stride" in str(full_err.value)


def test_another_split_count_takes_the_full_path(monkeypatch):
    """A call whose S_kv gives another split count (or none) than the template's is not grown from it."""
    from b200c.runtime import split_kv

    full_calls = _counting_full_path(monkeypatch)
    with fake_driver.install(target="sm90a") as fd:
        q = torch.randn(1, 8, 1, 128).bfloat16()
        counts = []
        for L in (64, 65, 40000, 40001):
            k = torch.randn(1, 8, L, 128).bfloat16()
            n = len(fd.launches)
            b200c.attention(q, k, k, target="sm90a")
            counts.append(fd.launches[n].params.get("num_splits", 1))
        assert counts[0] == counts[1] == 1 and counts[2] == counts[3] > 1, counts
        assert len(full_calls) == 2  # 64 (first), 40000 (splits); 65 and 40001 grown
        assert split_kv  # the module whose choice differs


def test_mod_calls_grow_and_empty_caches_take_the_full_path(monkeypatch):
    """A decoding step with an SDPA boolean mask (transformers passes one of (B, 1, 1, S_kv) every step) and a
    score_mod: grown from the last step's entry, launching what the full path launches (block mask included);
    an empty cache has nothing to launch."""
    full_calls = _counting_full_path(monkeypatch)
    g = torch.Generator().manual_seed(1)
    with fake_driver.install() as fd:  # sm100a: what the drop-in picks for CPU tensors (target "auto")
        for step, L in enumerate((300, 301, 302)):
            q = torch.randn(2, 8, 1, 128, generator=g).bfloat16()
            k = torch.randn(2, 8, L, 128, generator=g).bfloat16()
            keep = torch.rand(2, 1, 1, L, generator=g) > 0.3
            for kw in (dict(attn_mask=keep), dict(attn_mask=keep, scale=0.1)):
                call = lambda: b200c.scaled_dot_product_attention(q, k, k, **kw)  # noqa: E731
                got = _launches(fd, call)
                entries, families = dict(launcher._entries), dict(grown._families)
                launcher._entries.clear(), grown.clear()
                want = _launches(fd, call)
                assert got and _no_out(got) == _no_out(want), (step, kw)
                assert "kv_ranges" in got[0][3] and got[0][3]["seq_kv"] == L
                launcher._entries.clear(), launcher._entries.update(entries)
                grown.clear(), grown._families.update(families)
        assert len(full_calls) == 1 + 3 * 2  # the first call, then only the comparisons' full paths
        out = b200c.attention(q, torch.zeros(2, 8, 0, 128).bfloat16(), torch.zeros(2, 8, 0, 128).bfloat16(),
                              target="sm90a")
        assert not out.any()
