"""The lab: papermill runner, places, local stack lifecycle, report.

    runner.py      `servelab lab run`: plan (profile, --only, --param, place) → stack → papermill → report
    params.py      profiles smoke | default | full; `--param key=value` (YAML-typed); per-notebook injection
    places.py      where the servers run (local | node): endpoints, model names, a notebook's defaults;
                   `attach()` points bench measurements at an already running server
    stack.py       the run's loopback stack: export, stage Triton into results/<run-id>/models, service + Triton
    notebooks.py   discovery, `--only` selection, jupytext .py → .ipynb sync (no outputs), executing one
    step.py        `Step`: what a notebook uses to file tagged tables, plots, not-run statements, its finding
    run_report.py  report.md / report.html of a run from what is on disk (works after a failure too)
    configcheck.py checks of rendered configs where the hardware is missing (TensorRT EP settings)
    cli.py         the `servelab lab …` commands

Measurement, records, table formatting and plots live in servelab.bench; servers in servelab.service and
servelab.triton; provisioning in servelab.provision. The lab only orders and files them.
"""
