"""The README stays true: every repository path in backticks in "Where each blog stage lives" (and the
Layout block's folders) exists, and every ``file:name`` names something defined in that file; the two
set-up commands are kept word for word; it reads in ten minutes without commit hashes; every docs/ page
it names exists; every ``b200c`` command line parses; and every Python snippet runs as written (the
schedule file from a folder beside examples/, the rest on the CPU with the stand-in CUDA driver posing
as a Hopper GPU), so none can rot."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(title)
    nxt = README.find("\n## ", start + len(title))
    return README[start: nxt if nxt >= 0 else None]


def test_stage_map_paths_exist():
    refs = re.findall(r"`((?:b200c|examples|scripts|tests|docs)/[^`\s]+)`", _section("## Where each blog stage lives"))
    assert len(refs) > 30
    missing, undefined = [], []
    for ref in refs:
        path, _, name = ref.partition(":")
        f = ROOT / path
        if not f.exists():
            missing.append(ref)
        elif name and not re.search(rf"\b(def|void|float2|float|class)\s+{re.escape(name)}\b|\b{re.escape(name)}\(",
                                    f.read_text()):
            undefined.append(ref)
    assert not missing, f"README names paths that do not exist: {missing}"
    assert not undefined, f"README names functions not defined there: {undefined}"


def test_layout_folders_exist():
    layout = _section("## Layout")
    entries = re.findall(r"^    ((?:b200c|examples|scripts|tests|docs)/[\w/.*]*)", layout, flags=re.M)
    assert len(entries) >= 8
    assert [e for e in entries if not any(ROOT.glob(e.rstrip("/")))] == []


# ---- the README a newcomer reads (issue 34): short, current, and every snippet runs ----------------

SETUP_COMMANDS = ('pip install -e . && b200c compile examples/07_compute_pipeline.py -o k07.cu',
                  'pip install -e ".[dev]" && python -m pytest -q')


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)


def _shell_lines() -> list[str]:
    """The command lines of the README's indented (4-space) blocks, comments removed."""
    lines = []
    for block in re.findall(r"(?:^    \S.*\n)+", README, flags=re.M):
        for ln in block.splitlines():
            ln = ln[4:].split("  #")[0].strip()
            if ln and not ln.startswith(("b200c/", "examples/", "scripts/", "tests/", "docs/", "#")) \
                    and not ln[0].isspace() and re.match(r"(pip|python|python3|b200c)\b", ln):
                lines.append(ln)
    return lines


def test_setup_commands_are_kept_word_for_word():
    setup = _section("## Set up")
    for cmd in SETUP_COMMANDS:
        assert f"\n    {cmd}\n" in setup, cmd


def test_readme_reads_in_ten_minutes_and_cites_no_history():
    words = len(README.split())
    # ten minutes at about 240 words a minute (the stage table's paths are skimmed; a new user's trial read
    # 2,454 words in about 10 minutes skimming it, 11-12 reading closely)
    assert words <= 2400, f"README has {words} words (about 240 a minute: keep it under ten minutes)"
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", README) if re.search(r"\d", w) and re.search(r"[a-f]", w)]
    assert hashes == [], f"commit hashes belong in docs/: {hashes}"
    assert "shared" not in README.replace("shared memory", "")


def test_first_screen_says_what_runs_where():
    first = README[:README.index("## Set up")]
    for needle in ("H100 / H200", "B200", "not yet run on a B200", "correctness only", "schedule=None",
                   "https://github.com/IaroslavElistratov/b200-attention"):
        assert needle in first, needle


def test_docs_the_readme_names_exist():
    named = set(re.findall(r"\bdocs/[\w.-]+\.(?:md|png|json)", README))
    assert "docs/runtime.md" in named and "docs/capstone.md" in named
    assert sorted(n for n in named if not (ROOT / n).exists()) == []


