"""Self-contained HTML reports rendered from serialized results (no CDN, no network, no JavaScript).

Figures come from :mod:`vertebrae.reports.figures` as inline SVG when matplotlib is
installed; without it the page keeps every table and says how to get the figures.
Every value goes through :func:`esc` (the HTML counterpart of the Markdown cell renderer).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SerializationError
from . import figures
from .markdown_structure import structure_rows
from .markdown_table import plain
from .reading import benchmark_answer, benchmark_ranking, how_to_read, recipe_summary

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2rem auto;max-width:72rem;
padding:0 1rem;color:#1f2328;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1.05rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;white-space:nowrap}
th{background:#f6f8fa}tr:nth-child(even) td{background:#fbfcfd}
.answer{background:#eef6ee;border:1px solid #9ccc9c;border-radius:6px;padding:.8rem 1rem}
.answer strong{font-size:1.1rem}.note{color:#57606a;font-size:.9rem}
figure{margin:1rem 0}figure svg{max-width:100%;height:auto}figcaption{font-size:.9rem;color:#57606a}
"""


def esc(value: Any, digits: int = 4) -> str:
    """One value as escaped HTML text (numbers, None and booleans shown as in the Markdown report)."""
    return html.escape(plain(value, digits)).replace("\n", "<br>")


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"


def paragraphs(parts: Sequence[str]) -> str:
    return "".join(f"<p>{esc(part)}</p>\n" for part in parts)


def _figures(data: Mapping[str, Any],
             chosen: Sequence[tuple[str, Callable[[Mapping[str, Any]], str | None]]]) -> str:
    if not figures.available():
        return f"<h2>Figures</h2>\n<p class=\"note\">{esc(figures.INSTALL_HINT)} The tables below hold every number.</p>\n"
    drawn = [(title, draw(data)) for title, draw in chosen]
    parts = [f"<figure>{svg}<figcaption>{esc(title)}</figcaption></figure>\n" for title, svg in drawn if svg]
    return "<h2>Figures</h2>\n" + ("".join(parts) or "<p class=\"note\">No figure has data in this result.</p>\n")


