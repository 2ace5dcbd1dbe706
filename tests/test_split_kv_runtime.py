"""Split-KV and the KV-cache entry point on the host path, under the stand-in driver (CPU tensors):
which build runs, what the two launches receive, the in-place cache append and the paged index
math. Numerics against FP32 attention are GPU tests (tests/gpu/test_decode.py)."""
import pytest
import torch

import b200c
from b200c.errors import LaunchError
from b200c.runtime import fake_driver
from b200c.runtime.kvcache import paged_rows


def bf(*shape):
    return torch.randn(*shape, dtype=torch.bfloat16)


def test_decode_runs_the_split_build_and_merges():
    with fake_driver.install(target="sm90a", num_sms=132) as fd:
        q, k = bf(1, 32, 1, 128), bf(1, 8, 32768, 128)
        out, lse = b200c.attention(q, k, k, target="sm90a", return_lse=True)
        main, comb = fd.launches
        # one query row per head: the 4 query heads of each K/V head are its rows (fold_gqa), an MHA problem on
        # 8 heads; 187 tiles of 176 keys: 11 splits of at least MIN_SPLIT_TILES tiles, 88 CTAs
        p = main.params
        assert main.kernel.split_kv and (p["heads"], p["heads_kv"], p["seq_q"]) == (8, 8, 4)
        assert p["causal"] == 0 and p["num_splits"] == 11 and main.grid == 8 * 11
        assert p["o_part"] != 0 and p["lse_part"] != 0 and p["seqused_k"] == 0
        assert comb.params["o_part"] == p["o_part"] and comb.params["lse_part"] == p["lse_part"]
        assert comb.params["out"] == out.data_ptr() and comb.params["lse"] == lse.data_ptr()
        assert comb.params["rows"] == 32 and comb.params["num_splits"] == 11 and comb.grid == 8
        assert out.shape == q.shape and out.stride() == q.stride() and lse.shape == (1, 32, 1)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_fold_gqa_maps_query_heads_to_rows(layout):
    from b200c.runtime.launcher import fold_gqa, unfold_gqa

    b, h, h_kv, d = 2, 12, 3, 16
    q = torch.arange(b * h * d, dtype=torch.float32).reshape(b, h, 1, d)
    q = q if layout == "bhsd" else q.transpose(1, 2).contiguous()
    k = torch.zeros(b, h_kv, 5, d) if layout == "bhsd" else torch.zeros(b, 5, h_kv, d)
    f = fold_gqa(q, k, layout)  # (B, g, H_kv, D) BSHD: row i of K/V head j is query head j * g + i
    g = h // h_kv
    for bb in range(b):
        for i in range(g):
            for j in range(h_kv):
                head = j * g + i
                want = q[bb, head, 0] if layout == "bhsd" else q[bb, 0, head]
                assert torch.equal(f[bb, i, j], want)
    assert f.data_ptr() == q.data_ptr()  # a view
    out = torch.empty_like(f).copy_(f)  # a kernel's O that copies its rows
    lse = torch.arange(b * h_kv * g, dtype=torch.float32).reshape(b, h_kv, g)
    o, l = unfold_gqa(out, lse, q, layout)
    assert torch.equal(o, q) and l.shape == (b, h, 1) and l[1, 5, 0] == lse[1, 5 // g, 5 % g]
    assert fold_gqa(q, torch.zeros_like(q), layout) is None  # MHA: nothing to fold


def test_prefill_keeps_the_plain_build():
    with fake_driver.install(target="sm90a") as fd:
        q = bf(2, 16, 4096, 128)
        b200c.attention(q, q, q, target="sm90a")
        (main,) = fd.launches
        assert not main.kernel.split_kv and "num_splits" not in main.params


def test_schedule_fixes_the_split_count():
    base = b200c.default_schedule(128, target="sm90a")
    q, k = bf(1, 32, 1, 128), bf(1, 8, 32768, 128)
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention(q, k, k, target="sm90a", schedule=base.replace(kv_splits=1))
        (main,) = fd.launches
        assert not main.kernel.split_kv
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention(q, k, k, target="sm90a", schedule=base.replace(kv_splits=4))
        main, comb = fd.launches
        assert main.params["num_splits"] == 4 and main.grid == 8 * 4 and comb.params["num_splits"] == 4


def test_emulation_target_splits_too():
    with fake_driver.install(target="emulate") as fd:
        q, k = bf(2, 8, 1, 128), bf(2, 8, 8192, 128)
        b200c.attention(q, k, k, target="emulate", schedule=b200c.default_schedule(128))
        main, comb = fd.launches
        assert main.kernel.split_kv and main.params["num_splits"] > 1


def test_paged_rows_math():
    """paged_rows against the paged layout itself: a cache whose physical row r holds the value r, read
    by walking each sequence's table page after page (the logical sequence), gives the rows expected."""
    g = torch.Generator().manual_seed(0)
    for page in (16, 48, 64, 256):
        blocks = 40
        table = torch.randperm(blocks, generator=g)[:12].to(torch.int32).reshape(3, 4)
        pos = torch.randint(0, 4 * page, (3, 7), generator=g)
        physical = list(range(blocks * page))  # row r of the cache holds r
        pages = [physical[i * page:(i + 1) * page] for i in range(blocks)]
        rows = paged_rows(table, pos, page)
        for b in range(3):
            logical = []
            for block in table[b].tolist():
                logical.extend(pages[block])
            assert rows[b].tolist() == [logical[p] for p in pos[b].tolist()]


def test_kvcache_appends_in_place_and_passes_the_lengths():
    with fake_driver.install(target="sm90a") as fd:
        q = bf(2, 1, 32, 128)
        kc, vc = torch.zeros(2, 1024, 8, 128, dtype=torch.bfloat16), torch.zeros(2, 1024, 8, 128, dtype=torch.bfloat16)
        k, v = bf(2, 1, 8, 128), bf(2, 1, 8, 128)
        lens = torch.tensor([5, 700], dtype=torch.int32)
        out = b200c.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, target="sm90a")
        assert torch.equal(kc[0, 5], k[0, 0]) and torch.equal(vc[1, 700], v[1, 0])
        assert kc[0, 6].abs().sum() == 0 and kc[0, 4].abs().sum() == 0
        # one split (the automatic count here): the split build stores out itself, no workspace, no combine
        (main,) = fd.launches
        assert main.kernel.split_kv and main.params["seqused_k"] != 0 and main.params["seq_kv"] == 1024
        assert main.params["num_splits"] == 1 and main.params["o_part"] == 0 and main.params["lse_part"] == 0
        assert main.params["out"] == out.data_ptr()
        assert lens.tolist() == [5, 700]  # the caller's lengths are not changed


