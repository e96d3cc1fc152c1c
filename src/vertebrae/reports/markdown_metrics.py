"""The metrics table of one extractor's report detail (from its serialized result)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .document import Para, Table

#: How many diagnostics a table cell summarizes; the JSON report keeps them all.
SHOWN_DIAGNOSTICS = 6


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _summary(diagnostics: Mapping[str, Any]) -> str:
    """Scalars as ``name=value``, then containers as their size: a glance, not the payload.

    Names are sorted (scalars first) because the JSON report sorts keys: a reloaded
    result must render the same cell.
    """
    names = sorted(diagnostics, key=lambda name: (not _is_scalar(diagnostics[name]), name))
    parts = []
    for name in names[:SHOWN_DIAGNOSTICS]:
        value = diagnostics[name]
        if isinstance(value, float):
            parts.append(f"{name}={value:.4f}")
        elif _is_scalar(value):
            parts.append(f"{name}={value}")
        else:
            parts.append(f"{name}: {len(value) if hasattr(value, '__len__') else type(value).__name__} entries")
    hidden = len(diagnostics) - SHOWN_DIAGNOSTICS
    return "; ".join(parts) + (f"; … (+{hidden} more in the JSON report)" if hidden > 0 else "")


def metrics_detail(r: Mapping[str, Any]) -> list[Any]:
    """Name, score, direction, validity and a diagnostics summary of every metric of a result."""
    rows = []
    for name, m in r["metrics"].items():
        label = f"{name} (primary)" if name == r["primary_metric_name"] else name
        valid = "yes" if m["aggregate_valid"] else ("no: " + m["error"] if m.get("error") else "no")
        direction = "higher is better" if m["higher_is_better"] else "lower is better"
        rows.append([label, m["score"], direction, valid, _summary(m["diagnostics"])])
    return [Para("Metrics:"), Table(["metric", "score", "direction", "valid", "diagnostics"], rows)]
