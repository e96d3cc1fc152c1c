"""Markdown report rendered from a serialized BenchmarkResult (a plain dict).

It never touches live objects, so an archived ``report.json`` regenerates the same
report.  Every table cell goes through :mod:`vertebrae.reports.markdown_table`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .markdown_compression import compression_section
from .markdown_resources import resource_section
from .markdown_metrics import metrics_detail
from .markdown_separatix import separatix_detail
from .markdown_stability import stability_section
from .markdown_structure import structure_section
from .markdown_table import table, text
from .reading import benchmark_answer, benchmark_ranking, how_to_read, recipe_summary

Section = Callable[[Mapping[str, Any]], str]


def _display(overlap: Mapping[str, Any], key: str) -> str:
    return overlap.get("labels", {}).get(key, key)


def _title(data: Mapping[str, Any]) -> str:
    summary = data["dataset_summary"]
    return f"# vertebrae benchmark report: {text(summary.get('name', ''))}\n"


def _dataset_summary(data: Mapping[str, Any]) -> str:
    s = data["dataset_summary"]
    ident = s["identity"]
    rows = [["identity", f"{ident['kind']}: {ident['dataset_id']}"
             + (f" @ {ident['revision']}" if ident.get("revision") else "")
             + (f" (sha256 {ident['content_sha256'][:12]})" if ident.get("content_sha256") else "")],
            ["target type", s["target_type"]], ["samples", s["n_samples"]], ["input", s.get("input_kind")]]
    if s["target_type"] == "single_label":
        rows.append(["classes", s["n_classes"]])
    elif s["target_type"] == "multi_label":
        rows += [["labels", s["n_labels"]], ["label cardinality", s["label_cardinality"]],
                 ["label density", s["label_density"]], ["distinct label sets", s["n_distinct_labelsets"]]]
    else:
        rows += [["targets", ", ".join(s["target_names"])],
                 ["constant targets", ", ".join(s["constant_targets"]) or "none"]]
    if s.get("groups"):
        g = s["groups"]
        rows.append(["groups", f"{g['n_groups']} (size {g['group_size_min']}–{g['group_size_max']})"])
    return "## Dataset summary\n\n" + table(["field", "value"], rows)


def _target_summary(data: Mapping[str, Any]) -> str:
    s = data["dataset_summary"]
    if s["target_type"] == "regression":
        stats = s["target_statistics"]
        rows = [[name, v["mean"], v["std"], v["min"], v["max"]] for name, v in stats.items()]
        return "## Target summary\n\n" + table(["target", "mean", "std", "min", "max"], rows)
    names = s.get("class_names") or s.get("label_names")
    counts = list(s["class_counts"].values())
    heading = "class" if s["target_type"] == "single_label" else "label"
    rows = [[name, count] for name, count in zip(names, counts)]
    return "## Target summary\n\n" + table([heading, "count"], rows)


def _answer(data: Mapping[str, Any]) -> str:
    """The top candidate, the recommendations and a short ranked summary, before any detail."""
    answer = benchmark_answer(data)
    notes = "".join(f"- {text(n)}\n" for n in answer["notes"])
    if answer["headers"] is None:
        return "## Answer\n\n" + text(answer["lead"]) + "\n\n" + notes
    return ("## Answer\n\n" + text(answer["lead"]).replace(answer["top_text"], f"**{answer['top_text']}**", 1)
            + "\n\n" + notes + "\n" + table(answer["headers"], answer["rows"]))


def _how_to_read(data: Mapping[str, Any]) -> str:
    return "## How to read these numbers\n\n" + "".join(f"{text(part)}\n\n" for part in how_to_read(data))


def _extractor_summary(data: Mapping[str, Any]) -> str:
    rows = []
    for r in data["extractor_results"]:
        e = r["embedding"]
        rows.append([r["name"], r["extractor_type"], e.get("embedding_dim"), e.get("dtype"), e.get("sparse"),
                     e.get("nnz"), recipe_summary(r["recipe"])])
    return ("## Extractors\n\nRecipes are summarized; the JSON report keeps them whole.\n\n"
            + table(["extractor", "type", "dim", "dtype", "sparse", "nnz", "recipe"], rows))


def _overlap_configuration(data: Mapping[str, Any]) -> str:
    settings = data["metadata"]["settings"]
    key = "continuous_config" if data["dataset_summary"]["target_type"] == "regression" else "scoring_config"
    catalog = data["metadata"].get("label_catalog") or {"entries": []}
    display = {entry["key"]: entry["display"] for entry in catalog["entries"]}

    def shown(name: str, value: Any) -> Any:
        """Typed labels in ``k`` and ``exclude_classes`` are shown by their display text."""
        if name == "k" and isinstance(value, list):
            value = {display.get(item["label_key"], item["label_key"]): item["k"] for item in value}
        elif name == "exclude_classes":
            value = [display.get(item["label_key"], item["label_key"]) for item in value]
        return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value

    body = table(["setting", "value"], [[name, shown(name, value)] for name, value in settings[key].items()])
    excluded = settings["scoring_config"].get("exclude_classes") or []
    note = ""
    if excluded and key == "scoring_config":
        note = ("\nExcluded from macro/weighted aggregation (still fitted and shown per class): "
                + ", ".join(text(display.get(e["label_key"], e["label_key"])) for e in excluded) + "\n")
    return "## Overlap configuration\n\nBackend: MiniBatchKMeans (fixed).\n\n" + body + note


def _ranking(data: Mapping[str, Any]) -> str:
    ranking = benchmark_ranking(data)
    if ranking["columns"] is None:
        return "## Ranking\n\n" + text(ranking["heading"]) + "\n"
    invalid = ranking["invalid"]
    tail = f"\nNot ranked (invalid primary aggregate): {', '.join(text(n) for n in invalid)}\n" if invalid else ""
    return ("## Ranking\n\n" + text(ranking["heading"]).replace(ranking["metric"], f"**{ranking['metric']}**", 1)
            + "\n\n" + table(ranking["columns"], ranking["rows"]) + tail)


def _extractor_details(data: Mapping[str, Any]) -> str:
    """Every extractor's detail; the pairwise matrix only for the top candidate (all of them stay in the JSON)."""
    from ..results import BenchmarkResult

    ranked = BenchmarkResult.from_dict(data).ranked_results()
    top = ranked[0].name if ranked else None
    parts = ["## Per-extractor details\n"]
    for r in data["extractor_results"]:
        parts.append(extractor_detail(r, pairwise=r["name"] == top))
    return "\n".join(parts)


