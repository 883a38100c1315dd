"""Writing the report: ``report.md``, a self-contained ``report.html`` and one CSV per table.

The report reads from the top: the findings (per suite, headline figures
with their spread over the repeats, baseline and verdict, then the rule that
decides when a difference is stated), the consistency section (a figure
measured by two suites of one run, side by side, and why they differ when
they do), the load during every case (foreign CPU, load average, the
monitors' parking, cases under heavy load flagged), the plots, the detailed
tables, the notes.  The CSVs hold every column and row with full precision;
the Markdown and HTML show the tables meant for reading (columns that are n/a
in every row are left out there; a table longer than :data:`MAX_SHOWN` rows
is a link to its CSV) and the plots (the HTML embeds the PNGs as data URIs,
so the one file can be mailed around).  The HTML fits its window: long cells
wrap, and a table still too wide scrolls inside its own box, never the page.
"""

from __future__ import annotations

import base64
import csv
import datetime as _dt
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from multihop.analysis.consistency import summary_cells
from multihop.analysis.findings import format_amount, format_range
from multihop.analysis.plots import PlotSet
from multihop.analysis.result import Analysis
from multihop.analysis.spread import RULE, heavy_text
from multihop.analysis.table import Table
from multihop.bench.trace import SCHEMA_VERSION

__all__ = ["MAX_SHOWN", "TABLE_ORDER", "format_value", "write_csv", "write_report"]