def test_kvcache_paged_append():
    with fake_driver.install(target="sm90a"):
        page = 16
        q = bf(2, 1, 8, 64)
        kc = torch.zeros(10, page, 2, 64, dtype=torch.bfloat16)
        vc = torch.zeros_like(kc)
        table = torch.tensor([[3, 7, 1], [0, 9, 2]], dtype=torch.int32)
        k, v = bf(2, 2, 2, 64), bf(2, 2, 2, 64)
        with fake_driver.install(target="sm90a") as fd:
            b200c.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=torch.tensor([15, 20], dtype=torch.int32),
                                         block_table=table, target="sm90a")
        (main,) = fd.launches  # one split: no combine
        p = main.params  # the cache is read in place: the table, its pages and the box rows go to the kernel
        assert p["block_table"] == table.data_ptr() and p["max_blocks"] == 3 and p["page_size"] == 16
        assert p["page_box"] == 16 and p["seq_kv"] == 3 * 16 and p["batch"] == 2
        assert fd.encodes[1][1] == (64, 16, 2, 10) and fd.encodes[1][4] == 16  # K: {D, page, H_kv, blocks}, 16-row boxes
        assert torch.equal(kc[3, 15], k[0, 0]) and torch.equal(kc[7, 0], k[0, 1])  # token 16 opens page 7
        assert torch.equal(vc[9, 4], v[1, 0]) and torch.equal(vc[9, 5], v[1, 1])


