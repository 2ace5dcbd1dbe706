"""Syntax of an issue order: text -> its steps, each ``(kind, q, offset, source)``.

The grammar is ``issue_order.lark``, parsed with lark (LALR; its tables are
cached on disk by lark's own ``cache`` option). A parse result is also kept,
in process and in the on-disk compile cache (:mod:`b200c.compile_cache`),
under a sha256 of the grammar, of this module's source and of the text, so a
fresh process that meets a known text neither imports lark nor parses. An
entry holds the text it was made for behind a sha256 and is checked on read
(a damaged or foreign entry is a miss: the text is parsed again and the entry
rewritten). Texts that do not parse are never cached.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from ..errors import IssueOrderError

_GRAMMAR_FILE = Path(__file__).with_name("issue_order.lark")


@functools.lru_cache(maxsize=1)
def _grammar() -> str:
    return _GRAMMAR_FILE.read_text()


@functools.lru_cache(maxsize=1)
def _salt() -> bytes:
    """What a parse result depends on besides the text: the grammar and this module's code."""
    return hashlib.sha256(_grammar().encode() + b"\0" + Path(__file__).read_bytes()).digest()


@functools.lru_cache(maxsize=1)
def _parser():
    import lark

    from ..compile_cache import compile_cache_dir

    # lark's cache file starts with a sha256 of the grammar, the options, lark's and Python's
    # versions; a mismatching or unreadable file is rebuilt, a failed write skipped
    folder = compile_cache_dir("grammar", lark.__version__)
    cache = str(folder / "issue_order.lark-cache") if folder is not None else False
    return lark.Lark(_grammar(), parser="lalr", cache=cache)


def _parse(text: str) -> tuple:
    import lark

    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        col = getattr(e, "column", "?")
        raise IssueOrderError(
            f"issue order {text!r} does not parse at column {col}: steps look like "
            f"'Q0K(i)', 'P1V(i+1)' (QqK = S_q = Q_q K^T, PqV = O_q += P_q V); fix issue_order or set it to None"
        ) from None
    raw = []
    for node in tree.children:
        q = int(node.children[0])
        idx = node.children[1].children
        off = 0
        if idx:
            off = int(idx[1]) * (1 if str(idx[0]) == "+" else -1)
        kind = "QK" if node.data == "qk" else "PV"
        sign = "" if off == 0 else (f"+{off}" if off > 0 else str(off))
        src = f"Q{q}K(i{sign})" if kind == "QK" else f"P{q}V(i{sign})"
        raw.append((kind, q, off, src))
    return tuple(raw)


def _decode(payload: bytes, text: str):
    """The steps stored in ``payload`` if it is a well-formed entry for ``text``, else None."""
    try:
        d = json.loads(payload)
        if d["text"] != text:
            return None
        steps = tuple((k, q, off, src) for k, q, off, src in d["steps"])
    except (ValueError, KeyError, TypeError):
        return None
    ok = all(k in ("QK", "PV") and type(q) is int and type(off) is int and type(src) is str
             for k, q, off, src in steps)
    return steps if ok else None


@functools.lru_cache(maxsize=256)
def parse_steps(text: str) -> tuple:
    """The steps of issue order ``text`` in order, each ``(kind, q, offset, source)``:
    kind ``"QK"`` or ``"PV"``, Q stage ``q``, K/V tile offset as written
    (``i+1`` -> 1), and the step as normalized text (``Q0K(i+1)``).

    Raises:
        IssueOrderError: ``text`` does not parse (the message gives the column).
    """
    from ..compile_cache import compile_cache_dir, read_entry, write_entry

    folder = compile_cache_dir("orders")
    key = hashlib.sha256(_salt() + b"\0" + text.encode()).hexdigest()
    if folder is not None:
        payload = read_entry(folder, key)
        steps = _decode(payload, text) if payload is not None else None
        if steps is not None:
            return steps
    steps = _parse(text)
    if folder is not None:
        write_entry(folder, key, json.dumps({"text": text, "steps": steps}).encode())
    return steps
