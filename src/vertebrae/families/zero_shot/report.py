"""Markdown report of a serialized ZeroShotBenchmarkResult (a plain dict, never live objects).

Every table goes through :mod:`vertebrae.reports.markdown_table`, so class names and
prompts with pipes or line breaks cannot break the layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...extractors.compression import not_applied_names
from ...reports.markdown_resources import endpoint_resource_section
from ...reports.markdown_table import table, text
from ..result_protocol import result_from_dict
from .metrics import REPORTED_MARGINS

#: Confusion matrices are shown up to this many classes (larger ones stay in the JSON).
MAX_CONFUSION_CLASSES = 12


def render_markdown(data: Mapping[str, Any]) -> str:
    """Title, ranking, per-class scores, confusion matrices, margins, compression variants (when there are any),
    prompts, protocol, encoders, warnings, the quality cohort's samples/prompts resources (when profiled)."""
    result = result_from_dict(data)
    protocol = data["protocol"]
    labels = {p["label_key"]: p["display"] for p in protocol["prompts"]}
    valid = [r for r in data["extractor_results"] if r.get("error") is None]
    sections = [f"# vertebrae zero-shot report: {text(protocol['identity']['dataset_id'])}\n", _ranking(result),
                _per_class(valid, labels), _confusion(valid, labels), _margins(valid), _compression(data["extractor_results"]), _prompts(protocol),
                _protocol(protocol), _encoders(data), _warnings(data),
                endpoint_resource_section(result, ("samples", "prompts"))]
    return "\n".join(section for section in sections if section)


def _ranking(result: Any) -> str:
    metric = result.primary_metric_name
    top_k = [f"top{k}_accuracy" for k in result.protocol["config"]["top_k"] if k > 1]
    columns = ["rank", "extractor", "primary_score", "top1_accuracy", "macro_f1", "balanced_accuracy", *top_k,
               "margin_mean", "overlap_score", "embedding_dim"]
    rows = [[row.get(c) for c in columns] for row in result.rows(include_invalid=True)]
    return (f"## Ranking\n\nRanked by **{text(metric)}** (higher is better). `overlap_score` is the OverlapIndex "
            "of the sample embeddings, shown as context: it describes how well the classes separate in the sample "
            "space and is never combined with the zero-shot score.\n\n" + table(columns, rows))


def _per_class(results: list[Mapping[str, Any]], labels: Mapping[str, str]) -> str:
    rows = [[r["name"], labels[key], values["support"], values["predicted"], values["precision"], values["recall"],
             values["f1"]] for r in results for key, values in r["per_class"].items()]
    return "## Per-class scores\n\n" + table(["extractor", "class", "support", "predicted", "precision", "recall",
                                              "f1"], rows)


def _confusion(results: list[Mapping[str, Any]], labels: Mapping[str, str]) -> str:
    names = list(labels.values())
    if len(names) > MAX_CONFUSION_CLASSES:
        return (f"## Confusion matrices\n\n{len(names)} classes: the matrices are in the JSON "
                f"(`confusion_matrix`), shown here up to {MAX_CONFUSION_CLASSES} classes.\n")
    parts = ["## Confusion matrices\n\nRows: true class; columns: predicted class.\n"]
    for r in results:
        rows = [[name, *counts] for name, counts in zip(names, r["confusion_matrix"])]
        parts.append(f"### {text(r['name'])}\n\n" + table(["true \\ predicted", *names], rows))
    return "\n".join(parts)


def _margins(results: list[Mapping[str, Any]]) -> str:
    rows = [[r["name"], *(r["margins"][f] for f in REPORTED_MARGINS)] for r in results]
    return ("## Margins\n\nTop-1 minus top-2 similarity per sample, in the configured similarity's units.\n\n"
            + table(["extractor", *REPORTED_MARGINS], rows))


def _compression(results: list[Mapping[str, Any]]) -> str:
    """Each variant's dimensions and bytes per sample row; empty without compression variants."""
    variants = [r for r in results if r.get("compression")]
    if not variants:
        return ""
    columns = ["extractor", "source", "variant", "method", "requested dim", "output dim", "applied",
               "explained variance", "raw B/row", "evaluated B/row", "primary_score"]
    rows = []
    for r in variants:
        c = r["compression"]
        samples = c["footprint"]["samples"]
        rows.append([r["name"], c["source"], c["variant"], c["method"], c["requested_dim"], c["output_dim"],
                     c["applied"], c["explained_variance_ratio"], samples["raw_bytes_per_row"],
                     samples["evaluated_bytes_per_row"], r.get("primary_score")])
    skipped = not_applied_names(variants)
    note = ("\nNot applied (scored uncompressed, the name keeps the requested variant): "
            + "; ".join(text(name) for name in skipped) + "\n") if skipped else ""
    return ("## Compression variants\n\nEach variant was fitted on the encoder's sample embeddings and the same "
            "fitted transform was applied to its prompt embeddings, before prototypes and scoring. Bytes are per "
            "sample row.\n\n" + table(columns, rows) + note)


def _prompts(protocol: Mapping[str, Any]) -> str:
    rows = [[p["display"], i + 1, prompt] for p in protocol["prompts"] for i, prompt in enumerate(p["prompts"])]
    templates = protocol["dataset"]["templates"]
    head = "Rendered from the templates " + ", ".join(f"`{text(t)}`" for t in templates) + ".\n\n" \
        if templates else "Prompts declared per class.\n\n"
    return "## Prompts\n\n" + head + table(["class", "#", "prompt"], rows)


def _protocol(protocol: Mapping[str, Any]) -> str:
    config, identity, dataset = protocol["config"], protocol["identity"], protocol["dataset"]
    plan = protocol["block_plan"]
    rows = [
        ["identity", f"{identity['kind']}: {identity['dataset_id']}"
         + (f" @ {identity['revision']}" if identity.get("revision") else "")],
        ["samples", dataset["n_samples"]],
        ["classes", dataset["n_classes"]],
        ["prompts", dataset["n_prompts"]],
        ["prompts fingerprint", protocol["prompts_fingerprint"]],
        ["metric", config["metric"]],
        ["similarity", config["similarity"]],
        ["prompt ensemble", protocol["ensemble"]],
        ["top-k", ", ".join(str(k) for k in config["top_k"])],
        ["tie rule", protocol["tie_rule"]],
        ["dense budget (bytes)", config["max_dense_bytes"]],
        ["rows per block / blocks", f"{plan['rows_per_block']} / {plan['n_blocks']}"],
        ["ranking", protocol["ranking"]],
    ]
    return "## Protocol\n\n" + table(["field", "value"], rows)


def _encoders(data: Mapping[str, Any]) -> str:
    rows = []
    for r in data["extractor_results"]:
        branches = [r["embedding"].get(b) for b in ("samples", "prompts")]
        cells = [f"{m['embedding_dim']} {m['dtype']}{' sparse' if m['sparse'] else ''} ({m['modality']})"
                 if m else None for m in branches]
        rows.append([r["name"], *cells, json.dumps(r["recipe"], sort_keys=True)])
    return "## Encoders\n\n" + table(["extractor", "sample embedding", "prompt embedding", "recipe"], rows)


def _warnings(data: Mapping[str, Any]) -> str:
    notes = list(data["warnings"]) + [f"{r['name']}: {w}" for r in data["extractor_results"] for w in r["warnings"]]
    return "## Warnings\n\n" + ("".join(f"- {text(n)}\n" for n in notes) if notes else "None.\n")
