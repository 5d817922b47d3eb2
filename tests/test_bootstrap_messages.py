"""`make install` says what it does without sounding like a failure (issue 57, item 6): every line
scripts/bootstrap.sh prints on its normal paths reads as progress; only its error exit says "error"."""
from __future__ import annotations

import re
from pathlib import Path

BOOTSTRAP = Path(__file__).resolve().parents[1] / "scripts" / "bootstrap.sh"


def _messages() -> list[tuple[str, bool]]:
    """Every ``[bootstrap]`` line the script can print, and whether it goes to stderr."""
    out = []
    for line in BOOTSTRAP.read_text().splitlines():
        m = re.search(r"""(?:echo|print\()\s*(["'])(\[bootstrap\].*?)\1""", line)
        if m:
            out.append((m.group(2), ">&2" in line))
    return out


def test_normal_messages_do_not_read_like_failures():
    msgs = _messages()
    assert len(msgs) >= 10
    normal = [m for m, err in msgs if not err]
    bad = [m for m in normal if re.search(r"\b(fail\w*|error|cannot|broken)\b", m, re.I)]
    assert bad == []
    assert [m for m, err in msgs if err] and all("error" in m for m, err in msgs if err)


def test_the_torchvision_hook_line_says_what_is_done_and_that_it_is_expected():
    line = next(m for m, _ in _messages() if "import hook" in m)
    assert "CPU torch" in line and "nms, qnms" in line and "expected" in line and "no action needed" in line
