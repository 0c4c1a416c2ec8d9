"""The GPU reference figures beside a notebook's headline: built from the committed reference run's records,
labelled with the card, the date and the folder, and absent where that run measured nothing for the question."""

from __future__ import annotations

import json

from servelab.bench.results.reference import reference_line


def test_each_line_names_the_reference_machine_and_comes_from_its_records():
    line = reference_line("03")
    assert line.startswith("NVIDIA H100 80GB HBM3, 2026-11-26, random-init (seed 0) (reference/nvidia-h100-80gb-hbm3)")
    assert "30,141 img/s (bf16, batch 256, input already on the GPU)" in line  # the fastest eager record
    assert "9,280 img/s fed from host memory" in line
    assert "Triton on the GPU was not measured" in reference_line("04")  # its two points returned only errors
    assert reference_line("00") is None and reference_line("07") is None  # nothing measured for those


def test_a_newer_reference_run_is_the_one_shown(tmp_path):
    from servelab.bench.results.records import Run

    def run(name, date, img_s):
        r = Run(name, root=tmp_path)
        env = json.loads((r.dir / "environment.json").read_text())
        env.update(captured=f"{date}T00:00:00+00:00", gpus=[{"name": f"GPU {name}"}])
        (r.dir / "environment.json").write_text(json.dumps(env))
        for precision, batch, v in (("bf16", 1, img_s / 100), ("bf16", 256, img_s)):
            r.record("gpu-raw", kind="raw", server="in-process", engine="torch", provider="cuda", batch=batch,
                     precision=precision, variant="eager", throughput_img_s=v)
            r.record("gpu-raw-host", kind="raw", server="in-process", engine="torch", provider="cuda", batch=batch,
                     precision=precision, throughput_img_s=v / 3)

    run("old", "2026-01-01", 1000.0)
    run("new", "2026-06-01", 2000.0)
    line = reference_line("03", root=tmp_path)
    assert line.startswith("GPU new, 2026-06-01") and "2,000 img/s" in line
