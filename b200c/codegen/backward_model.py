"""The backward kernels' algorithm run on the host in FP64, tile by tile over
:class:`b200c.codegen.backward_work.BackwardDecomposition`: the reference a backward kernel is checked
against on the CPU (the first rung of the verification ladder, as the forward's Python model).

Per work item (one K/V tile of one (sequence, K/V head)) and visit (query head ``h``, Q tile ``i``),
the steps FlashAttention's backward takes (FA2 Algorithm 2; FA3 and FA4 keep them):

    S  = Q_i K_j^T * scale            (the visit's masked columns: -inf, as the forward's col_limit)
    P  = exp(S - LSE_i)               (a row whose LSE is -inf saw no key: P = 0)
    dV_j += P^T dO_i
    dP = dO_i V_j^T
    dS = P * (dP - D_i)               (D = rowsum(dO * O), the preprocess)
    dK_j += dS^T Q_i * scale
    dQ_i += dS K_j * scale            (shared by every K/V tile: atomics or the deterministic order)

dK_j and dV_j are summed over the GQA group's query heads inside the item. ``tests/test_backward_model.py``
compares the result with torch autograd through FP64 attention (FlashAttention's rule for a row that
sees no key: O = 0, so its gradients are 0).
"""
from __future__ import annotations

from .backward_work import BackwardDecomposition


def attention_backward(q, k, v, out, lse, dout, *, causal: bool = False, softmax_scale=None, block_m: int = 64,
                       block_n: int = 128):
    """dQ, dK, dV of attention, computed as the backward kernels compute them (see the module docstring).

    Args:
        q: (B, H, S_q, D) torch tensor (any float dtype; the model runs in FP64).
        k, v: (B, H_kv, S_kv, D), H a multiple of H_kv (GQA/MQA).
        out: the forward's O, like q; lse: its log-sum-exp (B, H, S_q), natural log, -inf for a row
            that sees no key.
        dout: dL/dO, like q.
        causal: bottom-right aligned (query row ``r`` sees keys ``<= r + S_kv - S_q``).
        softmax_scale: natural-log units; None: ``1 / sqrt(D)``.
        block_m, block_n: the decomposition's Q and K/V tile rows (the result does not depend on them
            beyond FP64 rounding).

    Returns:
        ``(dq, dk, dv)`` in FP64, shaped like q, k, v.

    Raises:
        ValueError: shapes that do not fit (the message names them).
    """
    import torch

    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q (B, H, S_q, D) and k, v (B, H_kv, S_kv, D) expected, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    batch, heads, seq_q, d = q.shape
    heads_kv, seq_kv = k.shape[1], k.shape[2]
    if heads % heads_kv:
        raise ValueError(f"H = {heads} query heads is not a multiple of H_kv = {heads_kv}")
    if out.shape != q.shape or dout.shape != q.shape or tuple(lse.shape) != (batch, heads, seq_q):
        raise ValueError(f"out and dout must be like q {tuple(q.shape)} and lse (B, H, S_q), got {tuple(out.shape)}, "
                         f"{tuple(dout.shape)}, {tuple(lse.shape)}")
    f = torch.float64
    q, k, v, out, lse, dout = (t.to(f) for t in (q, k, v, out, lse, dout))
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    dec = BackwardDecomposition(block_m, block_n)
    delta = (dout * out).sum(-1)  # D = rowsum(dO * O): the preprocess
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for w in range(dec.num_work(batch, heads_kv, seq_kv)):
        it = dec.item(w, batch=batch, heads=heads, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv, causal=causal)
        if not it.valid:
            continue
        c0 = it.kv_tile * block_n
        c1 = min(c0 + block_n, it.len_kv)
        kj, vj = k[it.b, it.h_kv, c0:c1], v[it.b, it.h_kv, c0:c1]
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for h, i, masked in dec.visits(it):
            r0, r1 = i * block_m, min((i + 1) * block_m, it.len_q)
            qi, doi, li, di = q[it.b, h, r0:r1], dout[it.b, h, r0:r1], lse[it.b, h, r0:r1], delta[it.b, h, r0:r1]
            s = (qi @ kj.T) * scale
            if masked:
                lim = torch.tensor([dec.col_limit(it, r, causal) for r in range(r0, r1)], dtype=torch.long)
                s = s.masked_fill(torch.arange(c1 - c0)[None, :] >= lim[:, None], float("-inf"))
            seen = torch.isfinite(li)[:, None]
            p = torch.where(seen, torch.exp(s - torch.where(seen, li[:, None], torch.zeros_like(li[:, None]))),
                            torch.zeros_like(s))
            dvj += p.T @ doi
            ds = p * (doi @ vj.T - di[:, None])
            dkj += (ds.T @ qi) * scale
            dq[it.b, h, r0:r1] += (ds @ kj) * scale
        dk[it.b, it.h_kv, c0:c1] = dkj
        dv[it.b, it.h_kv, c0:c1] = dvj
    return dq, dk, dv


__all__ = ["attention_backward"]
