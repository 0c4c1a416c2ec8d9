"""The prose rule on tiny inputs: a figure or a direction about this machine is flagged unless the sentence
quotes a named source, asks a question or states a setting."""

from __future__ import annotations

import pytest

from servelab.lab.prose import claim, claims, narrative_words, notebook_claims, sentences


@pytest.mark.parametrize("sentence, what", [
    ("Two single-thread instances embedded 21.5 images/s where one two-thread session did 17.6–18.4.", "21.5 images/s"),
    ("One image takes about 88 ms on one of these cores.", "88 ms"),
    ("The service reached 26.1 img/s on this machine.", "26.1 img/s"),
    ("Batching gained 1.5× from batch 1 to batch 8.", "1.5×"),
    ("The queue held 91.7 % of the time.", "91.7 %"),
    ("A cold build took 60 s.", "60 s"),
    ("Triton answered 52 req/s.", "52 req/s"),
    ("Batch 1 saturates this CPU, so a bigger batch costs proportionally more.", "saturates"),
    ("Here the int8 engine is faster than fp32.", "faster"),
    ("On this machine the service hardly gains from a batch.", "hardly"),
])
def test_a_figure_or_a_direction_about_this_machine_is_flagged(sentence, what):
    assert claim(sentence) == what


@pytest.mark.parametrize("sentence", [
    "The photo-dedup \"Technical Deep-Dive\" measured 31.1 ms with the CUDA EP.",  # a write-up named
    "The source measured 1.8× on four RTX 4080s.",
    "The H100 reference reached 2,400 img/s (`reference/nvidia-h100-80gb-hbm3/`).",  # a reference path
    "Those figures, 57 req/s on a P100, are quoted in SOURCES.md.",
    "Triton's guide measured 10 ms ([model configuration](https://docs.nvidia.com/x)).",  # a web page
    "Will the service add more or less than 10 % to the p50?",  # a question asked before measuring
    "By more or less than 5 %?",
    "The batcher waits up to `max_delay_ms` (2 ms by default) for others to join.",  # settings, not measurements
    "Each window lasts at least 2 s.",
    "The HPA aims at 60 % of the CPU request.",
    "602 KB is 48 ms at 100 Mbit/s.",
    "A batch-1 request carries 3×224×224×4 = 602,112 bytes.",  # a shape, not a speed-up
    "The engine runs `SERVELAB_MAX_IMAGES` (32) images.",
    "Separate instances never wait for each other.",  # a mechanism, no figure, no comparison
    "A GPU is faster than a CPU at a batch of 64.",  # a direction, but not about this machine
    "At 5 clients, most answers will be instant 503s.",  # a status code, not seconds
])
def test_quoted_asked_or_set_figures_pass(sentence):
    assert claim(sentence) is None


def test_a_source_heading_covers_its_section_until_the_next_heading():
    md = ("## Compared with the source material\nOn an A100 it took 182.9 ms.\n\nIts client did 43.6 img/s.\n\n"
          "## Next\nThis run reached 20.0 img/s.")
    assert [c.what for c in claims(md)] == ["20.0 img/s"]


def test_code_blocks_and_diagrams_are_not_prose():
    md = "Text.\n\n```mermaid\nA[88 ms] --> B\n```\n\n```bash\nsleep 5 s\n```\n"
    assert claims(md) == []


def test_sentences_split_at_stops_list_items_and_headings():
    md = "# Title\nOne. Two (three).\n- item four\n- item five"
    assert [s for s, _ in sentences(md)] == ["One.", "Two (three).", "- item four", "- item five"]


def test_notebook_claims_reads_the_markdown_cells_of_a_jupytext_source(tmp_path):
    src = tmp_path / "99_example.py"
    src.write_text('# %% [markdown]\n# # 99\n# It ran at 21.5 images/s here.\n\n# %%\nx = "30 ms in code is not prose"\n')
    assert [c.what for c in notebook_claims(src)] == ["21.5 images/s"]


def test_narrative_words_count_the_markdown_cells_only(tmp_path):
    src = tmp_path / "99_example.py"
    src.write_text('# %% [markdown]\n# # 99 · Title\n# Five words in this line.\n\n'
                   '# %%\nx = "code is not read as prose"\n\n# %% [markdown]\n# Three more words.\n')
    assert narrative_words(src) == 4 + 5 + 3  # "#", "99", "·", "Title"; code cells are not read
