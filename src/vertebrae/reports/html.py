"""Self-contained HTML reports rendered from serialized results (no CDN, no network, no JavaScript).

A benchmark page renders the same sections as the Markdown report
(:func:`vertebrae.reports.markdown.benchmark_sections`), with the figures after the answer.
Figures come from :mod:`vertebrae.reports.figures` as inline SVG when matplotlib is
installed; without it the page says how to get them right under its title and keeps every table.
Every value goes through :func:`esc` (the HTML counterpart of the Markdown cell renderer).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._base.names import printable
from ..errors import SerializationError
from . import figures
from .document import Code, Items, Para, Section, Span, Strong, Table
from .markdown_table import plain

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2rem auto;max-width:88rem;
padding:0 1rem;color:#1f2328;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1.05rem}h4{font-size:.95rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.8rem;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #d0d7de;padding:.2rem .4rem;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{hyphens:none}td.n{white-space:nowrap}details>summary{cursor:pointer;font-size:.9rem;color:#57606a}
th{background:#f6f8fa}tr:nth-child(even) td{background:#fbfcfd}
.answer{background:#eef6ee;border:1px solid #9ccc9c;border-radius:6px;padding:.8rem 1rem}
.answer strong{font-size:1.05rem}.note{color:#57606a;font-size:.9rem}
.hint{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:.5rem 1rem}
figure{margin:1rem 0}figure svg{max-width:100%;height:auto}figcaption{font-size:.9rem;color:#57606a}
"""


def esc(value: Any, digits: int = 4) -> str:
    """One value as escaped HTML text (numbers, None and booleans shown as in the Markdown report)."""
    return html.escape(plain(value, digits)).replace("\n", "<br>")


def _cell(value: Any, tag: str) -> str:
    """One cell: numbers never wrap (class ``n``); text may break after an underscore (``<wbr>``), so a wide
    table of field names and labels wraps instead of needing sideways scrolling.  A header breaks only there
    or at a space, never inside a word."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"<{tag} class=\"n\">{esc(value)}</{tag}>"
    return f"<{tag}>{esc(value).replace('_', '_<wbr>')}</{tag}>"


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], secondary: frozenset[str] = frozenset(),
               keys: int = 2) -> str:
    """A table; columns named in ``secondary`` move to a folded table that repeats the first ``keys`` columns."""
    shown = [i for i, h in enumerate(headers) if h not in secondary]
    folded = [i for i, h in enumerate(headers) if h in secondary]
    main = _table([headers[i] for i in shown], [[row[i] for i in shown] for row in rows])
    if not folded:
        return main
    columns = list(range(min(keys, len(headers)))) + [i for i in folded if i >= keys]
    more = ", ".join(headers[i] for i in folded)
    return (main + f"<details><summary>More columns: {esc(more)}</summary>\n"
            + _table([headers[i] for i in columns], [[row[i] for i in columns] for row in rows]) + "</details>\n")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(_cell(h, "th") for h in headers)
    body = "".join("<tr>" + "".join(_cell(v, "td") for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"


def paragraphs(parts: Sequence[str]) -> str:
    return "".join(f"<p>{esc(part)}</p>\n" for part in parts)


def _spans(spans: Sequence[Span]) -> str:
    return "".join(f"<strong>{esc(s.text)}</strong>" if isinstance(s, Strong) else
                   f"<code>{esc(s.text)}</code>" if isinstance(s, Code) else esc(s) for s in spans)


def html_block(block: Any) -> str:
    """One block of the shared report model (:mod:`vertebrae.reports.document`) as HTML."""
    if isinstance(block, Section):
        return html_section(block)
    if isinstance(block, Table):
        return html_table(block.headers, block.rows, block.secondary, block.keys)
    if isinstance(block, Items):
        tag = "ol" if block.ordered else "ul"
        return f"<{tag}>" + "".join(f"<li>{_spans(item)}</li>" for item in block.items) + f"</{tag}>\n"
    assert isinstance(block, Para)
    return f"<p>{_spans(block.spans)}</p>\n"


def html_section(section: Section) -> str:
    """A heading and its blocks; the answer's text (before its table) sits in the green box."""
    heading = f"<h{section.level}>{esc(section.title)}</h{section.level}>\n"
    if section.title != "Answer":
        return heading + "".join(html_block(b) for b in section.blocks)
    text = [b for b in section.blocks if not isinstance(b, Table)]
    tables = [b for b in section.blocks if isinstance(b, Table)]
    return (heading + "<div class=\"answer\">" + "".join(html_block(b) for b in text) + "</div>\n"
            + "".join(html_block(b) for b in tables))


def _figures(data: Mapping[str, Any],
             chosen: Sequence[tuple[str, figures.Drawing]]) -> str:
    """The figures section; without matplotlib nothing (the hint is under the title, see :func:`page`)."""
    if not figures.available():
        return ""
    drawn = [(title, figures.svg_or_none(draw(data))) for title, draw in chosen]
    parts = [f"<figure>{svg}<figcaption>{esc(title)}</figcaption></figure>\n" for title, svg in drawn if svg]
    return "<h2>Figures</h2>\n" + ("".join(parts) or "<p class=\"note\">No figure has data in this result.</p>\n")


def page(title: str, body: Sequence[str]) -> str:
    """The page; without matplotlib its first screen says how to get the figures."""
    hint = ("" if figures.available() else
            f"<p class=\"hint\">{esc(figures.INSTALL_HINT)} The tables below hold every number.</p>\n")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{esc(title)}</h1>\n"
            + hint + "".join(body) + "</body>\n</html>\n")


