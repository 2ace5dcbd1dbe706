"""README's code map stays true: every repository path in backticks in "Where each blog stage lives"
(and the Layout block's folders) exists, and every ``file:name`` names something defined in that file."""
import re
from pathlib import Path

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
