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


def _compare(fd, call):
    """The launches of ``call`` from the grown path and from the full path on the same tensors."""
    got = _launches(fd, call)
    entries, families = dict(launcher._entries), dict(grown._families)
    launcher._entries.clear(), grown.clear()
    want = _launches(fd, call)
    launcher._entries.clear(), launcher._entries.update(entries)
    grown.clear(), grown._families.update(families)
    return got, want


@pytest.mark.parametrize("target", ["sm90a", "sm100a"])
def test_split_causal_lse_and_packed_heads_grow_alike(monkeypatch, target):
    """Split-KV decoding (and its merge launch), causal with the LSE, and packed GQA heads: every grown launch
    equals the full path's, parameter for parameter."""
    full_calls = _counting_full_path(monkeypatch)
    g = torch.Generator().manual_seed(2)
    with fake_driver.install(target=target) as fd:
        for (B, H, HK, S_q, L0), causal, lse in (((1, 8, 8, 1, 40000), False, False), ((1, 32, 8, 1, 30000), False, True),
                                                 ((2, 8, 2, 64, 700), True, True), ((1, 16, 2, 2, 5000), True, False)):
            first = len(full_calls)
            for step in range(3):
                q = torch.randn(B, H, S_q, 128, generator=g).bfloat16()
                k = torch.randn(B, HK, L0 + step, 128, generator=g).bfloat16()
                v = torch.randn(B, HK, L0 + step, 128, generator=g).bfloat16()
                got, want = _compare(fd, lambda: b200c.attention(q, k, v, causal=causal, return_lse=lse, target=target))
                assert got and _no_out(got) == _no_out(want), (B, H, HK, S_q, L0, step)
            assert len(full_calls) - first == 1 + 3, (B, H, HK, S_q, L0)  # the first call, then the comparisons
        splits = [x.params.get("num_splits", 1) for x in fd.launches]
        assert max(splits) > 1 and any(x.params.get("pack_heads") == 1 for x in fd.launches)


def test_other_families_take_the_full_path(monkeypatch):
    """A call that differs in more than S_kv, the K/V strides and the pointers (q's shape or strides, the
    options, the layout, the head dim) is built by the full path."""
    full_calls = _counting_full_path(monkeypatch)
    with fake_driver.install(target="sm90a"):
        k = torch.randn(1, 8, 100, 128).bfloat16()
        q = torch.randn(1, 8, 4, 128).bfloat16()
        b200c.attention(q, k, k, target="sm90a")
        calls = (lambda: b200c.attention(torch.randn(1, 8, 5, 128).bfloat16(), k, k, target="sm90a"),
                 lambda: b200c.attention(torch.randn(1, 4, 8, 128).bfloat16().transpose(1, 2), k, k, target="sm90a"),
                 lambda: b200c.attention(q, k, k, causal=True, target="sm90a"),
                 lambda: b200c.attention(q, k, k, return_lse=True, target="sm90a"),
                 lambda: b200c.attention(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), layout="bshd",
                                         target="sm90a"))
        for n, call in enumerate(calls, 2):
            call()
            assert len(full_calls) == n, n


def test_template_eviction_is_bounded_and_safe_under_threads():
    import threading

    grown.clear()
    fams = [("fam", i) for i in range(3 * grown.MAX_FAMILIES)]
    errors = []

    def note_all(part):
        try:
            for f in part:
                grown.note(f, object())
                if f[1] % 17 == 0:
                    grown.clear()
        except Exception as e:  # noqa: BLE001 - the test reports any
            errors.append(e)

    threads = [threading.Thread(target=note_all, args=(fams[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(grown._families) <= grown.MAX_FAMILIES
    grown.clear()
    for f in fams[: grown.MAX_FAMILIES]:
        grown.note(f, object())
    grown.note(fams[0], object())  # noted again: now the most recent
    grown.note(fams[-1], object())  # evicts the least recent, fams[1]
    assert fams[0] in grown._families and fams[1] not in grown._families and len(grown._families) == grown.MAX_FAMILIES
    grown.clear()


def test_a_generate_like_pattern_launches_alike_with_and_without_templates(monkeypatch):
    """Two prefills with a causal bool mask and 12 decoding steps with a (1, 1, 1, S_kv) mask on 4 layers, K/V
    grown by torch.cat (what transformers' cache and masks give): the same launches (kernel, grid, every
    parameter but pointers and tensor maps) and the same block-mask computations with and without templates."""
    from b200c.runtime import block_mask

    computed = []
    ranges = block_mask.tensor_ranges
    monkeypatch.setattr(block_mask, "tensor_ranges", lambda *a, **kw: computed.append(1) or ranges(*a, **kw))

    def pattern():
        rows = []
        with fake_driver.install() as fd:
            g = torch.Generator().manual_seed(0)
            for _ in range(2):
                mask = torch.ones(256, 256, dtype=torch.bool).tril()[None, None]
                ks = [torch.randn(1, 8, 256, 128, generator=g).bfloat16() for _ in range(4)]
                for i in range(4):
                    b200c.scaled_dot_product_attention(torch.randn(1, 8, 256, 128, generator=g).bfloat16(), ks[i],
                                                       ks[i], attn_mask=mask)
                for step in range(12):
                    mask = torch.ones(1, 1, 1, 257 + step, dtype=torch.bool)
                    for i in range(4):
                        ks[i] = torch.cat([ks[i], torch.randn(1, 8, 1, 128, generator=g).bfloat16()], 2)
                        b200c.scaled_dot_product_attention(torch.randn(1, 8, 1, 128, generator=g).bfloat16(), ks[i],
                                                           ks[i], attn_mask=mask)
            for L in fd.launches:
                rows.append((L.kernel.name, L.grid, tuple(sorted((k, v) for k, v in L.params.items()
                                                                  if k not in ("out", "lse", "o_part", "lse_part",
                                                                               "kv_ranges")
                                                                  and not k.startswith(("cap", "tmap"))))))
        return rows

    with_templates, n_with = pattern(), len(computed)
    monkeypatch.setattr(grown, "regrown", lambda *a, **kw: None)
    computed.clear()
    without, n_without = pattern(), len(computed)
    assert len(with_templates) == 2 * 4 * 13 and with_templates == without
    assert n_with == n_without == 2 * 13  # one block mask per mask tensor (shared by the 4 layers)