# ------------------------------------------------------------------ benchmark
def render_benchmark_html(data: Mapping[str, Any]) -> str:
    """The Markdown report's sections, with the figures right after the answer."""
    from .markdown import benchmark_sections, report_title

    sections = benchmark_sections(data)
    body = [html_section(sections[0]), _figures(data, figures.BENCHMARK_FIGURES),
            *(html_section(s) for s in sections[1:])]
    return page(report_title(data), body)


# ------------------------------------------------------------------ retrieval
def render_retrieval_html(data: Mapping[str, Any]) -> str:
    from ..families.retrieval.config import CUTOFF_METRICS
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    protocol = data["protocol"]
    primary = protocol["config"]["primary_metric"]
    ranked = result.ranked_results()
    lead = (f"<p><strong>Top candidate: {esc(ranked[0].name)}</strong> — {esc(primary)} "
            f"{esc(ranked[0].primary_score)} (higher is better).</p>" if ranked else "<p>No extractor was evaluated.</p>")
    columns = ["rank", "extractor", "primary_score", "query_embedding_dim", "gallery_embedding_dim"]
    ranking = html_table(columns, [[row.get(c) for c in columns] for row in result.rows()])
    scored = [e for e in data["extractor_results"] if not e.get("error")]
    directions = [d for d in ("forward", "reverse") if any(e[d] for e in scored)]
    cutoffs = protocol["config"]["cutoffs"]
    per_cutoff = html_table(["extractor", "direction", "k", *CUTOFF_METRICS],
                            [[e["name"], d, k] + [e[d]["metrics"][f"{m}@{k}"] for m in CUTOFF_METRICS]
                             for e in scored for d in directions for k in cutoffs])
    rows = [["identity", f"{protocol['identity']['kind']}: {protocol['identity']['dataset_id']}"],
            ["protocol fingerprint", protocol["fingerprint"]], ["similarity", protocol["config"]["similarity"]],
            ["queries", protocol["n_queries"]], ["gallery items", protocol["n_gallery"]],
            ["relevant pairs", protocol["n_relevant_pairs"]], ["tie rule", protocol["tie_rule"]]]
    notes = list(data["warnings"]) + [f"{e['name']}: {w}" for e in data["extractor_results"] for w in e["warnings"]]
    title = f"vertebrae retrieval report: {protocol['identity']['dataset_id']}"
    return page(title, [
        f"<h2>Answer</h2>\n<div class=\"answer\">{lead}</div>\n", _figures(data, figures.RETRIEVAL_FIGURES),
        "<h2>Ranking</h2>\n" + ranking, "<h2>Metrics per cutoff</h2>\n" + per_cutoff,
        "<h2>Protocol</h2>\n" + html_table(["field", "value"], rows),
        "<h2>Warnings</h2>\n" + ("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>\n" if notes
                                 else "<p>None.</p>\n")])


# ------------------------------------------------------------------ zero-shot
def render_zero_shot_html(data: Mapping[str, Any]) -> str:
    """Answer, ranking figure and table (zero-shot metric, top-k, margins, overlap as context), protocol."""
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    protocol, metric = data["protocol"], result.primary_metric_name
    ranked = result.ranked_results()
    lead = (f"<p><strong>Top candidate: {esc(ranked[0].name)}</strong> — {esc(metric)} "
            f"{esc(ranked[0].primary_score)} (higher is better). The overlap score of the sample embeddings is "
            "context, never combined with it.</p>" if ranked else "<p>No encoder was evaluated.</p>")
    rows = result.rows(include_invalid=True)
    columns = [c for c in ("rank", "extractor", "primary_score", "macro_f1", "balanced_accuracy", "margin_mean",
                           "overlap_score", "embedding_dim") if any(c in row for row in rows)]
    prompts = [[p["display"], "; ".join(p["prompts"])] for p in protocol["prompts"]]
    return page(f"vertebrae zero-shot report: {protocol['identity']['dataset_id']}", [
        f"<h2>Answer</h2>\n<div class=\"answer\">{lead}</div>\n", _figures(data, figures.ZERO_SHOT_FIGURES),
        "<h2>Ranking</h2>\n" + html_table(columns, [[row.get(c) for c in columns] for row in rows]),
        "<h2>Prompts</h2>\n" + html_table(["class", "prompts"], prompts),
        "<h2>Protocol</h2>\n" + html_table(["field", "value"], [["tie rule", protocol["tie_rule"]],
                                                                 ["ensemble", protocol["ensemble"]],
                                                                 ["ranking", protocol["ranking"]]])])


# ------------------------------------------------------------------ monitor history
def render_monitor_html(data: Mapping[str, Any]) -> str:
    """A monitor history document: ``rows`` of snapshot rows (evaluation_index, status, extractor, primary_score)."""
    columns = ["evaluation_index", "recorded_at", "status", "extractor", "primary_score"]
    rows = [[row.get(c) for c in columns] for row in data.get("rows", [])]
    return page("vertebrae monitor report", [_figures(data, figures.MONITOR_FIGURES),
                                              "<h2>Snapshots</h2>\n" + html_table(columns, rows)])


RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "benchmark": render_benchmark_html, "retrieval": render_retrieval_html, "zero_shot": render_zero_shot_html,
    "monitor": render_monitor_html}


def render_html(data: Mapping[str, Any]) -> str:
    """The HTML report of any serialized vertebrae result (a file name's undecodable bytes shown as ``\\xNN``)."""
    kind = data.get("result_type") if isinstance(data, Mapping) else None
    if kind not in RENDERERS:
        raise SerializationError(f"$.result_type: no HTML report for result type {kind!r}; expected one of "
                                 f"{sorted(RENDERERS)}")
    return printable(RENDERERS[kind](data))