def page(title: str, body: Sequence[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{esc(title)}</h1>\n"
            + "".join(body) + "</body>\n</html>\n")


# ------------------------------------------------------------------ benchmark
def _answer(data: Mapping[str, Any]) -> str:
    answer = benchmark_answer(data)
    notes = "".join(f"<li>{esc(n)}</li>" for n in answer["notes"])
    lead = esc(answer["lead"])
    if answer["top_text"]:
        lead = lead.replace(esc(answer["top_text"]), f"<strong>{esc(answer['top_text'])}</strong>", 1)
    table = html_table(answer["headers"], answer["rows"]) if answer["headers"] else ""
    return f"<h2>Answer</h2>\n<div class=\"answer\"><p>{lead}</p><ul>{notes}</ul></div>\n{table}"


def _ranking(data: Mapping[str, Any]) -> str:
    ranking = benchmark_ranking(data)
    parts = ["<h2>Ranking</h2>\n", f"<p>{esc(ranking['heading'])}</p>\n"]
    if ranking["columns"]:
        parts.append(html_table(ranking["columns"], ranking["rows"]))
    if ranking["invalid"] and ranking["columns"]:
        parts.append(f"<p>Not ranked (invalid primary aggregate): {esc(', '.join(ranking['invalid']))}</p>\n")
    return "".join(parts)


def _dataset(data: Mapping[str, Any]) -> str:
    s = data["dataset_summary"]
    rows = [["name", s.get("name")], ["identity", f"{s['identity']['kind']}: {s['identity']['dataset_id']}"],
            ["target type", s["target_type"]], ["samples", s["n_samples"]]]
    for key in ("n_classes", "n_labels", "label_cardinality", "label_density"):
        if key in s:
            rows.append([key.replace("_", " "), s[key]])
    if s.get("target_names"):
        rows.append(["targets", ", ".join(s["target_names"])])
    rows += structure_rows(s)  # relational units, segmentation tokens, structured units, multi-modal fields
    return "<h2>Dataset</h2>\n" + html_table(["field", "value"], rows)


def _per_class(data: Mapping[str, Any]) -> str:
    """One class x extractor table (counts from the first scored result); empty without per-class scores."""
    scored = [r for r in data["extractor_results"] if (r.get("overlap") or {}).get("per_class_scores")]
    if not scored:
        return ""
    first = scored[0]["overlap"]
    labels = first.get("labels", {})
    rows = [[labels.get(k, k), first["class_counts"].get(k)] + [r["overlap"]["per_class_scores"].get(k) for r in scored]
            for k in first["per_class_scores"]]
    return ("<h2>Per-class overlap</h2>\n<p class=\"note\">1.0 means the class is separated from the others; the "
            "pairwise scores are in the JSON.</p>\n"
            + html_table(["class", "count", *(r["name"] for r in scored)], rows))


def _details(data: Mapping[str, Any]) -> str:
    """One short paragraph per extractor: recipe, embedding, scores, Separatix's view and warnings."""
    parts = ["<h2>Per-extractor details</h2>\n"]
    for r in data["extractor_results"]:
        if r.get("error"):
            error = r["error"]
            parts.append(f"<h3>{esc(r['name'])}</h3>\n<p>Failed in the {esc(error['stage'])} stage: "
                         f"{esc(error['type'])}: {esc(error['message'])}</p>\n")
            continue
        o, e = r["overlap"], r["embedding"]
        text = (f"{recipe_summary(r['recipe'])}; {plain(e.get('embedding_dim'))} dims, {plain(e.get('dtype'))}"
                f"{' sparse' if e.get('sparse') else ''}. Overlap score {plain(o['score'])} (macro "
                f"{plain(o['macro_score'])}, weighted {plain(o['weighted_score'])})"
                + (f", loss_ratio {plain(o['loss_ratio'])}" if o.get("loss_ratio") is not None else "")
                + f"; recommendation {r['recommendation']}.")
        if r.get("weakest_class"):
            text += f" Weakest class: {r['weakest_class']['display']} ({plain(r['weakest_class']['score'])})."
        separatix = r.get("separatix")
        if separatix and separatix["status"] == "completed":
            probe = separatix["probe_summary"]
            text += (f" Separatix (descriptive): {separatix['recommendation']}, confidence {separatix['confidence']}"
                     + (f"; best probe {probe['best_probe']} ({probe['probe_metric']} {plain(probe['probe_score'])})"
                        if probe.get("probe_metric") else "") + ".")
        elif separatix:
            text += f" Separatix: {separatix['status']} ({separatix['reason']})."
        parts.append(f"<h3>{esc(r['name'])}</h3>\n<p>{esc(text)}</p>\n")
        if r["warnings"]:
            parts.append("<ul>" + "".join(f"<li>{esc(w)}</li>" for w in r["warnings"]) + "</ul>\n")
    return "".join(parts)


def _reproducibility(data: Mapping[str, Any]) -> str:
    meta = data["metadata"]
    rows = [["run key", meta.get("run_key")], ["primary metric", meta.get("primary_metric")]]
    rows += [[f"version {name}", v] for name, v in meta.get("versions", {}).items()]
    return ("<h2>Reproducibility</h2>\n" + html_table(["field", "value"], rows)
            + "<p class=\"note\">The JSON result holds every number, including per-class, pairwise, stability and "
              "Separatix detail; <code>vertebrae report RESULT.json</code> regenerates this page.</p>\n")


def render_benchmark_html(data: Mapping[str, Any]) -> str:
    title = f"vertebrae benchmark report: {data['dataset_summary'].get('name', '')}"
    return page(title, [_answer(data), _figures(data, figures.BENCHMARK_FIGURES), _ranking(data),
                         "<h2>How to read these numbers</h2>\n" + paragraphs(how_to_read(data)), _dataset(data),
                         _per_class(data), _details(data), _reproducibility(data)])


# ------------------------------------------------------------------ retrieval
def render_retrieval_html(data: Mapping[str, Any]) -> str:
    from ..retrieval.config import CUTOFF_METRICS
    from ..retrieval.result import RetrievalBenchmarkResult

    result = RetrievalBenchmarkResult.from_dict(data)
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
    from ..zero_shot.result import ZeroShotBenchmarkResult

    result = ZeroShotBenchmarkResult.from_dict(data)
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
    """The HTML report of any serialized vertebrae result."""
    kind = data.get("result_type") if isinstance(data, Mapping) else None
    if kind not in RENDERERS:
        raise SerializationError(f"$.result_type: no HTML report for result type {kind!r}; expected one of "
                                 f"{sorted(RENDERERS)}")
    return RENDERERS[kind](data)
