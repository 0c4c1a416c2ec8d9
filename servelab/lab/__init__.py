"""The lab: papermill runner, targets, local stack lifecycle, report."""
