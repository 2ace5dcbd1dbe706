"""The compile caches (b200c/compile_cache.py): compiled jinja2 templates, the
issue-order grammar's tables, parsed issue orders and verifier verdicts on disk. They must only save time: output stays
byte-identical with a cold, warm, damaged, unwritable or disabled cache, and
`b200c compile` never imports torch. (Timings: scripts/compile_time.py.)"""
import hashlib
import os
import subprocess
import sys

import pytest

from conftest import EXAMPLES, ROOT

EXAMPLE = EXAMPLES[6]  # 07_compute_pipeline.py
GOLDEN = (ROOT / "tests" / "golden" / f"{EXAMPLE.stem}.cu").read_text()


def _compile(tmp_path, env_extra, name="k.cu"):
    out = tmp_path / name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
           **env_extra}
    r = subprocess.run([sys.executable, "-m", "b200c", "compile", str(EXAMPLE), "-o", str(out)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Failed" not in r.stderr, r.stderr
    return out.read_text()


def _entries(root):
    return sorted((root / "compile").glob("templates-*/*.jinja2-bytecode")), \
        sorted((root / "compile").glob("grammar-*/issue_order.lark-cache"))


def _small_entries(root):
    """Parsed issue orders and verifier verdicts."""
    return sorted((root / "compile").glob("orders-*/*")) + sorted((root / "compile").glob("verdicts-*/*"))


def test_cache_is_filled_and_used(tmp_path):
    root = tmp_path / "cache"
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN
    templates, grammar = _entries(root)
    small = _small_entries(root)
    assert len(templates) >= 10 and len(grammar) == 1
    assert [p.parent.name.split("-")[0] for p in small] == ["orders", "verdicts"]
    stamps = {p: p.stat().st_mtime_ns for p in templates + grammar + small}
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN  # read, not rewritten
    assert {p: p.stat().st_mtime_ns for p in templates + grammar + small} == stamps


def test_damaged_entries_are_ignored_and_rewritten(tmp_path):
    root = tmp_path / "cache"
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN
    templates, grammar = _entries(root)
    before = {p: p.read_bytes() for p in templates + grammar}
    damage = [
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b"",  # empty
        lambda b: bytes(len(b)),  # zero-filled
        lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:],  # one byte flipped in jinja2's record
        lambda b: b[:-1] + bytes([b[-1] ^ 0x01]),  # last bit of the code flipped
        lambda b: hashlib.sha256(b"junk").digest() + b"junk",  # a valid digest over a record that is not jinja2's
    ]
    for i, p in enumerate(templates):
        p.write_bytes(damage[i % len(damage)](before[p]))
    # lark's own check: a header line (sha256 of grammar, options, versions), then pickles
    grammar[0].write_bytes(before[grammar[0]][:70] + b"\x00garbage")
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN
    # the damaged templates were compiled again and their entries rewritten whole (not always the same
    # bytes: marshal marks shared objects by reference count, which depends on what else the process loaded)
    from b200c import compile_cache

    for p in templates:
        b = p.read_bytes()
        assert hashlib.sha256(b[32:]).digest() == b[:32] and b[32:].startswith(compile_cache._TEMPLATE_RECORD), p
    small = _small_entries(root)
    good = {p: p.read_bytes() for p in small}
    for i, p in enumerate(small * len(damage)):
        p.write_bytes(damage[i % len(damage)](good[p]))
        assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN
        assert p.read_bytes() == good[p]  # parsed / verified again and rewritten
    # an intact entry for another text (renamed into place) is a miss too
    order = small[0]
    order.write_bytes(hashlib.sha256(b'{"text": "P0V(i) Q0K(i+1)", "steps": []}').digest()
                      + b'{"text": "P0V(i) Q0K(i+1)", "steps": []}')
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN
    assert order.read_bytes() == good[order]
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN


def test_record_with_valid_digest_but_broken_payload_is_a_miss(tmp_path, monkeypatch):
    """In-process: a record behind a correct sha256 but with a broken marshal part, a stale
    source checksum, or another format (a cache written by a buggy or older writer) loads as a
    miss, never raises."""
    import jinja2

    from b200c import compile_cache

    monkeypatch.setenv("B200C_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("B200C_COMPILE_CACHE", raising=False)
    templates = {"t.j2": "{% for i in range(n) %}{{ i }},{% endfor %}"}

    def render():
        env = jinja2.Environment(loader=jinja2.DictLoader(templates),
                                 bytecode_cache=compile_cache.template_bytecode_cache("test"))
        return env.get_template("t.j2").render(n=3)

    assert render() == "0,1,2,"
    (entry,) = (tmp_path / "compile").glob("templates-*/*.jinja2-bytecode")
    record = entry.read_bytes()[32:]
    head = compile_cache._TEMPLATE_RECORD
    checksum, _, code = record[len(head):].partition(b"\n")
    old_format = jinja2.bccache.bc_magic + b"\x80\x02X\x28\x00\x00\x00" + checksum + b"." + code
    for broken in (head + checksum + b"\nnot marshal", record[:-8], head, head + checksum,
                   head + b"0" * len(checksum) + b"\n" + code, old_format):
        entry.write_bytes(hashlib.sha256(broken).digest() + broken)
        assert render() == "0,1,2,"
        assert entry.read_bytes()[32:] == record  # rewritten


def test_unwritable_or_disabled_cache_still_compiles(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(blocker / "sub")}) == GOLDEN
    root = tmp_path / "off"
    assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root), "B200C_COMPILE_CACHE": "0"}) == GOLDEN
    assert not (root / "compile").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write a read-only folder")