TABLE_ORDER = (
    "findings",
    "consistency",
    "spread",
    "repeats",
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


def _html_table(header: Sequence[str], body: Sequence[Sequence[str]], cls: str = "", ident: str = "", strong: str = "") -> str:
    """A table in a box of its own (wider than the page: it scrolls, not the page); the `strong` column in bold."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    bold = header.index(strong) if strong in header else -1

    def td(i: int, c: str) -> str:
        return f'<td class="strong">{html.escape(c)}</td>' if i == bold else f"<td>{html.escape(c)}</td>"

    rows = "\n".join("<tr>" + "".join(td(i, c) for i, c in enumerate(row)) + "</tr>" for row in body)
    attrs = (f' class="{cls}"' if cls else "") + (f' id="{ident}"' if ident else "")
    return f'<div class="wide"><table{attrs}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table></div>'


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; color: #222; max-width: 80em; box-sizing: border-box; }
h1, h2, h3, p, li { overflow-wrap: break-word; }
.wide { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; overflow-wrap: break-word; vertical-align: top; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
table.findings, table.consistency, table.load { font-size: 0.95em; }
table.findings td, table.consistency td, table.load td, table.findings th, table.consistency th, table.load th { text-align: left; }
td.strong { font-weight: bold; }
tr.heavy td { background: #fff3e0; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
.doc { color: #555; }
.rule { background: #f6f8fa; border-left: 3px solid #888; padding: 0.5em 1em; }
nav a { margin-right: 1em; }
details summary { cursor: pointer; }
"""

MAX_SHOWN = 40
"""Detailed tables longer than this are linked (their CSV), not shown."""


def _with_range(value: Any, low: Any, high: Any, n: Any, unit: str) -> str:
    """``12.4 µs (11.9-13.1 µs, 3 repeats)``."""
    if value is None:
        return "n/a"
    text = format_amount(value, unit)
    rng = format_range(low, high, unit)
    count = f"{n} repeat{'' if n == 1 else 's'}" if n is not None else ""
    inner = ", ".join(x for x in (rng if rng and rng != text else "", count) if x)
    return f"{text} ({inner})" if inner else text


def _load_cell(foreign: Any, heavy: Any) -> str:
    if foreign is None:
        return "not measured"
    return f"foreign CPU up to {foreign:.2f}" + (" (heavy load)" if heavy else "")


def _finding_cells(table: Table, runs: int) -> tuple[list[str], list[list[str]]]:
    """Header and body of the findings table, for reading (a Run column only when there are several runs)."""
    header = (["Run"] if runs > 1 else []) + ["Suite", "Finding", "Figure", "Baseline", "Reading", "Load"]
    body = []
    for r in table.records():
        base = ""
        unit = r["unit"]
        if r["baseline"]:
            b_unit = unit.replace("ns/hop", "ns")
            value = _with_range(r["baseline_value"], r["baseline_min"], r["baseline_max"], r["baseline_repeats"], b_unit)
            base = f"{r['baseline']}: {value}"
        figure = _with_range(r["value"], r["value_min"], r["value_max"], r["repeats"], unit)
        row = ([r["run_id"]] if runs > 1 else []) + [
            r["suite"], r["finding"], figure, base, r["reading"], _load_cell(r["foreign_cpu_max"], r["heavy_load"]),
        ]  # fmt: skip
        body.append(row)
    return header, body


def _load_cells(spread: Table, runs: int) -> tuple[list[str], list[list[str]], list[bool]]:
    """Header, body and heavy flags of the per-case load table, for reading."""
    header = (["Run"] if runs > 1 else []) + [
        "Suite", "Case", "Repeats", "Median latency", "Throughput", "Foreign CPU (median, max)", "Load avg (max)", "Monitors", "Heavy load",
    ]  # fmt: skip
    body, flags = [], []
    for r in spread.records():
        case = ", ".join(p for p in str(r["case"]).split(",") if not p.startswith(("suite=", "kind=")))
        lat = _with_range(r["p50_ns"], r["p50_min_ns"], r["p50_max_ns"], None, "ns") if r["p50_ns"] is not None else ""
        thr = _with_range(r["throughput_msgs"], r["throughput_min"], r["throughput_max"], None, "msg/s") if r["throughput_msgs"] is not None else ""
        foreign = f"{r['foreign_cpu']:.2f}, {r['foreign_cpu_max']:.2f}" if r["foreign_cpu"] is not None else "not measured"
        load = f"{r['load1_max']:.2f}" if r["load1_max"] is not None else ""
        mon = []
        if r["parks_per_frame"] is not None:
            mon.append(f"parked on {r['parks_per_frame']:.0%} of frames")
        if r["monitor_weight"]:
            mon.append(str(r["monitor_weight"]))
        flag = {True: "yes", False: "no"}.get(r["heavy_load"], "")
        body.append(
            ([r["run_id"]] if runs > 1 else [])
            + [r["suite"], f"{case} ({r['kind']})", str(r["repeats"]), lat, thr, foreign, load, ", ".join(mon), flag]
        )
        flags.append(bool(r["heavy_load"]))
    return header, body, flags


def _load_html(header: Sequence[str], body: Sequence[Sequence[str]], flags: Sequence[bool]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "\n".join(
        ('<tr class="heavy">' if f else "<tr>") + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row, f in zip(body, flags, strict=True)
    )
    return f'<div class="wide"><table class="load" id="load">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table></div>'


def _load_summary(spread: Table, cpus: dict[str, Any]) -> str:
    rows = list(spread.records())
    measured = [r for r in rows if r["foreign_cpu_max"] is not None]
    hv = [r for r in measured if r["heavy_load"]]
    per_suite: dict[str, int] = {}
    for r in hv:
        per_suite[r["suite"]] = per_suite.get(r["suite"], 0) + 1
    machines = sorted({c for c in cpus.values() if c})
    threshold = heavy_text(machines[0] if len(machines) == 1 else None)
    text = f"{len(hv)} of {len(rows)} cases were measured under heavy foreign load ({threshold} in a repeat)"
    if per_suite:
        text += ": " + ", ".join(f"{s} {n}" for s, n in sorted(per_suite.items()))
    text += "."
    if len(measured) < len(rows):
        text += f" {len(rows) - len(measured)} case(s) have no load recorded."
    return text


def write_report(out_dir: str | Path, analysis: Analysis, plots: PlotSet, spark_master: str = "") -> Path:
    """Write CSVs, ``report.md`` and ``report.html`` into ``out_dir``; return ``report.md``'s path.

    The report leads with its findings (:mod:`multihop.analysis.findings`: per
    suite the headline figures with their spread, baseline and reading, then
    the rule), then the consistency section, the load per case, the plots,
    the detailed tables (those longer than :data:`MAX_SHOWN` rows as a link to
    their CSV), then the notes.

    Args:
        out_dir: the report directory (must exist; the plots are already in it).
        analysis: a :class:`multihop.analysis.result.Analysis`.
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
    details = [t for t in tables if t.name not in ("findings", "consistency")]

    md = ["# multihop benchmark report", "", summary, ""]
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>multihop benchmark report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>multihop benchmark report</h1>",
        f'<p id="summary">{html.escape(summary).replace("`", "")}</p>',
        '<nav><a href="#findings-title">Findings</a><a href="#consistency-title">Consistency</a><a href="#load-title">Load</a>'
        '<a href="#plots">Plots</a><a href="#tables">Detailed tables</a><a href="#notes">Notes</a></nav>',
    ]
    md += ["## Findings", ""]
    h.append('<h2 id="findings-title">Findings</h2>')
    runs = len(analysis.runs)
    if findings is not None and findings.rows:
        doc = "Per suite, the headline figures: the median over the case's repeats, their range, the baseline and the reading."
        header, body = _finding_cells(findings, runs)
        md += [doc + " Data: [findings.csv](findings.csv).", ""] + _markdown(header, body) + ["", f"> {RULE}", ""]
        h += [
            f'<p class="doc">{html.escape(doc)} Data: <a href="findings.csv">findings.csv</a>.</p>',
            _html_table(header, body, "findings", "findings", strong="Reading"),
            f'<p class="rule" id="rule">{html.escape(RULE)}</p>',
        ]
    else:
        md += ["No headline figures: none of the suites of `multihop bench` is in the traces.", ""]
        h.append("<p>No headline figures: none of the suites of multihop bench is in the traces.</p>")
    agree = analysis.tables.get("consistency")
    md += ["## Consistency", ""]
    h.append('<h2 id="consistency-title">Consistency</h2>')
    if agree is not None and agree.rows:
        header, body = summary_cells(agree, runs)
        md += [agree.doc + " Data: [consistency.csv](consistency.csv).", ""] + _markdown(header, body) + [""]
        h += [
            f'<p class="doc">{html.escape(agree.doc)} Data: <a href="consistency.csv">consistency.csv</a>.</p>',
            _html_table(header, body, "consistency", "consistency", strong="Agree"),
        ]
    else:
        none = "No figure is measured by two suites of one run in these traces."
        md += [none, ""]
        h.append(f"<p>{none}</p>")
    spread = analysis.tables.get("spread")
    md += ["## Load during the cases", ""]
    h.append('<h2 id="load-title">Load during the cases</h2>')
    if spread is not None and spread.rows:
        machines = analysis.tables.get("machines")
        cpus = {r["run_id"]: r.get("cores") for r in machines.records()} if machines is not None else {}
        line = _load_summary(spread, cpus)
        doc = (
            "Per case: the spread of its figures over the repeats and what else ran meanwhile: foreign CPU (CPUs used by "
            "processes that are not the benchmark's, from /proc/stat), the 1-minute load average, and the monitors' "
            "parking (near 100 %: every hop paid a wake-up, as when they may not poll) and scheduling weight. "
            "Data: [spread.csv](spread.csv), every repeat in [repeats.csv](repeats.csv)."
        )
        header, body, flags = _load_cells(spread, runs)
        md += [line, "", doc, ""] + _markdown(header, body) + [""]
        doc_html = html.escape(doc)
        for name in ("spread.csv", "repeats.csv"):
            doc_html = doc_html.replace(f"[{name}]({name})", f'<a href="{name}">{name}</a>')
        h += [
            f'<p id="load-summary">{html.escape(line)}</p>',
            f'<p class="doc">{doc_html}</p>',
            f"<details{' open' if len(body) <= MAX_SHOWN else ''}><summary>{len(body)} cases</summary>",
            _load_html(header, body, flags),
            "</details>",
        ]
    else:
        md += ["No load recorded: no case rows.", ""]
        h.append("<p>No load recorded: no case rows.</p>")
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