def test_every_command_line_parses():
    """Each ``b200c ...`` line of the README is accepted by the argument parser as written (nothing
    runs); ``pip``/``python`` lines name files that exist."""
    from b200c.cli import make_parser

    parser = make_parser()
    lines = _shell_lines()
    assert len([ln for ln in lines if "b200c " in ln]) >= 10
    for line in lines:
        for part in line.split("&&"):
            words = part.split()
            if words[0] == "b200c":
                parser.parse_args(words[1:])  # SystemExit (exit 2) on an option the parser does not know
            elif words[0].startswith("python") and words[1] != "-m":
                assert (ROOT / words[1]).exists(), line


def _on_cpu(src: str) -> str:
    """A snippet as it runs on the CPU under the stand-in driver: device="cuda" becomes "cpu"."""
    out = src.replace('device="cuda"', 'device="cpu"')
    assert "cuda" not in re.sub(r"#.*", "", out).replace("CUDA", ""), "a snippet uses CUDA another way"
    return out


@pytest.fixture
def hopper_on_cpu(monkeypatch):
    """The stand-in driver as an H100/H200 (target sm90a: what ``target="auto"`` picks on a Hopper
    GPU), run from the repository root; torch's SDPA restored afterwards."""
    import torch
    import torch.nn.functional as F

    from b200c.codegen.targets import resolve
    from b200c.runtime import api, fake_driver

    real = api._default_target
    monkeypatch.setattr(api, "_default_target", lambda dev, target: resolve("sm90a") if target == "auto"
                        else real(dev, target))
    monkeypatch.setattr(api, "_default_targets", {})
    monkeypatch.setattr(api, "_defaults", {})  # the presets cached per (device, target): sm90a ones here
    monkeypatch.setattr(F, "scaled_dot_product_attention", F.scaled_dot_product_attention)
    monkeypatch.chdir(ROOT)
    torch.manual_seed(0)
    with fake_driver.install(target="sm90a") as fd:
        try:
            yield fd
        finally:
            try:
                from torch.nn.attention import restore_flash_attention_impl

                restore_flash_attention_impl()
            except (ImportError, RuntimeError):
                pass


def test_the_schedule_snippet_runs(tmp_path):
    import b200c

    (block,) = [b for b in _python_blocks() if b.startswith("# my_schedule.py")]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    f = tmp_path / "my_schedule.py"
    f.write_text(block)
    s = b200c.load_schedule_file(f)
    base = b200c.load_schedule_file(ROOT / "examples/07_compute_pipeline.py")
    assert s.kv_stages == 4 != base.kv_stages and s.name == "ring4"
    assert s.replace(kv_stages=base.kv_stages, name=base.name, blog_stage=base.blog_stage) == base
    assert "ring4" in b200c.generate(s).source


def test_every_other_snippet_runs_as_written(hopper_on_cpu, capsys):
    """The Python blocks after the schedule file, in order, in one namespace, on the CPU with the
    stand-in driver as a Hopper GPU: none raises, each that calls attention launches a kernel (the
    built-in sm90a schedule where no schedule is named), and the mod's CUDA is printed."""
    import warnings

    import b200c

    fd = hopper_on_cpu
    blocks = [b for b in _python_blocks() if not b.startswith("# my_schedule.py")]
    assert len(blocks) >= 6
    ns: dict = {}
    for block in blocks:
        n = len(fd.launches)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            exec(compile(_on_cpu(block), "README.md", "exec"), ns)
        calls = re.findall(r"b200c\.(attention\w*)\(|(scaled_dot_product_attention)\(q,", block)
        # the provider's training snippet is not checked here: on the CPU torch's SDPA takes its CPU kernel and
        # never reaches the flash provider; tests/gpu/test_torch_flash_gpu.py runs it and names b200c's kernel
        if calls and "requires_grad" not in block:
            assert len(fd.launches) > n, f"no kernel launched by:\n{block}"
            assert not [w for w in seen if issubclass(w.category, b200c.FallbackWarning)], block
    assert ns["o"].dtype.is_floating_point
    names = {L.kernel.name for L in fd.launches}
    assert b200c.default_schedule(128, target="sm90a").name in names  # schedule=None: the Hopper preset
    assert "hopper_persistent" in names                                 # the named schedule file
    assert any(L.kernel.split_kv for L in fd.launches)                  # the KV-cache step: split-KV
    printed = capsys.readouterr().out
    assert "score_mod" in printed and "__global__" in printed
