"""The benchmark report's sections, built from a serialized BenchmarkResult (a plain dict).

:func:`benchmark_sections` is the one list of sections; the Markdown report renders it here and the
HTML page renders the same list (:mod:`vertebrae.reports.html`), so both say the same things.  It
never touches live objects, so an archived ``report.json`` regenerates the same report.  Order: the
answer with its caveats, the ranking, how to read it, the data and configuration, per-class scores,
stability and which differences are real, then the compact per-extractor detail and reproducibility.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..inputs.views import view_name
from .document import Code, Para, Section, Strong, Table, items, to_markdown
from .markdown_agreement import agreement_caveats, agreement_section
from .markdown_referee import referee_section
from .markdown_compression import compression_section
from .markdown_metrics import metrics_detail
from .markdown_resources import resource_section
from .markdown_screening import screened_out_text, screening_section
from .markdown_separatix import separatix_detail
from .markdown_stability import answer_caveats, draw_note, stability_section
from .markdown_structure import structure_section
from .markdown_verdicts import verdict_lines, verdict_section
from .reading import (RANKING_SECONDARY, benchmark_answer, benchmark_ranking, class_display, how_to_read,
                      recipe_summary)

SectionBuilder = Callable[[Mapping[str, Any]], Section | None]

#: Most classes shown as columns of the per-class and pairwise tables; larger runs stay in the JSON.
MAX_TABLE_CLASSES = 12
MAX_PAIRWISE_CLASSES = MAX_TABLE_CLASSES
#: Characters of each artifact key shown (enough to find it in a store; the JSON keeps it whole).
ARTIFACT_KEY_CHARS = 12


def report_title(data: Mapping[str, Any]) -> str:
    return f"vertebrae benchmark report: {data['dataset_summary'].get('name', '')}"


def identity_text(identity: Mapping[str, Any]) -> str:
    """``declared: digits @ v1 (sha256 0123456789ab)``: kind, id, revision and content hash when present."""
    return (f"{identity['kind']}: {identity['dataset_id']}"
            + (f" @ {identity['revision']}" if identity.get("revision") else "")
            + (f" (sha256 {identity['content_sha256'][:12]})" if identity.get("content_sha256") else ""))


def _answer(data: Mapping[str, Any]) -> Section:
    """The top candidate, the recommendations, the caveats, then a short ranked summary."""
    answer = benchmark_answer(data)
    lead = answer["lead"]
    top = answer["top_text"]
    blocks: list[Any] = [Para(Strong(top), lead[len(top):]) if top and lead.startswith(top) else Para(lead)]
    blocks += verdict_lines(data)
    if answer["notes"]:
        blocks.append(items(answer["notes"]))
    caveats = answer_caveats(data) + agreement_caveats(data)
    if caveats:
        blocks += [Para(Strong("Caveats:")), items(caveats)]
    if answer["headers"] is not None:
        blocks.append(Table(answer["headers"], answer["rows"]))
    return Section("Answer", blocks)


def _ranking(data: Mapping[str, Any]) -> Section:
    ranking = benchmark_ranking(data)
    if ranking["columns"] is None:
        return Section("Ranking", [Para(ranking["heading"])])
    heading, metric = ranking["heading"], ranking["metric"]
    before, _, after = heading.partition(metric)
    blocks: list[Any] = [Para(before, Strong(metric), after), Table(ranking["columns"], ranking["rows"],
                                                                           secondary=RANKING_SECONDARY)]
    if ranking["invalid"]:
        blocks.append(Para("Not ranked (invalid primary aggregate): " + ", ".join(ranking["invalid"])))
    return Section("Ranking", blocks)


def _how_to_read(data: Mapping[str, Any]) -> Section:
    return Section("How to read these numbers", [Para(part) for part in how_to_read(data)])


def _dataset_summary(data: Mapping[str, Any]) -> Section:
    s = data["dataset_summary"]
    rows = [["identity", identity_text(s["identity"])], ["target type", s["target_type"]],
            ["samples", s["n_samples"]], ["input", s.get("input_kind")]]
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
    return Section("Dataset summary", [Table(["field", "value"], rows)])


def _scored(results: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Results with per-class scores, in report order."""
    return [r for r in results if (r.get("overlap") or {}).get("per_class_scores")]


