"""The Python API reference (``make api-docs``, pdoc) builds without a warning, and every
link in it and every ``sparkcq.*`` name its docstrings cite leads somewhere."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pdoc

ROOT = Path(__file__).parents[1]


def api_modules() -> list[str]:
    """The modules of the reference, as the Makefile lists them."""
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines()
                if x.startswith("API_MODULES :="))
    return line.split(":=", 1)[1].split()


def test_the_api_reference_builds_and_its_references_resolve(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pdoc.pdoc(*api_modules(), output_directory=tmp_path)
    broken = []
    for page in sorted(tmp_path.rglob("*.html")):
        html = page.read_text()
        ids = set(re.findall(r'id="([^"]+)"', html))
        for href in re.findall(r'href="([^"$]+)"', html):
            if href.startswith(("http://", "https://")):
                continue
            path, _, anchor = href.partition("#")
            target = (page.parent / path) if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(tmp_path)}: {href}")
            elif anchor and anchor not in (ids if not path else
                                           set(re.findall(r'id="([^"]+)"', target.read_text()))):
                broken.append(f"{page.relative_to(tmp_path)}: {href}")
        # a dotted name of ours that pdoc could not link names nothing in the reference
        broken += [f"{page.relative_to(tmp_path)}: unresolved {m}"
                   for m in re.findall(r"<code>(sparkcq(?:\.\w+)+)</code>", html)]
    assert (tmp_path / "sparkcq" / "engine.html").exists()
    assert broken == []
