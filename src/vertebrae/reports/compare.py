"""Compare two serialized results of the same type (``vertebrae compare A.json B.json``).

The comparison is itself plain data (rendered as Markdown, HTML or JSON by
:mod:`vertebrae.reports.compare_report`): ranking changes, primary-score deltas read
against stability intervals where both runs have them, per-class regressions, each candidate's
paired verdict in both runs (benchmark results: ``tied`` -> ``worse`` and so on, or why a run has
none), and whether the protocols match.  A candidate *regresses* when its primary score moves the
wrong way (respecting the metric's direction) by more than ``tolerance``, and a candidate of the
baseline that is missing from the new run regresses too (a dropped extractor must not pass a CI guard)
unless ``allow_missing``; the CLI exits with 1 then, so a comparison can guard CI.  A candidate that a
screened run left at a rung (``screening.status == "screened_out"``) has no full-data score to compare: it is
listed in ``screened_out`` with its last rung and partial score, never as a regression or as missing.
Runs of different datasets, target types or primary metrics are refused (:class:`InputValidationError`, exit 2),
never compared: a score delta between two different metrics means nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InputValidationError
from .reading import class_display


def _protocol(data: Mapping[str, Any]) -> dict[str, Any]:
    """What must be equal for two runs' scores to be comparable."""
    if data["result_type"] == "retrieval":
        protocol = data["protocol"]
        return {"config": protocol["config"], "dataset identity": protocol["identity"],
                "protocol fingerprint": protocol["fingerprint"], "primary metric": protocol["config"]["primary_metric"]}
    if data["result_type"] == "zero_shot":
        protocol = data["protocol"]
        return {"config": protocol["config"], "dataset identity": protocol["identity"],
                "prompts fingerprint": protocol["prompts_fingerprint"],
                "targets fingerprint": protocol["targets_fingerprint"], "primary metric": protocol["config"]["metric"]}
    settings = data["metadata"]["settings"]
    return {"dataset identity": data["dataset_summary"]["identity"],
            "target type": data["dataset_summary"]["target_type"],
            "primary metric": data["metadata"].get("primary_metric"),
            "scoring config": settings.get("scoring_config"), "continuous config": settings.get("continuous_config"),
            "stability config": settings.get("stability_config"), "metrics": settings.get("metrics")}


def _check_comparable(protocol_a: Mapping[str, Any], protocol_b: Mapping[str, Any], names: tuple[str, str]) -> None:
    """Scores of different datasets (``dataset_id``), target types or primary metrics do not compare at all:
    refuse, naming the first differing field.  A new revision or content hash of the same dataset is a reported
    protocol difference."""
    fields = {"dataset id": (lambda p: (p["dataset identity"] or {}).get("dataset_id"),
                             "compare two runs of the same dataset and target type"),
              "target type": (lambda p: p.get("target type"), "compare two runs of the same dataset and target type"),
              "primary metric": (lambda p: p.get("primary metric"), "compare results ranked by the same metric")}
    for field, (value, fix) in fields.items():
        if value(protocol_a) != value(protocol_b):
            raise InputValidationError(f"{names[0]} and {names[1]} do not measure the same thing: {field} "
                                       f"{value(protocol_a)!r} vs {value(protocol_b)!r}; {fix}")