def _by_view(results: list[Mapping[str, Any]]) -> dict[str | None, list[Mapping[str, Any]]]:
    """``results`` grouped by the task they score (None: the dataset's own targets), in view order: each view has its
    own classes, so nothing per class is shared across views.  Read off each result's own fields, by the rule
    ``ExtractorResult.view`` uses (no second load of the whole result)."""
    by_view: dict[str | None, list[Mapping[str, Any]]] = {}
    for r in results:
        by_view.setdefault(view_name(r.get("target_view"), r.get("label_view")), []).append(r)
    return by_view


def _targets_of(summary: Mapping[str, Any], r: Mapping[str, Any]) -> Mapping[str, Any]:
    """The summary of the targets result ``r`` scores: a target view's, a hierarchy level's or the dataset's own."""
    if r.get("target_view") is not None:
        return summary["target_views"][r["target_view"]]
    if r.get("label_view") is not None:
        return summary["label_levels"][r["label_view"]]
    return summary


def _targets_table(s: Mapping[str, Any], scored: list[Mapping[str, Any]]) -> Table:
    """One target set's counts; for classes also the scorer's k and aggregation, read from a result scoring them."""
    if s["target_type"] == "regression":
        rows = [[name, v["mean"], v["std"], v["min"], v["max"]] for name, v in s["target_statistics"].items()]
        return Table(["target", "mean", "std", "min", "max"], rows)
    names = s.get("class_names") or s.get("label_names")
    keys, counts = list(s["class_counts"]), list(s["class_counts"].values())
    heading = "class" if s["target_type"] == "single_label" else "label"
    if not scored:
        return Table([heading, "count"], [list(row) for row in zip(names, counts)])
    o = scored[0]["overlap"]  # k and aggregation depend on the class sizes and the config, not the extractor
    aggregated = o["metadata"].get("aggregation_classes", [])
    return Table([heading, "count", "k", "aggregated"], [[name, count, o["k_per_class"].get(key), key in aggregated]
                                                         for name, count, key in zip(names, counts, keys)])


def _views_note(s: Mapping[str, Any], active: list[str | None]) -> list[Para]:
    """Which views were scored and which the dataset has; nothing for a dataset without views."""
    available = ([f"target={name}" for name in s.get("target_views", {})]
                 + [f"level={name}" for name in s.get("label_levels", {})])
    if not available:
        return []
    scored = ", ".join(view for view in active if view is not None) or "none (the dataset's own targets)"
    return [Para(f"Views scored: {scored}. Available in the dataset: {', '.join(available)}.")]


def _target_summary(data: Mapping[str, Any]) -> Section:
    """Targets and their counts with k and aggregation: one table per scored target set (the dataset's own targets,
    each target view, each hierarchy level), since each has its own classes, counts and k."""
    s = data["dataset_summary"]
    by_view = _by_view(data["extractor_results"]) or {None: []}
    blocks: list[Any] = _views_note(s, list(by_view))
    if list(by_view) == [None]:
        return Section("Target summary", [*blocks, _targets_table(s, _scored(by_view[None]))])
    if None not in by_view:
        blocks.append(Section("dataset targets (not scored)", [_targets_table(s, [])], level=3))
    blocks += [Section(view or "dataset targets", [_targets_table(_targets_of(s, results[0]), _scored(results))],
                       level=3) for view, results in by_view.items()]
    return Section("Target summary", blocks)


def _source(embedding: Mapping[str, Any]) -> str | None:
    """Where an output's rows come from: ``text (caption)`` for a branch reading one field, ``fused (image,
    caption)`` for one reading several, the modality alone for a one-modality raw dataset (``image``)."""
    fields = embedding.get("input_fields")
    return embedding.get("source") if not fields else f"{embedding['source']} ({', '.join(fields)})"


def _extractor_summary(data: Mapping[str, Any]) -> Section:
    """One row per result; a source column when some output says which input fields (or modality) it reads."""
    results = data["extractor_results"]
    sourced = any(r["embedding"].get("source") for r in results)
    rows = [[r["name"], r["extractor_type"], *([_source(r["embedding"])] if sourced else []),
             *(r["embedding"].get(field) for field in ("embedding_dim", "dtype", "sparse", "nnz")),
             recipe_summary(r["recipe"])] for r in results]
    headers = ["extractor", "type", *(["source"] if sourced else []), "dim", "dtype", "sparse", "nnz", "recipe"]
    return Section("Extractors", [Para("Recipes are summarized; the JSON report keeps them whole."),
                                  Table(headers, rows)])


