"""Writing the report: ``report.md``, a self-contained ``report.html`` and one CSV per table.

The report reads from the top: the findings (per suite, headline figures
with baseline and ratio), the plots, the detailed tables, the notes.  The
CSVs hold every column and row with full precision; the Markdown and HTML
show the tables meant for reading (columns that are n/a in every row are left
out there; a table longer than :data:`MAX_SHOWN` rows is a link to its CSV)
and the plots (the HTML embeds the PNGs as data URIs, so the one file can be
mailed around).
"""

from __future__ import annotations

import base64
import csv
import datetime as _dt
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multihop.analysis.findings import format_amount
from multihop.analysis.plots import PlotSet
from multihop.analysis.table import Table
from multihop.bench.trace import SCHEMA_VERSION

if TYPE_CHECKING:  # pragma: no cover
    from multihop.analysis.job import Analysis

__all__ = ["MAX_SHOWN", "TABLE_ORDER", "format_value", "write_csv", "write_report"]

TABLE_ORDER = (
    "findings",
    "latency",
    "throughput",
    "throughput_by_size",
    "throughput_by_window",
    "cost_per_hop",
    "resources",
    "baseline_ratios",
    "run_comparison",
    "core_pairs",
    "ges_latency",
    "latency_cdf",
    "machines",
)
"""The order tables appear in the report (others follow, by name)."""


def format_value(column: str, value: Any) -> str:
    """Format one cell for reading: ratios with 3 decimals, large numbers with thousands commas."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if column.endswith("_ratio") or column in ("r2", "quantile", "cpu_s", "cpu_us_per_msg"):
            return f"{value:.3f}"
        if abs(value) >= 10000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.4g}"
    if isinstance(value, int) and column not in (
        "size",
        "hops",
        "window",
        "src_core",
        "dst_core",
        "fanout",
        "cores",
        "sockets",
    ):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    return str(value)


def write_csv(table: Table, path: str | Path) -> Path:
    """Write ``table`` as CSV (header row; empty cell for null); return the path."""
    p = Path(path)
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(table.columns)
        for row in table.rows:
            w.writerow(["" if v is None else v for v in row])
    return p


_NA = (None, -1, "")


def _shown_columns(table: Table) -> list[int]:
    keep = []
    for i, col in enumerate(table.columns):
        values = [row[i] for row in table.rows]
        if col in ("run_id", "case") or any(v not in _NA for v in values):
            keep.append(i)
    return keep


def _cells(table: Table) -> tuple[list[str], list[list[str]]]:
    idx = _shown_columns(table)
    header = [table.columns[i] for i in idx]
    body = [[format_value(table.columns[i], row[i]) for i in idx] for row in table.rows]
    return header, body


def _ordered(tables: dict[str, Table]) -> list[Table]:
    names = [n for n in TABLE_ORDER if n in tables] + sorted(n for n in tables if n not in TABLE_ORDER)
    return [tables[n] for n in names]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_escape(h) for h in header) + " |"]
    lines.append("| " + " | ".join("---" for _ in header) + " |")
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in body]
    return lines


def _html_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "\n".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
table.findings { font-size: 1em; }
table.findings td:nth-child(-n+2), table.findings th:nth-child(-n+2) { text-align: left; }
table.findings td.ratio { font-weight: bold; }
img { max-width: 100%; border: 1px solid #ddd; }
.doc { color: #555; }
nav a { margin-right: 1em; }
"""

MAX_SHOWN = 40
"""Detailed tables longer than this are linked (their CSV), not shown."""


def _finding_cells(table: Table, runs: int) -> tuple[list[str], list[list[str]]]:
    """Header and body of the findings table, for reading (a Run column only when there are several runs)."""
    header = (["Run"] if runs > 1 else []) + ["Suite", "Finding", "Figure", "Baseline", "Ratio"]
    body = []
    for r in table.records():
        base = ""
        if r["baseline"]:
            value = format_amount(r["baseline_value"], r["unit"].replace("/hop", "")) if r["baseline_value"] is not None else "n/a"
            base = f"{r['baseline']}: {value}"
        row = ([r["run_id"]] if runs > 1 else []) + [r["suite"], r["finding"], format_amount(r["value"], r["unit"]), base, r["reading"]]
        body.append(row)
    return header, body


def _findings_html(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row[:-1]) + f'<td class="ratio">{html.escape(row[-1])}</td></tr>' for row in body
    )
    return f'<table class="findings" id="findings">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>'


