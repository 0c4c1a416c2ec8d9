"""How results are read and said: the verdict, band and ratio rules, the sentences rendered from them, tables,
plots and the headlines a run stores for comparison.

    write_report(run);  markdown_table(rows);  goals_table(records);  cost_table(records, price_per_hour)
    band(x, metric) -> (value, low, high);  ratio_reading(record) / apart_reading(a, b, metric) -> Verdict
    versus(name_a, a, name_b, b, metric=…, unit=…, drift=…), ratio_sentence(record), leader({name: record}, drift=…)
    versus_finding / ratio_finding / leader_finding -> Finding (the fields a headline stores);  say(finding)
    grade(ratio, lo, hi, margin=…, target=…) -> Grade;  words(grade, target=…)   (the lesson words: flat, close, …)
"""

from servelab.bench.report.findings import Finding, Kind, ranges_overlap, same_conclusion
from servelab.bench.report.grades import Grade, grade, words
from servelab.bench.report.headlines import (
    compare_headlines,
    differences,
    emulated_figures,
    emulated_findings,
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
    leader_finding,
    ratio_figure,
    ratio_finding,
    ratio_sentence,
    ratio_verdict,
    said,
    say,
    versus,
    versus_finding,
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
    drifted,
    has_band,
    margin,
    overlap,
    ratio_reading,
    read_apart,
    read_ratio,
    too_close,
)

__all__ = [
    "Finding", "Kind", "ranges_overlap", "same_conclusion", "Grade", "grade", "words",
    "compare_headlines", "differences", "emulated_figures", "emulated_findings", "load_headlines", "record_headline",
    "plot_batch_histogram", "plot_latency_throughput", "plot_scaling", "plot_server_breakdown", "pyplot",
    "save_figure", "write_plots", "idle_sentence", "leader", "leader_finding", "ratio_figure", "ratio_finding",
    "ratio_sentence", "ratio_verdict", "said", "say", "versus", "versus_finding", "COLUMNS", "cost_per_1000",
    "cost_table", "csv_text", "flat_rows", "frame_markdown", "goals_table", "markdown_table", "settling_rows", "table_frame", "write_report", "write_tables",
    "INDISTINGUISHABLE", "MIN_EFFECT_APART", "MIN_EFFECT_INTERLEAVED", "Reading", "Verdict", "Why", "apart",
    "apart_reading", "band", "close", "drifted", "has_band", "margin", "overlap", "ratio_reading",
    "read_apart", "read_ratio", "too_close",
]
