"""Plain-text explanations shared by the Markdown and HTML reports (from serialized results only).

The sentences are plain text (no markup), so each renderer escapes them its own way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Recipe parameters worth naming first in a one-cell recipe summary.
SALIENT_PARAMS = ("model", "model_name", "n_components", "hidden_layer", "layer", "pooling", "output", "dimension",
                  "method", "noise_std")
SHOWN_PARAMS = 3

#: Separatix's own score fields with their direction (Separatix's `overlap_score` runs the other way
#: from vertebrae's overlap score: it is the mean neighbourhood class mixing).
SEPARATIX_SCORE_DIRECTIONS = {
    "signal_score": "higher = more learnable signal than a dummy probe",
    "overlap_score": "lower is better (Separatix's neighbourhood class mixing, not vertebrae's overlap score)",
    "linearity_score": "descriptive (share of the best probe a linear probe reaches)",
    "nonlinearity_score": "descriptive (gain of nonlinear over linear probes)",
    "fragmentation_score": "lower is better (graph fragmentation)",
    "topology_score": "descriptive (topological structure strength)",
    "reliability_score": "higher = more reliable evidence",
}


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def class_display(overlap: Mapping[str, Any], key: str) -> str:
    """The report label of a class's stable key (``1 (int)`` beside ``1 (str)``), as the result's overlap names it."""
    return overlap.get("labels", {}).get(key, key)


def recipe_summary(recipe: Mapping[str, Any]) -> str:
    """One table cell for a recipe: type, the estimator/callable/model, and a few parameters."""
    kind = recipe.get("type", "?")
    target = next((recipe[k] for k in ("estimator", "callable", "model", "model_name") if isinstance(recipe.get(k), str)),
                  None)
    head = kind if target is None else f"{kind} {target.rsplit('.', 1)[-1]}"
    params = recipe.get("params") if isinstance(recipe.get("params"), Mapping) else {}
    chosen = [k for k in SALIENT_PARAMS if k in params] or sorted(params)
    parts = [f"{k}={_short(params[k])}" for k in chosen[:SHOWN_PARAMS]]
    if len(params) > len(parts):
        parts.append("...")
    if not parts and recipe.get("content_sha256"):
        parts.append(f"sha256 {str(recipe['content_sha256'])[:12]}")
    return head + (f" ({', '.join(parts)})" if parts else "")


def score_with_interval(score: float | None, low: float | None, high: float | None) -> str | None:
    """``0.9726 [0.9601, 0.9790]``; the bare score without a stability interval."""
    if score is None:
        return None
    return f"{score:.4f}" if low is None or high is None else f"{score:.4f} [{low:.4f}, {high:.4f}]"


def benchmark_answer(data: Mapping[str, Any]) -> dict[str, Any]:
    """The lead sentence, recommendation notes and the short summary table (headers None without a ranking)."""
    from ..families.result_protocol import result_from_dict
    from .markdown_stability import draw_note, interval_text

    result = result_from_dict(data)
    ranked = result.ranked_results()
    notes = list(data["recommendations"])
    stability = {r["name"]: r.get("stability") for r in data["extractor_results"]}
    if not ranked:
        return {"lead": "No extractor has a valid primary aggregate, so there is no ranking.", "notes": notes,
                "headers": None, "rows": [], "top_text": ""}
    best = ranked[0]
    with_interval = best.primary_metric_name == "overlap"
    rows = []
    for i, r in result.ranking():
        summary = r.stability.summary if r.stability is not None else None
        low, high = (summary.interval_low, summary.interval_high) if summary else (None, None)
        note = draw_note(r.primary_score, stability[r.name]) if with_interval else None
        score = (score_with_interval(r.primary_score, low, high) if note is None else f"{r.primary_score:.4f}, {note}") \
            if with_interval else r.primary_score
        rows.append([i, r.name, score, r.recommendation] + ([] if with_interval else [interval_text(low, high)]))
    headers = ["rank", "extractor", f"{best.primary_metric_name} (primary)", "recommendation"]
    if not with_interval:
        headers.append("overlap stability interval")
    top_text = f"Top candidate: {best.name}"
    lead = (f"{top_text} — {best.primary_metric_name} {best.primary_score:.4f}"
            f"{_beside_the_draw(best.primary_score, stability[best.name]) if with_interval else ''}, "
            f"recommendation {best.recommendation}.")
    return {"lead": lead, "notes": notes, "headers": headers, "rows": rows, "top_text": top_text}


def _beside_the_draw(score: float, stability: Mapping[str, Any] | None) -> str:
    """`` (repeat mean 0.9712, stability interval [...])`` after a ranked draw; why, when the draw is outside it."""
    from .markdown_stability import draw_note, interval_text

    if not stability:
        return ""
    summary = stability["summaries"]["score"]
    note = draw_note(score, stability)
    return (f" ({note})" if note else f" (repeat mean {summary['mean']:.4f}, stability interval "
                                      f"{interval_text(summary['interval_low'], summary['interval_high'])})")


#: Row-builder columns of the ranking table (see ``vertebrae.families.labeled.results.result_row``): the spec's core
#: columns, then embedding, recipe and recommendation (``COMPRESSION_COLUMN`` after the embedding in a run with
#: compression variants); Separatix's own fields follow when it ran.
RANKING_COLUMNS: list[str] = ["rank", "extractor", "primary_metric", "primary_score", "overlap_score", "overlap_macro",
                              "overlap_weighted", "stability_interval", "weakest_class", "best_probe", "probe_metric",
                              "probe_score", "embedding_dim", "recipe", "recommendation"]
SEPARATIX_COLUMNS: list[str] = ["separatix_recommendation", "separatix_confidence"]
#: Shown only when the run has compression variants (``compression_text`` of each row's variant).
COMPRESSION_COLUMN = "compression"
#: What the HTML ranking folds into its "more columns" table so that the ranking fits a 1280 px page: the
#: metric's own breakdown, the probe hints, the compression, the recipe and Separatix's fields.
RANKING_SECONDARY = frozenset({"primary_metric", "overlap_score", "overlap_macro", "overlap_weighted", "weakest_class",
                               "best_probe", "probe_metric", "probe_score", "recipe", COMPRESSION_COLUMN,
                               *SEPARATIX_COLUMNS})
#: Shown only when a candidate's space is scale-dominated (``embedding.column_scale``).
SCALE_COLUMN = "dominant columns"
#: Output, target and label views, shown only when a result carries them.
VIEW_COLUMNS: list[str] = ["output_name", "hidden_layer", "pooling", "target_view", "label_view"]


def scale_text(scale: Mapping[str, Any]) -> str:
    """``column(s) 12 at 388x the median column std (98% of the squared row norm)``: a scale-dominated space."""
    columns = ", ".join(map(str, scale["dominant_columns"]))
    more = scale["n_dominant_columns"] - len(scale["dominant_columns"])
    return (f"column(s) {columns}{f' (+{more})' if more > 0 else ''} at {scale['std_ratio']:,.0f}x the median "
            f"column std ({scale['norm_share']:.0%} of the squared row norm)")


def compression_text(compression: Mapping[str, Any] | None) -> str | None:
    """``pca 4``, ``quantize int8``, ``pca 40 (not applied: requested 40 dimensions but the embedding has only 16
    dimensions; scored uncompressed)``: what a ranked result's numbers were measured on, and why a variant was not
    applied; None for the raw embedding (no variants, or the ``none`` variant)."""
    from ..extractors.compression import not_applied_reason

    if not compression or compression["method"] == "none":
        return None
    size = compression["parameters"].get("n_components") or compression["parameters"].get("dtype")
    text = compression["method"] if size is None else f"{compression['method']} {size}"
    if compression["applied"]:
        return text
    reason = not_applied_reason(compression)
    return text + (f" (not applied: {reason}; scored uncompressed)" if reason
                   else " (not applied, scored uncompressed)")


def benchmark_ranking(data: Mapping[str, Any]) -> dict[str, Any]:
    """Heading, columns and rows of the ranking table (columns None when no aggregate is valid)."""
    from ..families.result_protocol import result_from_dict
    from .markdown_stability import draw_note, interval_text

    result = result_from_dict(data)
    ranked = result.ranked_results()
    if not ranked:
        return {"heading": "Unavailable: no extractor has a valid primary aggregate.", "columns": None, "rows": [],
                "invalid": [r.name for r in result.extractor_results], "metric": ""}
    rows = result.rows(include_invalid=True)
    valid_rows = [r for r in rows if r["rank"] is not None]
    recipes = {r["name"]: r["recipe"] for r in data["extractor_results"]}
    scales = {r["name"]: (r.get("embedding") or {}).get("column_scale") for r in data["extractor_results"]}
    stability = {r["name"]: r.get("stability") for r in data["extractor_results"]}
    compressions = {r["name"]: r.get("compression") for r in data["extractor_results"]}
    views = [c for c in VIEW_COLUMNS if any(row.get(c) is not None for row in valid_rows)]
    columns = RANKING_COLUMNS[:2] + views + RANKING_COLUMNS[2:]
    if any(compressions[row["extractor"]] for row in valid_rows):  # after the embedding it describes
        columns.insert(columns.index("embedding_dim") + 1, COMPRESSION_COLUMN)
    if any(row["separatix_status"] is not None for row in valid_rows):
        columns += SEPARATIX_COLUMNS
    if any(scales[row["extractor"]] for row in valid_rows):  # beside the candidate: a few columns decide its score
        columns.append(SCALE_COLUMN)

    def value(row: Mapping[str, Any], column: str) -> Any:
        if column == "stability_interval":  # beside the ranked score: why, when that score is outside it
            return (draw_note(row["overlap_score"], stability[row["extractor"]])
                    or interval_text(row["stability_interval_low"], row["stability_interval_high"]))
        if column == "recipe":
            return recipe_summary(recipes[row["extractor"]])
        if column == COMPRESSION_COLUMN:
            return compression_text(compressions[row["extractor"]])
        if column == SCALE_COLUMN:
            return None if not scales[row["extractor"]] else scale_text(scales[row["extractor"]])
        return row.get(column)

    metric = ranked[0].primary_metric_name
    order = "higher is better" if ranked[0].primary_metric.higher_is_better else "lower is better"
    return {"heading": f"Ranked by {metric} ({order}).", "metric": metric, "columns": columns,
            "rows": [[value(row, c) for c in columns] for row in valid_rows],
            "invalid": [r["extractor"] for r in rows if r["rank"] is None]}


def _cutoffs(target_type: str) -> str:
    from ..families.result_protocol import RECOMMENDATION_CUTOFFS

    strong, moderate, stem = RECOMMENDATION_CUTOFFS[target_type]
    return (f"Recommendation labels use this version's cut-offs for {target_type.replace('_', '-')} targets: "
            f"strong_{stem} at an overlap score of at least {strong}, moderate_{stem} at least {moderate}, "
            f"weak_{stem} below. They are triage guidance, not verdicts (calibration in docs/results.md).")


def how_to_read(data: Mapping[str, Any]) -> list[str]:
    """Paragraphs explaining this run's numbers for its target type, primary metric and diagnostics."""
    summary, metadata = data["dataset_summary"], data["metadata"]
    target_type = summary["target_type"]
    settings = metadata.get("settings", {})
    primary = metadata.get("primary_metric", "overlap")
    parts = []
    if target_type == "regression":
        normalized = settings.get("continuous_config", {}).get("normalize_embeddings")
        parts.append("The overlap score here is OverlapIndex's continuous score for a regression target: 1 - "
                     "loss_ratio, where loss_ratio is the embedding's target-prediction loss divided by the loss "
                     "under permuted targets (the null). loss_ratio 1.0 means the neighbourhoods predict the target "
                     "no better than chance (score 0.0); lower loss_ratio and higher score are better. The score "
                     "runs far below 1.0 even for easy targets: a target that a linear probe predicts with R2 0.98 "
                     "scored 0.31-0.43 in our calibration (16 and 64 dimensions), so do not read it on the "
                     "classification scale.")
        if normalized:
            parts.append("normalize_embeddings=True: every row was scaled to unit length before scoring, which "
                         "removes row magnitude. A target that depends on magnitude (e.g. a linear target along the "
                         "norm) can look unpredictable; rerun with ContinuousOverlapScoringConfig("
                         "normalize_embeddings=False) to check.")
    else:
        unit, units = ("class", "classes") if target_type == "single_label" else ("label", "labels")
        parts.append(f"The overlap score (OverlapIndex) measures how well each {unit} occupies its own region of "
                     f"the embedding space: 1.0 means separated {units}, 0.0 complete overlap; higher is better. "
                     f"overlap_macro averages the per-{unit} scores equally, overlap_weighted by {unit} size, and "
                     "overlap_score is the global score (the macro average).")
        if target_type == "multi_label":
            parts.append("For multi-label targets the score does not fall to 0.0 at chance: random labels scored "
                         "0.21-0.29 in our calibration, labels that are noiseless linear functions of the embedding "
                         "0.55-0.68.")
    parts.append(_cutoffs(target_type))
    if primary != "overlap":
        parts.append(f"The ranking uses the primary metric {primary}; its direction is given in the ranking "
                     "heading. The overlap columns are shown as context, not combined with it.")
    stability = next((r["stability"] for r in data["extractor_results"] if r.get("stability")), None)
    if stability:
        level = stability["config"]["interval_level"]
        repeats = len((stability.get("repeat_scores") or {}).get("score") or []) or stability["config"]["repeats"]
        parts.append(f"A stability interval is the central {level:.0%} range of the overlap score over "
                     f"{repeats} repeats ({stability['config']['mode']} mode): a spread "
                     "under this protocol, not a confidence interval. Differences smaller than the intervals are "
                     "not meaningful.")
    if any(r.get("separatix") for r in data["extractor_results"]):
        parts.append("Fields named separatix_*, best_probe, probe_metric and probe_score are Separatix's own "
                     "diagnostic: descriptive, never used for ranking. Read probe_metric before probe_score. "
                     "Separatix's overlap_score is lower-is-better (neighbourhood class mixing), the opposite "
                     "direction of vertebrae's overlap score.")
    return parts
