"""Markdown report of a serialized RetrievalBenchmarkResult (a plain dict, never live objects).

Every table goes through :mod:`vertebrae.reports.markdown_table`, so ids and
extractor names with pipes or line breaks cannot break the layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...reports.markdown_resources import endpoint_resource_section
from ...reports.markdown_table import table, text
from ..result_protocol import result_from_dict
from .config import CUTOFF_METRICS, DIRECTIONS, FULL_RANKING_METRICS

_DIAGNOSTICS = ("mean_positive_similarity", "mean_negative_similarity", "similarity_margin")


def render_markdown(data: Mapping[str, Any]) -> str:
    """Title, ranking, per-cutoff metrics, full-ranking metrics and diagnostics, protocol, extractors, warnings."""
    result = result_from_dict(data)
    data = result.serialized()  # the current schema, also for an older file
    protocol = data["protocol"]
    directions = [d for d in DIRECTIONS if any(e[d] is not None for e in _scored(data))]
    sections = [f"# vertebrae retrieval report: {text(protocol['identity']['dataset_id'])}\n",
                _ranking(result, directions), _cutoff_metrics(data, directions), _full_ranking(data, directions),
                _protocol(protocol), _extractors(data), _warnings(data),
                endpoint_resource_section(result, ("query", "gallery"))]
    return "\n".join(sections)


def _ranking(result: Any, directions: list[str]) -> str:
    primary = result.protocol["config"]["primary_metric"]
    columns = ["rank", "extractor", "primary_score"] + [f"{d}.{primary}" for d in directions] \
        + ["query_embedding_dim", "gallery_embedding_dim"]
    how = "mean of forward and reverse" if len(directions) == 2 else "forward (query -> gallery)"
    rows = [[row.get(c) for c in columns] for row in result.rows()]
    ranked = result.ranked_results()
    top = (f"**Top candidate: {text(ranked[0].name)}** ({text(primary)} {ranked[0].primary_score:.4f}).\n\n"
           if ranked else "No extractor was scored.\n\n")
    return (f"## Ranking\n\n{top}Ranked by **{text(primary)}** (higher is better; {how}).\n\n"
            + table(columns, rows))


def _cutoff_metrics(data: Mapping[str, Any], directions: list[str]) -> str:
    cutoffs = data["protocol"]["config"]["cutoffs"]
    rows = [[e["name"], d, k] + [e[d]["metrics"][f"{m}@{k}"] for m in CUTOFF_METRICS]
            for e in _scored(data) for d in directions for k in cutoffs]
    return "## Metrics per cutoff\n\n" + table(["extractor", "direction", "k", *CUTOFF_METRICS], rows)


def _full_ranking(data: Mapping[str, Any], directions: list[str]) -> str:
    rows = [[e["name"], d, e[d]["n_queries"]] + [e[d]["metrics"][m] for m in FULL_RANKING_METRICS]
            + [e[d]["diagnostics"][name] for name in _DIAGNOSTICS] + [e[d]["block_plan"]["rows_per_block"]]
            for e in _scored(data) for d in directions]
    headers = ["extractor", "direction", "queries", *FULL_RANKING_METRICS, "mean positive sim",
               "mean negative sim", "margin", "rows per block"]
    return ("## Full-ranking metrics and similarity diagnostics\n\n"
            "`map` and `mrr` use the whole ranking; similarities are in the configured similarity's units.\n\n"
            + table(headers, rows))


def _protocol(protocol: Mapping[str, Any]) -> str:
    config, identity = protocol["config"], protocol["identity"]
    reverse = protocol["reverse"]
    per_query = protocol["relevant_per_query"]
    rows = [
        ["identity", f"{identity['kind']}: {identity['dataset_id']}"
         + (f" @ {identity['revision']}" if identity.get("revision") else "")],
        ["protocol fingerprint", protocol["fingerprint"]],
        ["similarity", config["similarity"]],
        ["primary metric", config["primary_metric"]],
        ["cutoffs", ", ".join(str(k) for k in config["cutoffs"])],
        ["bidirectional", config["bidirectional"]],
        ["queries", protocol["n_queries"]],
        ["gallery items", protocol["n_gallery"]],
        ["relevant pairs", protocol["n_relevant_pairs"]],
        ["relevant per query (min / mean / max)", f"{per_query['min']} / {per_query['mean']:.2f} / {per_query['max']}"],
        ["grades (min / max / distinct)", f"{protocol['grades']['min']:g} / {protocol['grades']['max']:g} / "
                                          f"{protocol['grades']['distinct']}"],
        ["excluded pairs", protocol["n_excluded_pairs"]],
        ["tie rule", protocol["tie_rule"]],
        ["memory budget (bytes)", config["memory_budget_bytes"]],
        ["block size cap (rows)", config["block_size"] if config["block_size"] is not None else "none"],
        ["BLAS thread limit", config["thread_limit"] if config["thread_limit"] is not None else "library default"],
    ]
    if reverse is not None:
        rows += [["reverse queries (gallery items with a positive)", reverse["n_queries"]],
                 ["gallery items skipped in reverse (no positive)", reverse["n_skipped"]]]
    return "## Protocol\n\n" + table(["field", "value"], rows)


def _extractors(data: Mapping[str, Any]) -> str:
    rows = []
    for e in _scored(data):
        q, g = e["embedding"]["query"], e["embedding"]["gallery"]
        rows.append([e["name"], f"{q['embedding_dim']} {q['dtype']}{' sparse' if q['sparse'] else ''}",
                     f"{g['embedding_dim']} {g['dtype']}{' sparse' if g['sparse'] else ''}",
                     json.dumps(e["recipe"], sort_keys=True)])
    return "## Extractors\n\n" + table(["extractor", "query embedding", "gallery embedding", "recipe"], rows)


def _scored(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Entries with scores; failed ones (``on_error="record"``) appear in the warnings only."""
    return [e for e in data["extractor_results"] if not e.get("error")]


def _warnings(data: Mapping[str, Any]) -> str:
    notes = list(data["warnings"]) + [f"{e['name']}: {w}" for e in data["extractor_results"] for w in e["warnings"]]
    return "## Warnings\n\n" + ("".join(f"- {text(n)}\n" for n in notes) if notes else "None.\n")