@pytest.mark.parametrize("kw,msg", [
    (dict(cache_seqlens=torch.tensor([1, 2])), "torch.int32 tensor of shape"),
    (dict(cache_seqlens=-1), ">= 0"),
    (dict(cache_seqlens=1, num_splits=200), "num_splits"),
    (dict(cache_seqlens=1, block_table=torch.zeros(2, 3)), "block_table must be a torch.int32"),
    (dict(cache_seqlens=1, block_table=torch.zeros(2, 3, dtype=torch.int64)),
     r"got a torch.int64 tensor of shape \(2, 3\) \(convert it with block_table.to\(torch.int32\)\)"),
    (dict(cache_seqlens=1, return_lse=True, return_softmax_lse=False), "disagree"),
    (dict(cache_seqlens=1, window_size=(128, 0)), "sliding window is not supported in the KV-cache step yet"),
    (dict(cache_seqlens=1, window_size=(-1, -1), rotary_cos=torch.zeros(4, 8)), "rotate q and the new k before"),
    (dict(cache_seqlens=1, softcap=30.0), "softcapping is not supported in the KV-cache step yet"),
    (dict(cache_seqlens=1, num_split=2), "takes no argument 'num_split'; did you mean num_splits=?"),
])
def test_kvcache_argument_errors(kw, msg):
    q = bf(2, 1, 8, 64)
    kc = torch.zeros(2, 64, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match=msg):
        b200c.attention_with_kvcache(q, kc, kc, **kw)


def test_kvcache_takes_flash_attn_calls_at_their_no_op_defaults():
    """A call written for flash_attn_with_kvcache passes with its keywords at the values that do nothing, and
    return_softmax_lse is return_lse (a reviewer found the defaults refused)."""
    q = bf(2, 1, 8, 64)
    kc = torch.zeros(2, 64, 2, 64, dtype=torch.bfloat16)
    noop = dict(rotary_cos=None, rotary_sin=None, rotary_interleaved=True, window_size=(-1, -1), softcap=0.0,
                cache_batch_idx=None, cache_leftpad=None, alibi_slopes=None)
    with fake_driver.install(target="sm90a") as fd:
        out = b200c.attention_with_kvcache(q, kc, kc, cache_seqlens=3, target="sm90a", **noop)
        assert out.shape == q.shape and len(fd.launches) >= 1
        out, lse = b200c.attention_with_kvcache(q, kc, kc, cache_seqlens=3, target="sm90a", return_softmax_lse=True)
        assert lse.shape == (2, 8, 1)


def test_kvcache_page_size_rule():
    q = bf(1, 1, 8, 64)
    kc = torch.zeros(4, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="page size 8"):
        b200c.attention_with_kvcache(q, kc, kc, cache_seqlens=1, block_table=torch.zeros(1, 2, dtype=torch.int32))


def test_varlen_decode_splits():
    with fake_driver.install(target="sm90a") as fd:
        q = bf(3, 32, 128)  # three sequences of one query row
        k = bf(3 * 8000, 8, 128)
        cq = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
        ck = torch.tensor([0, 8000, 16000, 24000], dtype=torch.int32)
        b200c.attention_varlen(q, k, k, cq, ck, 1, 8000, target="sm90a")
        main, comb = fd.launches
        assert main.kernel.split_kv and main.params["num_splits"] > 1 and main.params["part_rows"] == 3
        assert comb.params["rows"] == 32 * 3 and comb.params["out_stride_b"] == 0


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_num_splits_is_the_launch_count(paged):
    q = bf(1, 1, 32, 128)
    if paged:
        kc = torch.zeros(64, 256, 8, 128, dtype=torch.bfloat16)
        table = torch.arange(64, dtype=torch.int32).reshape(1, 64)
    else:
        kc, table = torch.zeros(1, 16384, 8, 128, dtype=torch.bfloat16), None
    for n, want in ((1, 1), (5, 5), (0, None)):
        with fake_driver.install(target="sm90a") as fd:
            b200c.attention_with_kvcache(q, kc, kc, cache_seqlens=7, block_table=table, num_splits=n, target="sm90a")
            # always the split-KV build: it reads the lengths (and the table); the combine only after 2+ splits
            main, *comb = fd.launches
            assert main.kernel.split_kv and main.params["seqused_k"] != 0
            assert len(comb) == (0 if n == 1 else 1)
            got = main.params["num_splits"]
            assert got == want if want else got > 1


