"""Static prose in a lesson states no figure or direction about the machine it runs on: the run computes those
(through `step.versus` / `step.ratio` / `step.leader` / `grade`), or the sentence quotes a named source.

    claims(markdown)              # sentences that break the rule, each with the figure or word that does
    notebook_claims(path)         # the same over a notebook's markdown cells (.py jupytext source or .ipynb)
    narrative_words(path)         # how many words a student reads in it: the course's length budget

A sentence (a heading too) breaks the rule when it holds a measured-looking figure (a number with img/s, images/s,
req/s, infer/s, ms, s, × or %) or, speaking of this machine ("here", "this machine", "these cores", "a two-core
CPU", …), a comparison word (faster, slower, ahead, gains, hardly, saturates, …). It quotes a named source, and so
passes, when it names `SOURCES.md` or a `reference/…` path, or links a web page; every sentence under a "Compared
with the source material" heading quotes the write-ups that `notebooks/SOURCES.md` lists. A figure that is a setting
rather than a measurement ("2 ms by default", "at least 2 s") passes too: a setting is not something the machine
did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# a number (or a range of two), then a unit of something measured; "×" followed by a digit is a shape (3×224×224),
# and seconds need a space ("503s" are status codes)
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_FIGURE = rf"(?<![\w.]){_NUMBER}(?:\s*[–-]\s*{_NUMBER})?"
FIGURE = re.compile(rf"{_FIGURE}\s*(?:img/s|images?/s|req/s|infer(?:ences)?/s|ms\b|×(?!\s*\d)|%)|{_FIGURE}\s+s\b")
COMPARISON = re.compile(r"\b(?:faster|slower|ahead|gains?|gained|hardly|saturat\w*|outperform\w*|overtakes?)\b", re.I)
THIS_MACHINE = re.compile(r"\b(?:here|this machine|this (?:cpu|vm|laptop|host)|these (?:cpu )?cores|"
                          r"this run|on loopback|(?:a|this|the) (?:one|two|four|eight|\d+)-core "
                          r"(?:cpu|vm|machine|laptop|host))\b", re.I)
# a figure that is a knob, a limit or a default, not a measurement
SETTING = re.compile(r"\b(?:by default|defaults? to|at least|at most|up to|no more than|each way|round trip|"
                     r"every \d|limit|timeout|budget|target|request|margin|delay of|or more|or less|[MG]bit/s)", re.I)
# the write-ups notebooks/SOURCES.md lists, by the names the lessons give them
SOURCE_NAMES = ("the source", "photo-dedup", "Chameleon lab", "Technical Deep-Dive", "optimisation report", "Step checklist")
SOURCE_MARKER = re.compile(r"SOURCES\.md|reference/|\]\(https?://|" + "|".join(map(re.escape, SOURCE_NAMES)), re.I)
SOURCE_HEADING = re.compile(r"^#+.*compared with the source material", re.I)


@dataclass(frozen=True)
class Claim:
    """A sentence of static prose that states something about this machine, and what in it does."""

    sentence: str
    what: str  # the figure or the comparison word

    def __str__(self) -> str:
        return f"{self.what!r} in: {self.sentence}"


def _plain(markdown: str) -> str:
    """Markdown without fenced blocks (code, diagrams), HTML comments and the text of inline code spans."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    return text


def sentences(markdown: str, headings: bool = False) -> list[tuple[str, bool]]:
    """The prose's sentences, each with whether it stands under a heading that quotes the source material.
    A heading, a list item and a blank line end a sentence as a full stop does; `headings`: the headings'
    text is returned too, as sentences (a heading states things as well)."""
    out: list[tuple[str, bool]] = []
    quoting = False
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.)\s)|\n(?=#)", _plain(markdown)):
        block = block.strip()
        if not block:
            continue
        if block.startswith("#"):
            heading, _, block = block.partition("\n")
            quoting = bool(SOURCE_HEADING.match(heading))
            if headings:
                out.append((heading.lstrip("#").strip(), quoting))
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z*(\[`\"'])", " ".join(block.split())):
            if sentence.strip():
                out.append((sentence.strip(), quoting))
    return out


def claim(sentence: str) -> str | None:
    """What in `sentence` states a figure or a direction about this machine (None: nothing, or a named source)."""
    if SOURCE_MARKER.search(sentence) or sentence.rstrip("*_ )").endswith("?"):  # quoted, or a question asked
        return None
    text = re.sub(r"`[^`]*`", " ", sentence)  # a figure inside inline code is a name or a setting
    for m in FIGURE.finditer(text):
        if not SETTING.search(text[max(0, m.start() - 40):m.end() + 25]):
            return m.group(0).strip()
    if THIS_MACHINE.search(text):
        m = COMPARISON.search(text)
        if m:
            return m.group(0)
    return None


def claims(markdown: str) -> list[Claim]:
    """Every sentence of `markdown` that states a figure or direction about this machine without a named source."""
    found = []
    for sentence, quoting in sentences(markdown, headings=True):
        what = None if quoting else claim(sentence)
        if what:
            found.append(Claim(sentence, what))
    return found


def markdown_cells(path: str | Path) -> list[str]:
    """The markdown cells of a notebook: a jupytext percent `.py` source or an `.ipynb` (executed or not)."""
    import jupytext

    return [cell.source for cell in jupytext.read(Path(path)).cells if cell.cell_type == "markdown"]


def notebook_claims(path: str | Path) -> list[Claim]:
    """The rule over a whole notebook: its markdown cells in order (a source heading holds across cells until
    the next heading)."""
    return claims("\n\n".join(markdown_cells(path)))


def narrative_words(path: str | Path) -> int:
    """The words of a notebook's markdown cells, split at whitespace: headings, lists and diagrams included,
    code cells and their output not. It is what a student reads, and what the course's length budget counts."""
    return sum(len(cell.split()) for cell in markdown_cells(path))
