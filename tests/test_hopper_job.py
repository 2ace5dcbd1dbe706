"""scripts/hopper_job.py's watchdog without a GPU: a hanging or crashing
schedule is reported and the worker restarts past it (fake worker)."""
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))


def test_watchdog_restarts_past_hang_and_crash(monkeypatch):
    import hopper_job

    monkeypatch.setenv("B200C_FAKE_WORKER", "b:hang,c:crash,d:fail")
    import time

    files = ["/x/a.py", "/x/b.py", "/x/c.py", "/x/d.py", "/x/e.py"]
    logs = []
    res = hopper_job.run_worker_set(files, ["s128"], False, step_timeout=15, deadline=time.time() + 200,
                                    log=logs.append)
    status = {(r["file"], r["status"]) for r in res}
    assert ("/x/a.py", "PASS") in status and ("/x/e.py", "PASS") in status
    assert ("/x/b.py", "HANG") in status and ("/x/c.py", "ERROR") in status and ("/x/d.py", "FAIL") in status
    assert any("no progress" in x for x in logs), logs


def test_worker_dying_at_start_ends_the_set(monkeypatch, tmp_path):
    import time

    import hopper_job

    monkeypatch.setenv("B200C_FAKE_WORKER", "")  # not set: the real worker, which has no GPU here
    monkeypatch.delenv("B200C_FAKE_WORKER")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    t0 = time.time()
    res = hopper_job.run_worker_set(["/x/a.py"], ["s128"], False, step_timeout=60, deadline=time.time() + 300,
                                    log=lambda m: None)
    assert time.time() - t0 < 60 and res[0]["status"] == "ERROR" and "before any schedule" in res[0]["error"]