def test_kvcache_compiles_to_one_op_without_graph_break():
    """torch.compile(fullgraph=True) of a decoding step: one ``b200c.attention_with_kvcache`` node with the
    caches, the device lengths and the schedule JSON; the fake impl gives out like q and the LSE (B, H, S_q)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    sched = b200c.default_schedule(128, target="sm90a")

    def step(q, kc, vc, k, v, lens):
        out, lse = b200c.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, schedule=sched, target="sm90a",
                                                return_lse=True, softmax_scale=0.25)
        return out + 1, lse

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    with FakeTensorMode():
        q = torch.empty(2, 1, 32, 128, dtype=torch.bfloat16, device="cuda")
        kc = torch.empty(2, 1024, 8, 128, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(2, 1, 8, 128, dtype=torch.bfloat16, device="cuda")
        lens = torch.empty(2, dtype=torch.int32, device="cuda")
        out, lse = compiled(q, kc, kc.clone(), k, k, lens)
        assert out.shape == q.shape and lse.shape == (2, 32, 1) and lse.dtype == torch.float32
    found = [n for n in graphs[0].graph.nodes if n.op == "call_function" and "attention_with_kvcache" in str(n.target)]
    assert len(found) == 1
    args = found[0].args
    assert args[8] == 0.25 and args[9] == "sm90a" and args[11] is True
    assert b200c.Schedule.from_json(args[7]) == sched


def test_kvcache_compiled_step_appends_and_launches():
    """aot_eager (functionalization): the compiled step still writes the new tokens into the caches the caller
    holds, and launches the split build with the lengths."""
    with fake_driver.install(target="sm90a") as fd:
        q = bf(2, 1, 32, 128)
        kc, vc = torch.zeros(2, 1024, 8, 128, dtype=torch.bfloat16), torch.zeros(2, 1024, 8, 128, dtype=torch.bfloat16)
        k, v = bf(2, 1, 8, 128), bf(2, 1, 8, 128)
        lens = torch.tensor([5, 700], dtype=torch.int32)

        def step(q, kc, vc, k, v, lens):
            return b200c.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, target="sm90a")

        out = torch.compile(step, fullgraph=True, backend="aot_eager")(q, kc, vc, k, v, lens)
        assert out.shape == q.shape
        assert torch.equal(kc[0, 5], k[0, 0]) and torch.equal(vc[1, 700], v[1, 0])
        assert kc[0, 6].abs().sum() == 0
        main = fd.launches[-1]  # one split: the split build stores out itself
        assert main.kernel.split_kv and main.params["seqused_k"] != 0 and main.params["out"] == out.data_ptr()


def test_kvcache_step_parses_no_schedule_json(monkeypatch):
    """A decoding step's host path: after the first call the kernel token comes from a cache (parsing and
    re-serialising the schedule cost about 70 us of the 111 us per call on this CPU, measured)."""
    from b200c.dsl import Schedule

    with fake_driver.install(target="sm90a", num_sms=132) as fd:
        q, k = bf(1, 1, 32, 128), bf(1, 4096, 8, 128)
        lens = torch.full((1,), 4096, dtype=torch.int32)
        b200c.attention_with_kvcache(q, k, k, cache_seqlens=lens, target="sm90a", num_splits=2)
        calls = []
        orig = Schedule.from_json.__func__

        monkeypatch.setattr(Schedule, "from_json", classmethod(lambda cls, s: calls.append(s) or orig(cls, s)))
        n = len(fd.launches)
        b200c.attention_with_kvcache(q, k, k, cache_seqlens=lens, target="sm90a", num_splits=2)
        assert calls == [] and len(fd.launches) == n + 2  # the split kernel and the combine kernel
        main, comb = fd.launches[n:n + 2]
        # the combine goes through cuLaunchKernelEx with programmatic dependent launch, on the split kernel's stream
        assert not main.pdl and comb.pdl and comb.stream == main.stream and comb.block == 128
        assert comb.grid == 8 and comb.params["rows"] == 32  # 32 query rows (GQA 32/8 folded), 4 per CTA
        b200c.attention_with_kvcache(q, k, k, cache_seqlens=lens, target="sm90a", num_splits=3)
        assert calls  # a new count: its token is made once
        assert fd.launches[n + 2].params["num_splits"] == 3


# ---- issue 49 item 3: bad KV-cache values get a typed error before the append (caches untouched) ----------

def _paged(batch=2, blocks=6, page=16, pages=3):
    kc = torch.randn(blocks, page, 2, 64).to(torch.bfloat16)
    table = torch.arange(batch * pages, dtype=torch.int32).reshape(batch, pages) % blocks
    return kc, table


@pytest.mark.parametrize("case", ["negative", "past_capacity", "past_pages", "entry_too_big", "entry_negative",
                                  "int_past_capacity"])
def test_bad_kvcache_values_raise_before_the_append(case):
    q = bf(2, 1, 4, 64)
    k_new, v_new = bf(2, 1, 2, 64), bf(2, 1, 2, 64)
    table = None
    if case in ("negative", "past_capacity", "int_past_capacity"):
        kc = torch.randn(2, 64, 2, 64).to(torch.bfloat16)
        lens = {"negative": torch.tensor([5, -1], dtype=torch.int32), "past_capacity":
                torch.tensor([64, 5], dtype=torch.int32), "int_past_capacity": 64}[case]
        want = {"negative": r"cache_seqlens\[1\] = -1: .* >= 0", "past_capacity":
                r"cache_seqlens\[0\] \+ S_new = 64 \+ 1 = 65 tokens, more than the cache holds: S_max = 64",
                "int_past_capacity": r"cache_seqlens \+ S_new = 64 \+ 1 = 65 tokens.*S_max = 64"}[case]
    else:
        kc, table = _paged()  # 6 blocks of 16 tokens, 3 pages per sequence
        lens = torch.tensor([20, 40], dtype=torch.int32)
        want = r"max_blocks \* page_size = 3 \* 16 = 48"
        if case == "entry_too_big":
            table[1, 2] = 6  # sequence 1 uses its 3 pages (41 tokens)
            want = r"block_table\[1, 2\] = 6 is not a block of the paged cache \(num_blocks = 6: entries 0..5\)"
        elif case == "entry_negative":
            table[0, 1] = -1  # sequence 0 uses 2 pages (21 tokens)
            want = r"block_table\[0, 1\] = -1 is not a block"
        else:
            lens = torch.tensor([20, 48], dtype=torch.int32)
    vc = kc.clone()
    before = (kc.clone(), vc.clone())
    with fake_driver.install(target="sm90a"):
        with pytest.raises(b200c.LaunchError, match=want):
            b200c.attention_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lens, block_table=table,
                                         target="sm90a")
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])  # nothing appended


def test_unused_table_entries_and_check_inputs_false(monkeypatch):
    """Entries past the pages a sequence uses may be anything (vLLM pads tables); check_inputs=False reads no
    device value (no synchronization), as a CUDA-graph capture needs."""
    from b200c.runtime import kvcache

    q = bf(2, 1, 4, 64)
    kc, table = _paged()
    table[0, 2] = 999  # sequence 0 uses 2 pages of 3
    lens = torch.tensor([20, 40], dtype=torch.int32)
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention_with_kvcache(q, kc, kc.clone(), cache_seqlens=lens, block_table=table, target="sm90a")
        assert fd.launches
        calls = []
        monkeypatch.setattr(kvcache, "check_values", lambda *a: calls.append(a))
        b200c.attention_with_kvcache(q, kc, kc.clone(), cache_seqlens=lens, block_table=table, target="sm90a",
                                     check_inputs=False)
        assert not calls
        b200c.attention_with_kvcache(q, kc, kc.clone(), cache_seqlens=lens, block_table=table, target="sm90a")
        assert len(calls) == 1
    with pytest.raises(b200c.LaunchError, match="check_inputs=.yes. \\(str\\) must be True or False"):
        b200c.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, block_table=table, check_inputs="yes")


def test_check_refuses_a_cuda_graph_capture(monkeypatch):
    from b200c.runtime import kvcache

    q = bf(1, 1, 4, 64)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(b200c.LaunchError, match="pass check_inputs=False in captured steps"):
        kvcache.check_values(q, torch.tensor([3], dtype=torch.int32), 1, torch.zeros(1, 64, 2, 64), None)