def _overlap_configuration(data: Mapping[str, Any]) -> Section:
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

    blocks: list[Any] = [Para("Backend: MiniBatchKMeans (fixed)."),
                         Table(["setting", "value"],
                               [[name, shown(name, value)] for name, value in settings[key].items()])]
    excluded = settings["scoring_config"].get("exclude_classes") or []
    if excluded and key == "scoring_config":
        blocks.append(Para("Excluded from macro/weighted aggregation (still fitted and shown per class): "
                           + ", ".join(display.get(e["label_key"], e["label_key"]) for e in excluded)))
    return Section("Overlap configuration", blocks)


def _per_class(data: Mapping[str, Any]) -> Section | None:
    """One table per target view (each view has its own classes): a row per extractor, a column per class (at most
    MAX_TABLE_CLASSES; beyond, a summary per extractor)."""
    scored = _scored(data["extractor_results"])
    if not scored:
        return None
    note = "1.0 means the class is separated from the others; the weakest classes set the ceiling of a space."
    by_view = _by_view(scored)
    if len(by_view) == 1:
        return Section("Per-class overlap", [Para(note), *_per_class_blocks(scored)])
    return Section("Per-class overlap", [Para(note, " One table per target view: each view has its own classes."),
                                         *(Section(view or "dataset targets", _per_class_blocks(results), level=3)
                                           for view, results in by_view.items())])


