"""Near-duplicate photo finder: scan, embed, group, review, evaluate."""
