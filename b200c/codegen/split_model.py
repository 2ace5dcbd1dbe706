"""The split-KV launch run on the host: each split's partial O and LSE over its K/V tiles (the masks
from :class:`b200c.codegen.work.WorkDecomposition`'s ``col_limit``), and the combine kernel's merge of
them (``b200c_attention_combine`` in b200c/codegen/templates/work.cuh.j2), step for step:

    m    = max(sink, max_s LSE_s)           (-inf when every term is -inf: then base = 0)
    w_s  = exp(LSE_s - base)                (a split that saw no key: LSE_s = -inf, w_s = 0)
    sum  = exp(sink - base) + sum_s w_s     (no sink: 0 + ...)
    O    = sum_s w_s O_s / sum              (sum = 0: O = 0)
    LSE  = base + log(sum)                  (sum = 0: -inf)

``tests/test_split_kv.py`` checks the merge against attention over the unsplit keys in FP64, and
``tests/gpu/test_decode.py`` checks the combine kernel's output against :func:`merge` of the partials
the kernel wrote.
"""
from __future__ import annotations

import math

from .work import WorkDecomposition


def merge(o_part, lse_part, sinks=None):
    """The combine kernel's merge of ``num_splits`` partial results, in the inputs' dtype.

    Args:
        o_part: (num_splits, rows, D) float tensor: each split's normalised O (any finite values where
            its LSE is -inf).
        lse_part: (num_splits, rows) float tensor: each split's LSE, natural log, -inf for no key.
        sinks: None, or a (rows,) tensor of sink logits (a sink joins as one more term with O = 0).

    Returns:
        ``(out, lse)``: (rows, D) and (rows,) tensors; a row no split saw gives O = 0 and LSE = -inf;
        a NaN LSE_s makes the row NaN.
    """
    import torch

    terms = lse_part if sinks is None else torch.cat([lse_part, sinks[None]], 0)
    m = terms.max(dim=0).values
    base = torch.where(m == -math.inf, torch.zeros_like(m), m)
    w = torch.exp(lse_part - base)
    total = w.sum(0) + (0 if sinks is None else torch.exp(sinks - base))
    w_o = torch.where(w[..., None] != 0, w[..., None] * o_part, torch.zeros_like(o_part))  # 0 * anything finite
    acc = w_o.sum(0)
    inv = torch.where(total == 0, torch.zeros_like(total), 1 / total)
    lse = torch.where(total == 0, torch.full_like(total, -math.inf), base + torch.log(total))
    return acc * inv[:, None], lse


def split_partials(q, k, v, scale: float, causal: bool, num_splits: int, block_n: int = 128):
    """Each split's partial O and LSE for one (sequence, head), as the split-KV kernels write them.

    Args:
        q: (S_q, D), k, v: (S_kv, D) float tensors (the model computes in their dtype).
        scale: the softmax scale (natural-log units); causal: bottom-right aligned.
        num_splits: splits of the work item's K/V tiles; block_n: the K/V tile rows.

    Returns:
        ``(o_part, lse_part)``: (num_splits, S_q, D) and (num_splits, S_q); a split that sees no key of
        a row gives that row O = 0 and LSE = -inf.
    """
    import torch

    s_q, s_kv = q.shape[0], k.shape[0]
    d = WorkDecomposition(max(s_q, 1), block_n, 1, split_kv=True)
    outs, lses = [], []
    for s in range(num_splits):
        item = d.item(s, batch=1, heads=1, heads_kv=1, seq_q=s_q, seq_kv=s_kv, causal=causal, num_splits=num_splits)
        cols, mask = [], []
        for visit in range(item.n_kv):
            tile = d.tile_of_visit(item, visit)
            for c in range(block_n):
                cols.append(min(tile * block_n + c, s_kv - 1))
                mask.append([c < d.col_limit(item, r, visit, causal) for r in range(s_q)])
        idx = torch.tensor(cols, dtype=torch.long)
        seen = torch.tensor(mask, dtype=torch.bool).reshape(len(cols), s_q).T  # (S_q, keys)
        scores = ((q @ k[idx].T) * scale).masked_fill(~seen, -math.inf)
        lse = torch.logsumexp(scores, dim=-1)
        none = torch.isinf(lse)
        p = torch.exp(scores - torch.where(none, torch.zeros_like(lse), lse)[:, None])
        o = p @ v[idx]
        outs.append(torch.where(none[:, None], torch.zeros_like(o), o))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


__all__ = ["merge", "split_partials"]