def _per_class_blocks(scored: list[Mapping[str, Any]]) -> list[Any]:
    """The per-class table of results that share their classes (one view)."""
    first = scored[0]["overlap"]
    keys = list(first["per_class_scores"])
    if len(keys) <= MAX_TABLE_CLASSES:
        rows = [[r["name"], *(r["overlap"]["per_class_scores"].get(k) for k in keys)] for r in scored]
        return [Table(["extractor", *(class_display(first, k) for k in keys)], rows)]
    rows = []
    for r in scored:
        scores = sorted((v, class_display(r["overlap"], k)) for k, v in r["overlap"]["per_class_scores"].items()
                        if v is not None)
        values = [v for v, _ in scores]
        weakest = ", ".join(f"{name} ({v:.4f})" for v, name in scores[:3])
        rows.append([r["name"], values[0] if values else None, values[len(values) // 2] if values else None,
                     values[-1] if values else None, weakest])
    return [Para(f"{len(keys)} classes: a summary per extractor here; every class is in ", Code("per_class_scores"),
                 " in the JSON."), Table(["extractor", "min", "median", "max", "weakest classes"], rows)]


def _pairwise(o: Mapping[str, Any]) -> list[Any]:
    """Pairwise overlap (row class a against column class b); '–' on the diagonal and where unevaluable."""
    keys = list(o["pairwise_scores"])
    if len(keys) > MAX_PAIRWISE_CLASSES:
        return [Para(f"Pairwise overlap of {len(keys)} classes: see ", Code("pairwise_scores"), " in the JSON.")]
    rows = [[class_display(o, a)] + [o["pairwise_scores"][a].get(b) for b in keys] for a in keys]
    return [Para("Pairwise overlap (row vs column):"), Table(["class", *(class_display(o, b) for b in keys)], rows)]


def extractor_detail(r: Mapping[str, Any], pairwise: bool = True) -> Section:
    """One extractor, compactly: scores, exclusions, metrics, warnings, pairwise (top only) and Separatix."""
    if r.get("error"):
        error = r["error"]
        return Section(r["name"], [Para("Failed in the ", Code(error["stage"]),
                                        f" stage: {error['type']}: {error['message']}")], level=3)
    if (r.get("screening") or {}).get("status") == "screened_out":
        return Section(r["name"], [Para(screened_out_text(r))], level=3)
    o = r["overlap"]
    weakest = r.get("weakest_class")
    note = draw_note(o["score"], r.get("stability"))
    blocks: list[Any] = [Para(f"Overlap score {o['score']:.4f} (macro {o['macro_score']:.4f}, weighted "
                              f"{o['weighted_score']:.4f}{'; ' + note if note else ''}); recommendation ", Code(r["recommendation"]), "."
                              + (f" Weakest class: {weakest['display']} ({weakest['score']:.4f})." if weakest else ""))]
    meta = o["metadata"]
    if meta.get("excluded_classes"):
        excluded = ", ".join(class_display(o, k) for k in meta["excluded_classes"])
        blocks.append(Para("Excluded from aggregation: " + excluded
                           + ". Do not average the per-class scores to reconstruct the global score."))
    if o.get("loss_ratio") is not None:
        null = o["regression"]["null_calibration"]
        blocks.append(Para(f"Loss ratio {o['loss_ratio']:.4f} (actual {null['actual_loss']:.4f} / null "
                           f"{null['null_loss']:.4f}; null mode ", Code(null["null_mode_used"]),
                           f", {null['n_null_permutations']} permutations)."))
        per_target = o["regression"].get("per_target") or {}  # absent in files written before it existed
        if len(per_target) > 1:
            order = [name for name in o["regression"].get("scored_targets", []) if name in per_target]
            blocks.append(Para("Per target, each scored alone: " + ", ".join(
                f"{name} {per_target[name]['score']:.4f} (loss ratio {per_target[name]['loss_ratio']:.4f})"
                for name in order or sorted(per_target)) + "."))
    if len(r["metrics"]) > 1:  # only overlap: its numbers are already in the line above
        blocks += metrics_detail(r)
    if r["warnings"]:
        blocks += [Para("Warnings:"), items(r["warnings"])]
    if o["pairwise_scores"] and pairwise:
        blocks += _pairwise(o)
    if r.get("separatix"):
        blocks.append(separatix_detail(r["separatix"], o))
    return Section(r["name"], blocks, level=3)


def _extractor_details(data: Mapping[str, Any]) -> Section:
    """Every extractor's detail; the pairwise matrix only for the top candidate (every pair stays in the JSON)."""
    from ..families.result_protocol import result_from_dict

    ranked = result_from_dict(data).ranked_results()
    top = ranked[0].name if ranked else None
    blocks: list[Any] = []
    if top is not None and any((r.get("overlap") or {}).get("pairwise_scores") for r in data["extractor_results"]):
        blocks.append(Para(f"The pairwise class matrix is shown for the top candidate ({top}); every extractor's "
                           "pairs are in ", Code("pairwise_scores"), " in the JSON."))
    blocks += [extractor_detail(r, pairwise=r["name"] == top) for r in data["extractor_results"]]
    return Section("Per-extractor details", blocks)


def _reproducibility(data: Mapping[str, Any]) -> Section:
    """Run key, versions and input files, then one row of artifact keys per extractor (a column per stage)."""
    meta = data["metadata"]
    rows = [["run key", meta["run_key"]], ["primary metric", meta["primary_metric"]],
            ["seed", meta["settings"]["scoring_config"]["random_state"]]]
    rows += [[f"version {name}", v] for name, v in meta["versions"].items()]
    rows += [[f"file {f['role']} {f['path']}", f"sha256 {f['sha256']} ({f['size_bytes']} bytes)"]
             for f in meta.get("input_files", [])]
    if meta.get("cache"):  # only runs with a cache say where it lives
        rows += [["cache store", meta["cache"]["store"]], ["cache mode", meta["cache"]["mode"]]]
        rows += [[f"cache {r['name']}", r["embedding"].get("cache_status", "-")] for r in data["extractor_results"]
                 if r.get("embedding")]
    blocks: list[Any] = [Table(["field", "value"], rows)]
    stages = list(dict.fromkeys(j["stage"] for j in meta["plan"]))
    keys = {(j["extractor"], j["stage"]): j["key"].split("/")[-1][:ARTIFACT_KEY_CHARS] for j in meta["plan"]}
    extractors = list(dict.fromkeys(j["extractor"] for j in meta["plan"]))
    if extractors:
        blocks += [Para(f"Artifact keys (first {ARTIFACT_KEY_CHARS} characters of ", Code("<stage>/<key>"),
                        "; the full keys are in ", Code("metadata.plan"), " in the JSON):"),
                   Table(["extractor", *stages],
                         [[name, *(keys.get((name, s)) for s in stages)] for name in extractors])]
    return Section("Reproducibility", blocks)


#: Report sections in order (answer first, detail last); a builder returning None adds nothing.
SECTIONS: list[SectionBuilder] = [_answer, _ranking, agreement_section, referee_section, _how_to_read, _dataset_summary, _target_summary,
                                  structure_section, _extractor_summary, _overlap_configuration, _per_class,
                                  stability_section, verdict_section, screening_section, compression_section, resource_section,
                                  _extractor_details, _reproducibility]


def benchmark_sections(data: Mapping[str, Any]) -> list[Section]:
    """The report's sections, shared by the Markdown and HTML renderers."""
    return [section for section in (build(data) for build in SECTIONS) if section is not None]


def render_benchmark(data: Mapping[str, Any]) -> str:
    """Render the Markdown report of a serialized benchmark result."""
    return to_markdown(report_title(data), benchmark_sections(data))
