#!/usr/bin/env python3
"""Provision a Chameleon GPU node for the lab (thin wrapper over servelab.provision; see its docstring).

    # runs here; parameters from flags or SERVELAB_CHI_* env; --dry-run contacts nothing
    .venv/bin/python scripts/provision_chameleon.py --dry-run --project CHI-123456 --key-name my-key \
        --repo-url https://github.com/me/servelab.git --stacks 04-triton
    source CHI-123456-openrc.sh && .venv/bin/pip install -r requirements-chameleon.txt
    .venv/bin/python scripts/provision_chameleon.py --project CHI-123456 --key-name my-key --repo-url …
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servelab.provision import ENV, NodeSpec, ProvisionError, provision  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, var in ENV.items():
        ap.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help=f"(env {var})")
    ap.add_argument("--dry-run", action="store_true", help="validate and print the plan; contact nothing")
    args = vars(ap.parse_args(argv))
    dry_run = args.pop("dry_run")
    try:
        spec = NodeSpec.from_env(**{k: v for k, v in args.items() if v is not None})
        result = provision(spec, dry_run=dry_run)
    except (ValueError, ProvisionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if dry_run:
        print(result.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
