"""How results are read and said: the verdict, band and ratio rules, the sentences rendered from them, tables,
plots and the headlines a run stores for comparison.

    write_report(run);  markdown_table(rows);  goals_table(records);  cost_table(records, price_per_hour)
    band(x, metric) -> (value, low, high);  ratio_reading(record) / apart_reading(a, b, metric) -> Verdict
    versus(name_a, a, name_b, b, metric=…, unit=…), ratio_sentence(record), leader({name: record})
"""

from servelab.bench.report.headlines import (
    claim,
    compare_headlines,
    differences,
    emulated_figures,
    load_headlines,
    record_headline,
)
from servelab.bench.report.plots import (
    plot_batch_histogram,
    plot_latency_throughput,
    plot_scaling,
    plot_server_breakdown,
    pyplot,
    save_figure,
    write_plots,
)
from servelab.bench.report.sentences import (
    idle_sentence,
    leader,
    ratio_figure,
    ratio_sentence,
    ratio_verdict,
    said,
    versus,
)
from servelab.bench.report.tables import (
    COLUMNS,
    cost_per_1000,
    cost_table,
    csv_text,
    flat_rows,
    frame_markdown,
    goals_table,
    markdown_table,
    settling_rows,
    table_frame,
    write_report,
    write_tables,
)
from servelab.bench.report.verdicts import (
    INDISTINGUISHABLE,
    MIN_EFFECT_APART,
    MIN_EFFECT_INTERLEAVED,
    Reading,
    Verdict,
    Why,
    apart,
    apart_reading,
    band,
    close,
    has_band,
    machine_drift,
    margin,
    overlap,
    ratio_reading,
    read_apart,
    read_ratio,
    set_machine_drift,
    too_close,
)

__all__ = [
    "claim", "compare_headlines", "differences", "emulated_figures", "load_headlines", "record_headline",
    "plot_batch_histogram", "plot_latency_throughput", "plot_scaling", "plot_server_breakdown", "pyplot",
    "save_figure", "write_plots", "idle_sentence", "leader", "ratio_figure", "ratio_sentence", "ratio_verdict",
    "said", "versus", "COLUMNS", "cost_per_1000", "cost_table", "csv_text", "flat_rows", "frame_markdown",
    "goals_table", "markdown_table", "settling_rows", "table_frame", "write_report", "write_tables",
    "INDISTINGUISHABLE", "MIN_EFFECT_APART", "MIN_EFFECT_INTERLEAVED", "Reading", "Verdict", "Why", "apart",
    "apart_reading", "band", "close", "has_band", "machine_drift", "margin", "overlap", "ratio_reading",
    "read_apart", "read_ratio", "set_machine_drift", "too_close",
]
