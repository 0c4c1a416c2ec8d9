"""Every relative link in the course's prose (the Markdown files and the notebooks' Markdown cells) points at a file
that exists, and a `#fragment` at one of that file's headings: a student who follows "see TROUBLESHOOTING" from a
failing cell must land on the fix, not at the top of a page."""

from __future__ import annotations

import re
from pathlib import Path

from servelab.lab.notebooks import discover
from servelab.lab.prose import markdown_cells

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
FENCE = re.compile(r"^\s*```")


def prose_files() -> list[Path]:
    md = [p for p in ROOT.glob("*.md")] + sorted((ROOT / "docs").glob("*.md")) + [ROOT / "data" / "README.md"]
    return [p for p in md if p.is_file()] + list(discover())


def markdown_lines(path: Path) -> list[str]:
    """The file's Markdown outside code fences (a notebook's: its Markdown cells, as the prose rule reads them)."""
    text = "\n".join(markdown_cells(path)).splitlines() if path.suffix == ".py" else path.read_text().splitlines()
    out, fenced = [], False
    for line in text:
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for line in markdown_lines(path) if (m := re.match(r"#{1,6}\s+(.*)", line))}


def test_every_relative_link_reaches_its_file_and_heading():
    broken = []
    for path in prose_files():
        for line in markdown_lines(path):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue  # a web address, or a heading of this same page (JupyterLab renders its own)
                file_part, _, fragment = target.partition("#")
                dest = (path.parent / file_part).resolve()
                where = f"{path.relative_to(ROOT)}: ({target})"
                if not dest.exists():
                    broken.append(f"{where}: no such file")
                elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                    broken.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_slug_rule_matches_githubs_for_the_headings_the_course_links():
    assert slug("A load without `config` keeps the configuration you loaded") == \
        "a-load-without-config-keeps-the-configuration-you-loaded"
    assert slug("perf_analyzer reports nothing") == "perf_analyzer-reports-nothing"
    assert slug("503: the service is overloaded, or still loading") == "503-the-service-is-overloaded-or-still-loading"