#: Largest class count whose pairwise matrix is printed; larger matrices stay in the JSON.
MAX_PAIRWISE_CLASSES = 12


def _pairwise(o: Mapping[str, Any]) -> str:
    """Pairwise overlap (row class a against column class b); '–' on the diagonal and where unevaluable."""
    keys = list(o["pairwise_scores"])
    if len(keys) > MAX_PAIRWISE_CLASSES:
        return f"Pairwise overlap of {len(keys)} classes: see `pairwise_scores` in the JSON.\n"
    rows = [[_display(o, a)] + [o["pairwise_scores"][a].get(b) for b in keys] for a in keys]
    return "Pairwise overlap (row vs column):\n\n" + table(["class", *(_display(o, b) for b in keys)], rows)


def extractor_detail(r: Mapping[str, Any], pairwise: bool = True) -> str:
    o = r["overlap"]
    if r.get("error"):
        error = r["error"]
        return (f"### {text(r['name'])}\n\nFailed in the `{text(error['stage'])}` stage: "
                f"{text(error['type'])}: {text(error['message'])}\n")
    lines = [f"### {text(r['name'])}\n",
             f"Overlap score {o['score']:.4f} (macro {o['macro_score']:.4f}, weighted {o['weighted_score']:.4f}); "
             f"recommendation `{r['recommendation']}`.\n"]
    meta = o["metadata"]
    if meta.get("excluded_classes"):
        lines.append("Excluded from aggregation: " + ", ".join(text(_display(o, k)) for k in meta["excluded_classes"])
                     + ". Do not average the per-class scores below to reconstruct the global score.\n")
    if o["per_class_scores"]:
        rows = [[_display(o, k), o["class_counts"].get(k), o["k_per_class"].get(k), v,
                 "yes" if k in meta.get("aggregation_classes", []) else "no"] for k, v in o["per_class_scores"].items()]
        lines.append(table(["class", "count", "k", "overlap", "aggregated"], rows))
        lines.append(_pairwise(o) if pairwise else "Pairwise overlap: shown for the top candidate; all pairs are in "
                     "`pairwise_scores` in the JSON and in the HTML report.\n")
    if o.get("loss_ratio") is not None:
        null = o["regression"]["null_calibration"]
        lines.append(f"Loss ratio {o['loss_ratio']:.4f} (actual {null['actual_loss']:.4f} / null {null['null_loss']:.4f}; "
                     f"null mode `{null['null_mode_used']}`, {null['n_null_permutations']} permutations).\n")
    if len(r["metrics"]) > 1:  # only overlap: its numbers are already in the line above
        lines.append(metrics_detail(r))
    weakest = r.get("weakest_class")
    if weakest:
        lines.append(f"Weakest class: {text(weakest['display'])} ({weakest['score']:.4f}).\n")
    if r["warnings"]:
        lines.append("Warnings:\n\n" + "".join(f"- {text(w)}\n" for w in r["warnings"]))
    if r.get("separatix"):
        lines.append(separatix_detail(r["separatix"]))
    return "\n".join(lines)


def _reproducibility(data: Mapping[str, Any]) -> str:
    meta = data["metadata"]
    rows = [["run key", meta["run_key"]], ["primary metric", meta["primary_metric"]],
            ["seed", meta["settings"]["scoring_config"]["random_state"]]]
    rows += [[f"version {name}", v] for name, v in meta["versions"].items()]
    rows += [[f"artifact {j['stage']} {j['extractor']}", j["key"]] for j in meta["plan"]]
    rows += [[f"file {f['role']} {f['path']}", f"sha256 {f['sha256']} ({f['size_bytes']} bytes)"]
             for f in meta.get("input_files", [])]
    if meta.get("cache"):  # only runs with a cache say where it lives
        rows += [["cache store", meta["cache"]["store"]], ["cache mode", meta["cache"]["mode"]]]
        rows += [[f"cache {r['name']}", r["embedding"].get("cache_status", "-")] for r in data["extractor_results"]
                 if r.get("embedding")]
    return "## Reproducibility\n\n" + table(["field", "value"], rows)


#: Report sections in order; later features append their own section functions here.
SECTIONS: list[Section] = [_title, _answer, _ranking, _how_to_read, _dataset_summary, _target_summary,
                           _extractor_summary, _overlap_configuration, stability_section, _extractor_details,
                           _reproducibility]

SECTIONS.append(compression_section)
SECTIONS.insert(SECTIONS.index(_target_summary) + 1, structure_section)
SECTIONS.append(resource_section)


def render_benchmark(data: Mapping[str, Any]) -> str:
    """Render the Markdown report of a serialized benchmark result."""
    return "\n".join(section(data) for section in SECTIONS)
