"""Every link in the project's Markdown (README, changelog, docs, benchmark reports) that
names a file names one that exists: a reader following a link finds what it promises.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md"),
                *(ROOT / "benchmarks").rglob("*.md")])
#: ``[text](target)`` and ``![alt](target)``, outside fenced code
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def file_links(page: Path) -> list[str]:
    """The targets of ``page``'s links that name a file (not a URL, not an anchor alone)."""
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)
            and not t.startswith("#")]


def test_every_linked_file_exists() -> None:
    missing = [f"{page.relative_to(ROOT)}: {target}" for page in PAGES
               for target in file_links(page)
               if not (page.parent / target.split("#")[0]).exists()]
    assert len(PAGES) > 10  # README, changelog, docs and reports were found
    assert not missing, f"links to files that do not exist: {missing}"


def test_the_check_reads_links_as_written(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("[a](there.md#x) ![b](plot.png) [c](https://x.org) [d](#y)\n"
                    "```\n[e](in-code.md)\n```\n")
    assert file_links(page) == ["there.md#x", "plot.png"]