def _candidates(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> rank, primary score, direction, stability interval and per-class scores, in ranking order (ranked
    results first, under the one tie rule of ``result_protocol.rank_results``; then the unranked in input order)."""
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    ranking = result.ranking()
    ranks = {r.result.name: r.rank for r in ranking}
    serialized = {r["name"]: r for r in data["extractor_results"]}
    view = {}
    for r in [r.result for r in ranking] + [r for r in result.extractor_results if r.name not in ranks]:
        stability = getattr(r, "stability", None)
        interval = None
        if stability is not None and r.primary_metric_name == "overlap":
            interval = [stability.summary.interval_low, stability.summary.interval_high]
        overlap = serialized[r.name].get("overlap") or {}
        per_class = {class_display(overlap, k): v for k, v in (overlap.get("per_class_scores") or {}).items()}
        screening = serialized[r.name].get("screening") or {}
        left = ({key: screening[key] for key in ("last_rung", "rows", "partial_score")}
                if screening.get("status") == "screened_out" else None)
        view[r.name] = {"rank": ranks.get(r.name), "score": r.primary_score, "interval": interval,
                        "higher_is_better": r.higher_is_better, "metric": r.primary_metric_name,
                        "per_class": per_class, "screened_out": left}
    return view


def _verdicts(data: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """name -> paired verdict against the best of its view (``best``, ``tied``, ``worse``), and why a view has none."""
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    verdicts: dict[str, str] = {}
    reasons = []
    for view in result.views():
        judged = result.paired_verdicts(view)
        if judged.available:
            verdicts.update({c.candidate: c.verdict for c in judged.against_best})
        else:
            reasons.append(("" if view is None else f"[{view}] ") + str(judged.reason))
    return verdicts, reasons


def verdict_changes(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str]) -> dict[str, Any]:
    """Each shared candidate's paired verdict in both runs (e.g. tied -> worse), and why a run has none.

    ``unavailable`` names the run and the reason (without stability: how to turn it on), so a comparison
    never drops the verdicts silently; ``changed`` lists the candidates whose verdict differs.
    """
    (verdicts_a, reasons_a), (verdicts_b, reasons_b) = _verdicts(a), _verdicts(b)
    rows = [{"extractor": r["name"], "verdict_a": verdicts_a.get(r["name"]), "verdict_b": verdicts_b.get(r["name"])}
            for r in b["extractor_results"] if r["name"] in {x["name"] for x in a["extractor_results"]}]
    for row in rows:
        row["changed"] = row["verdict_a"] is not None and row["verdict_b"] is not None and \
            row["verdict_a"] != row["verdict_b"]
    unavailable = [f"{name}: {reason}" for name, reasons in zip(names, (reasons_a, reasons_b)) for reason in reasons]
    return {"candidates": rows, "changed": [r["extractor"] for r in rows if r["changed"]],
            "unavailable": unavailable}


def _worse_by(a: float, b: float, higher_is_better: bool) -> float:
    """How much worse b is than a in the metric's direction (negative: b is better)."""
    return a - b if higher_is_better else b - a


def compare_results(a: Mapping[str, Any], b: Mapping[str, Any], *, tolerance: float = 0.0,
                    names: tuple[str, str] = ("A", "B"), allow_missing: bool = False) -> dict[str, Any]:
    """The comparison of serialized results ``a`` (baseline) and ``b`` (new run) as plain data.

    ``regressed`` lists the candidates whose score regressed and, unless ``allow_missing``, those of ``a``
    missing from ``b`` (also listed in ``missing``); ``screened_out`` the candidates a run screened out
    (``run``, ``last_rung``, ``rows``, ``partial_score``), which are neither.
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise InputValidationError(f"tolerance must be a number >= 0 (an absolute primary-score drop), got "
                                   f"{tolerance!r}")
    kinds = (a.get("result_type"), b.get("result_type"))
    if kinds[0] != kinds[1]:
        raise InputValidationError(f"{names[0]} is a {kinds[0]!r} result and {names[1]} a {kinds[1]!r} result; "
                                   "compare two results of the same type")
    protocol_a, protocol_b = _protocol(a), _protocol(b)
    _check_comparable(protocol_a, protocol_b, names)
    differences = [f"{key}: {names[0]} {protocol_a[key]!r} vs {names[1]} {protocol_b[key]!r}"
                   for key in protocol_a if protocol_a[key] != protocol_b.get(key)]
    view_a, view_b = _candidates(a), _candidates(b)
    rows, class_regressions = [], []
    for name in [n for n in view_a if n in view_b]:
        old, new = view_a[name], view_b[name]
        row = {"extractor": name, "rank_a": old["rank"], "rank_b": new["rank"], "score_a": old["score"],
               "score_b": new["score"], "delta": None, "interval_a": old["interval"], "interval_b": new["interval"],
               "beyond_intervals": None, "regressed": False}
        if old["score"] is not None and new["score"] is not None:
            row["delta"] = new["score"] - old["score"]
            row["regressed"] = _worse_by(old["score"], new["score"], old["higher_is_better"]) > tolerance + 1e-12
            if old["interval"] and new["interval"]:
                row["beyond_intervals"] = old["interval"][1] < new["interval"][0] or new["interval"][1] < old["interval"][0]
        elif old["score"] is not None and new["screened_out"] is None:
            row["regressed"] = True  # a valid aggregate became invalid (screening it out is no score change)
        rows.append(row)
        for label in [k for k, v in old["per_class"].items() if v is not None and new["per_class"].get(k) is not None]:
            drop = old["per_class"][label] - new["per_class"][label]
            if drop > tolerance + 1e-12:
                class_regressions.append({"extractor": name, "class": label, "score_a": old["per_class"][label],
                                          "score_b": new["per_class"][label], "delta": -drop})
    order_b = {name: i for i, name in enumerate(view_b)}
    rows.sort(key=lambda r: order_b[r["extractor"]])  # B's ranking order
    only_in_a = [n for n in view_a if n not in view_b]
    missing = [] if allow_missing else only_in_a
    top = [next((n for n in view if view[n]["rank"] == 1), None) for view in (view_a, view_b)]
    screened_out = [{"extractor": name, "run": run, **view[name]["screened_out"]}
                    for run, view in zip(names, (view_a, view_b)) for name in view if view[name]["screened_out"]]
    return {
        "result_type": "comparison", "compared_type": kinds[0], "names": list(names), "tolerance": float(tolerance),
        "primary_metric": next(iter(view_a.values()), {}).get("metric"),
        "protocol_match": not differences, "protocol_differences": differences,
        "top_a": top[0], "top_b": top[1], "candidates": rows,
        "only_in_a": only_in_a, "only_in_b": [n for n in view_b if n not in view_a],
        "allow_missing": bool(allow_missing), "missing": missing,
        "screened_out": screened_out, "class_regressions": class_regressions,
        **({"verdicts": verdict_changes(a, b, names)} if kinds[0] == "benchmark" else {}),
        "regressed": [r["extractor"] for r in rows if r["regressed"]] + missing,
    }