def test_read_only_cache_folder(tmp_path):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        assert _compile(tmp_path, {"B200C_CACHE_DIR": str(root)}) == GOLDEN
    finally:
        root.chmod(0o700)


def test_known_issue_order_does_not_import_lark(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
           "B200C_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import sys\nfrom b200c.cli import main\n"
            f"assert main(['compile', {str(EXAMPLE)!r}, '-o', {str(tmp_path / 'k.cu')!r}]) == 0\n"
            "print('lark' in sys.modules)\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                           timeout=120) for _ in range(2)]
    assert [(r.returncode, r.stdout.split()[-1]) for r in runs] == [(0, "True"), (0, "False")], runs[-1].stderr


def test_compile_does_not_import_torch(tmp_path):
    code = ("import sys\nimport b200c\nassert 'torch' not in sys.modules, 'import b200c imported torch'\n"
            "from b200c.cli import main\n"
            f"assert main(['compile', {str(EXAMPLE)!r}, '-o', {str(tmp_path / 'k.cu')!r}]) == 0\n"
            f"assert main(['compile', {str(ROOT / 'examples/hopper/h11_persistent.py')!r}, '--target', 'sm90a', "
            f"'-o', {str(tmp_path / 'h.cu')!r}]) == 0\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy'))\n"
            "assert not bad, bad\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.cu").read_text() == GOLDEN


@pytest.mark.parametrize("xdg,home", [(None, "/home/u"), ("", "/home/u/"), ("/x/cache", "/home/u"),
                                      ("rel/cache", "/home/u"), ("  ", "/home/u"), (None, "relative"), (None, None)])
def test_cache_root_matches_platformdirs(monkeypatch, xdg, home):
    """compile_cache finds the user cache folder without importing platformdirs where the answer is plain."""
    import platformdirs

    from b200c import compile_cache

    monkeypatch.delenv("B200C_CACHE_DIR", raising=False)
    for name, value in (("XDG_CACHE_HOME", xdg), ("HOME", home)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    try:
        want = platformdirs.user_cache_dir("b200c")
    except RuntimeError:  # no usable home: platformdirs refuses, and so does cache_root
        with pytest.raises(RuntimeError):
            compile_cache.cache_root()
        return
    assert str(compile_cache.cache_root()) == want
