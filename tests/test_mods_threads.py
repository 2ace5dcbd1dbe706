"""Mods traced from several threads at once (a serving process with a thread per request): torch.fx's
tracer patches module globals through one process-wide patcher, so b200c traces one function at a time;
before that, concurrent traces failed with "CURRENT_PATCHER is None in finally block"."""
import threading

import torch

from b200c.dsl.mods import trace_mods


def _score(score, b, h, q_idx, kv_idx):
    return score + torch.where(q_idx >= kv_idx, 0.0, -1.0) * (h + 1)


def _mask(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx) < 64


def test_concurrent_traces_agree():
    start = threading.Barrier(12)
    results, errors = [], []

    def work():
        start.wait()
        for _ in range(10):
            try:
                results.append(trace_mods(score_mod=_score, mask_mod=_mask)[0])
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 120 and all(r == results[0] for r in results)