def write_report(out_dir: str | Path, analysis: Analysis, plots: PlotSet, spark_master: str = "") -> Path:
    """Write CSVs, ``report.md`` and ``report.html`` into ``out_dir``; return ``report.md``'s path.

    The report leads with its findings (:mod:`multihop.analysis.findings`: per
    suite the headline figures, baseline and ratio), then the plots, then the
    detailed tables (those longer than :data:`MAX_SHOWN` rows as a link to
    their CSV), then the notes.

    Args:
        out_dir: the report directory (must exist; the plots are already in it).
        analysis: a :class:`multihop.analysis.job.Analysis`.
        plots: the plots drawn into ``out_dir`` and the skip notes.
        spark_master: shown in the report header.
    """
    out = Path(out_dir)
    tables = _ordered(analysis.tables)
    for t in tables:
        write_csv(t, out / f"{t.name}.csv")
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    inputs = analysis.inputs
    rows = inputs.rows if inputs is not None else {}
    summary = (
        f"Generated {now} by `multihop analyze` (Spark master `{spark_master}`), trace schema "
        f"version {SCHEMA_VERSION}. Runs: {', '.join(analysis.runs) or 'none'}. "
        f"Rows read: {rows.get('messages', 0):,} messages, {rows.get('cases', 0):,} cases."
    )
    notes = list(analysis.notes) + list(plots.notes)
    findings = analysis.tables.get("findings")
    details = [t for t in tables if t.name != "findings"]

    md = ["# multihop benchmark report", "", summary, ""]
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>multihop benchmark report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>multihop benchmark report</h1>",
        f'<p id="summary">{html.escape(summary).replace("`", "")}</p>',
        '<nav><a href="#findings-title">Findings</a><a href="#plots">Plots</a><a href="#tables">Detailed tables</a><a href="#notes">Notes</a></nav>',
    ]
    md += ["## Findings", ""]
    h.append('<h2 id="findings-title">Findings</h2>')
    if findings is not None and findings.rows:
        doc = findings.doc + " Data: [findings.csv](findings.csv)."
        header, body = _finding_cells(findings, len({r[0] for r in findings.rows}))
        md += [doc, ""] + _markdown(header, body) + [""]
        h += [f'<p class="doc">{html.escape(findings.doc)} Data: <a href="findings.csv">findings.csv</a>.</p>', _findings_html(header, body)]
    else:
        md += ["No headline figures: none of the suites of `multihop bench` is in the traces.", ""]
        h.append("<p>No headline figures: none of the suites of multihop bench is in the traces.</p>")
    md += ["## Plots", ""]
    h += ['<h2 id="plots">Plots</h2>']
    if not plots.plots:
        md += ["No plots (see the notes).", ""]
        h.append("<p>No plots (see the notes).</p>")
    for p in plots.plots:
        md += [f"### {p.title}", "", f"![{p.title}]({p.file})", "", p.caption, ""]
        data = base64.b64encode((out / p.file).read_bytes()).decode("ascii")
        h += [
            f"<h3>{html.escape(p.title)}</h3>",
            f'<img src="data:image/png;base64,{data}" alt="{html.escape(p.title)}">',
            f'<p class="doc">{html.escape(p.caption)} File: <a href="{p.file}">{p.file}</a></p>',
        ]
    md += ["## Detailed tables", ""]
    h += ['<h2 id="tables">Detailed tables</h2>']
    for t in details:
        csv_name = f"{t.name}.csv"
        md += [f"### {t.title}", ""]
        h += [f"<h3>{html.escape(t.title)}</h3>"]
        count = f"{len(t)} row{'' if len(t) == 1 else 's'}"
        shown = t.in_report and 0 < len(t) <= MAX_SHOWN
        more = "" if shown or not t.rows else " (too long to show here: see the CSV)" if t.in_report else ""
        doc = (t.doc + " " if t.doc else "") + f"Data: [{csv_name}]({csv_name}), {count}{more}."
        md += [doc, ""]
        h += [f'<p class="doc">{html.escape(t.doc)} Data: <a href="{csv_name}">{csv_name}</a>, {count}{html.escape(more)}.</p>']
        if shown:
            header, body = _cells(t)
            md += _markdown(header, body) + [""]
            h.append(_html_table(header, body))
    md += ["## Notes", ""] + ([f"- {n}" for n in notes] or ["None."]) + [""]
    h += ['<h2 id="notes">Notes</h2>', "<ul>"] + [f"<li>{html.escape(n)}</li>" for n in notes] + ["</ul>"]
    h.append("</body></html>")
    (out / "report.html").write_text("\n".join(h) + "\n", encoding="utf-8")
    report = out / "report.md"
    report.write_text("\n".join(md) + "\n", encoding="utf-8")
    return report
