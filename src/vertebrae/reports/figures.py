"""Report figures: the one matplotlib adapter (imported lazily; the ``plots`` extra).

Every ``*_figure`` function takes a *serialized* result (the decoded JSON document) and
returns a matplotlib Figure (:func:`svg_or_none` makes the SVG the HTML report embeds), or
None when the document lacks the figure's data, so the HTML report shows each figure exactly
when its data exists.  Each figure is sized by its content (names shortened, legends below the
axes and capped, limits inside 0-1 for bounded scores) so its text stays on the canvas at 2 to
100 classes and 1 to 100 candidates (tests/test_figure_layout.py).  Figures are drawn on
a bare :class:`matplotlib.figure.Figure` (Agg canvas; pyplot and the user's global
backend are never touched).  The JSON fields each figure reads are listed in
docs/reports.md.  Every name, label and metric name from the data goes through :func:`_literal`
first: matplotlib reads text between two ``$`` as math (``cost $5 and $6``), and
``$\\frac{$`` would end the report in a mathtext parse error.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._base.extras import install_hint
from .._base.names import printable
from .reading import class_display

#: Candidates shown in the per-class figure and the most classes a heatmap or per-class plot shows.
TOP_CANDIDATES = 3
MAX_CLASSES = 30
#: Candidates drawn in the retrieval cutoff panels (the best-ranked; the table has every one).
TOP_RETRIEVAL = 10
#: The longest name or class label a figure shows whole; a longer one keeps its start and end around an ellipsis.
NAME_LIMIT = 36
#: Entries a legend lists before one "N more" entry (a figure's legend sits below its axes).
LEGEND_ENTRIES = 10
INSTALL_HINT = f"Figures need matplotlib: {install_hint('plots')}."


def available() -> bool:
    """Whether matplotlib can be imported (the HTML report draws figures only then)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _literal(text: Any) -> str:
    """``text`` as matplotlib shows it literally: every ``$`` escaped (``\\$``), so no span of it is mathtext.

    Escaping works for every text matplotlib draws from a string, including tick labels it creates while
    drawing (which a ``parse_math=False`` set on the figure's Text objects beforehand would miss).  A file name's
    undecodable bytes (lone surrogates, which matplotlib's font code refuses) are shown as ``\\xNN``.
    """
    return printable(str(text)).replace("$", r"\$")


def _shortened(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 5
    return text[:head] + "\u2026" + text[len(text) - (limit - 1 - head):]


def _labels(values: Sequence[Any], limit: int = NAME_LIMIT) -> list[str]:
    """Names or class labels as a figure shows them (:func:`_literal`), each at most ``limit`` characters: a longer
    one keeps its start and its end (where a model's layer and pooling are), unless that would make two equal.

    Why: a 70-character model path as a tick label or legend entry leaves no room for the axes at 2 or 3 classes
    and pushes legends past the canvas; the report's tables name every candidate in full.
    """
    texts = [printable(str(v)) for v in values]
    longest = max((len(t) for t in texts), default=0)
    while True:
        shown = [_shortened(t, limit) for t in texts]
        if len(set(shown)) == len(set(texts)) or limit >= longest:
            return [t.replace("$", r"\$") for t in shown]
        limit += 8


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def svg(fig: Any) -> str:
    """The figure as inline SVG with text kept as text and stable ids (same JSON, same SVG)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "vertebrae"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def svg_or_none(fig: Any | None) -> str | None:
    return None if fig is None else svg(fig)


def _ranked(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Serialized results with a valid primary score, best first (as ``ranked_results`` orders them)."""
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    order = {r.name: i for i, r in enumerate(result.ranked_results())}
    chosen = [r for r in data["extractor_results"] if r["name"] in order]
    return sorted(chosen, key=lambda r: order[r["name"]])


def _interval(r: Mapping[str, Any]) -> tuple[float, float] | None:
    stability = r.get("stability")
    if not stability or r.get("primary_metric_name", "overlap") != "overlap":
        return None
    summary = stability["summaries"]["score"]
    return summary["interval_low"], summary["interval_high"]


# ------------------------------------------------------------------ figures
def ranking_figure(data: Mapping[str, Any]) -> Any | None:
    """Primary score per ranked candidate as a dot on an axis zoomed to the data; stability intervals as whiskers."""
    ranked = _ranked(data)
    if not ranked:
        return None
    names = _labels([r["name"] for r in ranked])[::-1]
    scores = [r["primary_score"] for r in ranked][::-1]
    intervals = [_interval(r) for r in ranked][::-1]
    rows = range(len(names))  # positions, not categories: two shortened names could still read alike
    fig = _figure(7, 1.5 + 0.35 * len(names))
    ax = fig.subplots()
    ax.scatter(scores, rows, color="#4C72B0", zorder=3, label="ranked score", clip_on=False)
    for score, y in zip(scores, rows):
        ax.annotate(f"{score:.4f}", (score, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    if any(intervals):  # the interval of the repeat scores; the full-data score may lie outside it
        shown = [(y, i) for y, i in zip(rows, intervals) if i]
        ax.errorbar([(i[0] + i[1]) / 2 for _, i in shown], [y for y, _ in shown],
                    xerr=[(i[1] - i[0]) / 2 for _, i in shown], fmt="none", ecolor="black", capsize=3,
                    label="stability interval")
        fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    values = scores + [v for i in intervals if i for v in i]
    ax.set_xlim(*_limits(values, pad=0.08))  # zoomed, so 0.93 and 0.976 look different
    ax.set_yticks(rows, names, fontsize=8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.grid(axis="x", color="#dddddd", zorder=0)
    metric = ranked[0].get("primary_metric_name") or data.get("protocol", {}).get("config", {}).get("primary_metric")
    ax.set_xlabel(f"{_literal(metric)} (primary score)\naxis zoomed to the data, not from 0", fontsize=9)
    ax.set_title("Ranking")
    return fig


def per_class_figure(data: Mapping[str, Any]) -> Any | None:
    """Per-class (per-label) overlap of the top candidates, one group of bars per class, legend below the axes."""
    ranked = [r for r in _ranked(data) if (r.get("overlap") or {}).get("per_class_scores")][:TOP_CANDIDATES]
    if not ranked:
        return None
    keys = list(ranked[0]["overlap"]["per_class_scores"])[:MAX_CLASSES]
    labels = _labels([class_display(ranked[0]["overlap"], k) for k in keys], limit=NAME_LIMIT - 12)
    fig = _figure(min(11.0, max(6.0, 0.25 * len(keys) * len(ranked))), 4.0)
    ax = fig.subplots()
    width = 0.8 / len(ranked)
    for j, (r, name) in enumerate(zip(ranked, _labels([r["name"] for r in ranked]))):
        scores = r["overlap"]["per_class_scores"]
        ax.bar([i + j * width for i in range(len(keys))], [scores.get(k, math.nan) for k in keys], width,
               label=name)
    short = max(len(str(label)) for label in labels) <= 4
    ax.set_xticks([i + width * (len(ranked) - 1) / 2 for i in range(len(keys))], labels, rotation=0 if short else 45,
                  ha="center" if short else "right", fontsize=9)
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("overlap score (1 = separated)")
    ax.set_title(f"Per-class overlap of the top {len(ranked)} candidate(s)"
                 + _first_classes(len(keys), len(ranked[0]["overlap"]["per_class_scores"])))
    _legend(fig, ax)
    return fig


def pairwise_figure(data: Mapping[str, Any]) -> Any | None:
    """Pairwise overlap of the best candidate; the colour scale spans this matrix's values, blank where unevaluable."""
    ranked = [r for r in _ranked(data) if (r.get("overlap") or {}).get("pairwise_scores")]
    if not ranked:
        return None
    overlap = ranked[0]["overlap"]
    keys = list(overlap["pairwise_scores"])[:MAX_CLASSES]
    labels = _labels([class_display(overlap, k) for k in keys], limit=NAME_LIMIT - 12)
    matrix = [[_number(overlap["pairwise_scores"][a].get(b)) for b in keys] for a in keys]
    finite = [v for row in matrix for v in row if not math.isnan(v)]
    low, high = _limits(finite)
    width = max(5.5, 1.8 + 0.42 * len(keys))  # room for the title and the colour bar at 2 or 3 classes
    fig = _figure(width, max(4.0, 1.2 + 0.38 * len(keys)))
    ax = fig.subplots()
    image = ax.imshow(matrix, vmin=low, vmax=high, cmap="viridis")
    ax.set_xticks(range(len(keys)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(keys)), labels, fontsize=8)
    ax.set_xlabel("colour scale fitted to this matrix", fontsize=8)
    fig.colorbar(image, ax=ax, label="pairwise overlap (1 = separated)")
    ax.set_title(textwrap.fill(f"Pairwise overlap: {_literal(ranked[0]['name'])}", width=int(width * 9))
                 + _first_classes(len(keys), len(overlap["pairwise_scores"])))
    return fig


def compression_frontier_figure(data: Mapping[str, Any]) -> Any | None:
    """Primary score against evaluated bytes per row, one series per source embedding, frontier variants ringed.

    Drawn from :func:`vertebrae.extractors.compression.frontier_rows` (the Markdown frontier table's rows), so the two agree.
    Variants on the frontier are labelled first, then the others, each where its label fits.
    """
    from ..extractors.compression import frontier_rows

    rows = frontier_rows(data["extractor_results"])
    if not rows:
        return None
    fig = _figure(6.5, 4.0)
    ax = fig.subplots()
    sources = list(dict.fromkeys(row["source"] for row in rows))
    for source, label in zip(sources, _labels(sources)):
        series = sorted((r for r in rows if r["source"] == source), key=lambda r: r["evaluated_bytes_per_row"])
        ax.plot([r["evaluated_bytes_per_row"] for r in series], [r["primary_score"] for r in series], marker="o",
                label=label)
    on_frontier = [r for r in rows if r["frontier"]]
    ax.scatter([r["evaluated_bytes_per_row"] for r in on_frontier], [r["primary_score"] for r in on_frontier],
               s=120, facecolors="none", edgecolors="#C44E52")
    ax.set_xscale("log")
    ax.set_xlabel("evaluated bytes per row (log scale)\nringed: on the quality/size frontier", fontsize=9)
    ax.set_ylabel(f"{_literal(rows[0]['primary_metric'])} (primary score)")
    ax.set_title("Compression frontier")
    _legend(fig, ax)
    labelled = sorted(rows, key=lambda r: not r["frontier"])
    _annotate(fig, ax, [(r["evaluated_bytes_per_row"], r["primary_score"], r["variant"]) for r in labelled])
    return fig


def cohort_resources_figure(data: Mapping[str, Any]) -> Any | None:
    """Quality-cohort members' primary score against warm latency (else embedding bytes) from ``resource_profile``;
    the best-ranked members are labelled first, each where its label fits."""
    from ..families.result_protocol import result_from_dict

    cohort = {r.name for r in result_from_dict(data).quality_cohort()}
    members = [r for r in _ranked(data) if r["name"] in cohort and r.get("resource_profile")]
    points, label = _resource_points(members, "latency", "warm_median_seconds", "warm median latency (s)")
    if not points:
        points, label = _resource_points(members, "embedding_bytes", "evaluated_logical_bytes",
                                         "evaluated embedding bytes")
    if not points:
        return None
    fig = _figure(6.5, 4.0)
    ax = fig.subplots()
    ax.scatter([p[0] for p in points], [p[1] for p in points], color="#55A868")
    ax.set_xlabel(label)
    ax.set_ylabel(f"{_literal(members[0]['primary_metric_name'])} (primary score)")
    ax.set_title("Quality cohort: score against resources")
    _annotate(fig, ax, points)
    return fig


def monitor_trend_figure(data: Mapping[str, Any]) -> Any | None:
    """Primary score per extractor over a monitor's snapshots (``rows`` with ``evaluation_index``)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for row in data.get("rows", []):
        if row.get("status") == "ok" and row.get("primary_score") is not None:
            series.setdefault(row["extractor"], []).append((row["evaluation_index"], row["primary_score"]))
    if not series:
        return None
    fig = _figure(7, 3.8)
    ax = fig.subplots()
    for (name, values), label in zip(series.items(), _labels(list(series))):
        values.sort()
        ax.plot([v[0] for v in values], [v[1] for v in values], marker="o", label=label)
    failed = sorted({row["evaluation_index"] for row in data["rows"] if row.get("status") == "failed"})
    for index in failed:
        ax.axvline(index, color="#C44E52", linestyle=":", linewidth=1)
    ax.xaxis.get_major_locator().set_params(integer=True)  # snapshots are counted: no tick at 0.5
    ax.set_xlabel("snapshot (evaluation_index)" + ("; dotted: failed snapshot" if failed else ""))
    ax.set_ylabel("primary score")
    ax.set_title("Monitor trend")
    _legend(fig, ax)
    return fig


def screening_rungs_figure(data: Mapping[str, Any]) -> Any | None:
    """Each candidate's partial score at every screening rung it was scored on (finalists solid, the others faint)."""
    screened = [r for r in data["extractor_results"] if (r.get("screening") or {}).get("rungs")]
    if not screened:
        return None
    fig = _figure(7, 3.8)
    ax = fig.subplots()
    for r, name in zip(screened, _labels([r["name"] for r in screened])):
        rungs = r["screening"]["rungs"]
        finalist = r["screening"]["status"] == "finalist"
        ax.plot([e["rows"] for e in rungs], [e["partial_score"] for e in rungs], marker="o" if finalist else ".",
                alpha=1.0 if finalist else 0.35, linestyle="-" if finalist else "--",
                label=name if finalist else None)
    ax.set_xscale("log")
    ax.set_xlabel("rows in the rung (log scale)")
    ax.set_ylabel("partial score\n(mean of the rung's repeats)")
    ax.set_title("Screening: scores across rungs (dashed: screened out)")
    _legend(fig, ax)
    return fig


def retrieval_cutoffs_figure(data: Mapping[str, Any]) -> Any | None:
    """Each cutoff metric at every k, one panel per metric, forward direction (and reverse, dashed, in the same
    colour, when run), for the best-ranked candidates (:data:`TOP_RETRIEVAL`; the title says when there are more)."""
    from ..families.retrieval.config import CUTOFF_METRICS

    cutoffs = data.get("protocol", {}).get("config", {}).get("cutoffs")
    if not cutoffs:
        return None
    ranked = _ranked(data)
    shown = ranked[:TOP_RETRIEVAL]
    fig = _figure(3.0 * 3, 2.6 * 2)
    axes = fig.subplots(2, 3, sharex=True).ravel()
    for ax, metric in zip(axes, CUTOFF_METRICS):
        for entry, name in zip(shown, _labels([e["name"] for e in shown])):
            colour = None  # one colour per candidate: the legend lists candidates, the line style the direction
            for direction, style in (("forward", "-"), ("reverse", "--")):
                if entry.get(direction):
                    values = [entry[direction]["metrics"][f"{metric}@{k}"] for k in cutoffs]
                    line, = ax.plot(cutoffs, values, style, marker="o", color=colour,
                                    label=name if colour is None else None)
                    colour = line.get_color()
        ax.set_title(f"{metric}@k", fontsize=9)
        ax.set_ylim(0, 1.05)
    notes = ["dashed: reverse direction"] if any(e.get("reverse") for e in shown) else []
    if len(ranked) > len(shown):
        notes.insert(0, f"the {len(shown)} best-ranked of {len(ranked)} candidates (the table has every one)")
    if notes:
        title = "; ".join(notes)
        fig.suptitle(title[0].upper() + title[1:], fontsize=9)
    for ax in axes[3:]:  # not a supxlabel: an outside legend below would cover it
        ax.set_xlabel("cutoff k", fontsize=9)
    _legend(fig, axes[0])
    return fig


#: (title, figure function) in page order; each is drawn only when its data exists (the function returns None).
Drawing = Callable[[Mapping[str, Any]], Any]
BENCHMARK_FIGURES: Sequence[tuple[str, Drawing]] = (
    ("Ranking", ranking_figure), ("Per-class scores", per_class_figure), ("Pairwise overlap", pairwise_figure),
    ("Compression frontier", compression_frontier_figure), ("Quality cohort resources", cohort_resources_figure),
    ("Screening", screening_rungs_figure))
ZERO_SHOT_FIGURES: Sequence[tuple[str, Drawing]] = (("Ranking", ranking_figure),)
RETRIEVAL_FIGURES: Sequence[tuple[str, Drawing]] = (
    ("Ranking", ranking_figure), ("Metrics at each cutoff", retrieval_cutoffs_figure))
MONITOR_FIGURES: Sequence[tuple[str, Drawing]] = (("Trend", monitor_trend_figure),)


# ------------------------------------------------------------------ helpers
def _first_classes(shown: int, total: int) -> str:
    """The title's second line when a figure shows only the first :data:`MAX_CLASSES` classes."""
    return f"\nthe first {shown} of {total} classes (the tables have every one)" if total > shown else ""


def _limits(values: Sequence[float], pad: float = 0.0) -> tuple[float, float]:
    """The values' range with ``pad`` of it added on each side, at least 0.01 wide (one score's ticks stay
    readable), and inside 0-1 when every value is (every overlap, accuracy and retrieval score): an all-1.0 matrix
    gets a 0.99-1 colour bar, never one reaching 1.004, a value a 0-1 score cannot take."""
    bounded = bool(values) and 0.0 <= min(values) and max(values) <= 1.0
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 0.01:
        middle = (low + high) / 2
        middle = min(max(middle, 0.005), 0.995) if bounded else middle
        low, high = middle - 0.005, middle + 0.005
    margin = (high - low) * pad
    low, high = low - margin, high + margin
    return (max(low, 0.0), min(high, 1.0)) if bounded else (low, high)


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _legend(fig: Any, ax: Any) -> None:
    """The axes' labelled series in a legend below the figure's axes, in as many columns as the figure's width
    holds, at most :data:`LEGEND_ENTRIES` entries and then one "N more" entry; the figure grows by its height.

    Why below and capped: a legend inside the axes covers the data, and 100 monitored extractors or 200 retrieval
    series listed in one column run off the canvas.
    """
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if len(handles) > LEGEND_ENTRIES + 1:
        from matplotlib.lines import Line2D

        more = len(handles) - LEGEND_ENTRIES
        handles = [*handles[:LEGEND_ENTRIES], Line2D([], [], linestyle="none")]
        labels = [*labels[:LEGEND_ENTRIES], f"and {more} more (in the tables)"]
    width, height = fig.get_size_inches()
    per_column = 0.75 + 0.075 * max(len(label) for label in labels)  # inches: handle, gap, 8-point text
    columns = max(1, min(len(labels), int(width // per_column)))
    rows = -(-len(labels) // columns)
    fig.set_size_inches(width, height + 0.2 * rows)
    fig.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize=8)


#: Where a point's label may go, tried in order: (x, y) offset in points and its alignment.
_LABEL_PLACES = (((4, 4), "left", "bottom"), ((-4, 4), "right", "bottom"), ((4, -4), "left", "top"),
                 ((-4, -4), "right", "top"))


def _annotate(fig: Any, ax: Any, points: Sequence[tuple[float, float, str]]) -> None:
    """Label the points in order, each at the first place where its label lies inside the axes and clear of every
    label placed before it; a point with no such place stays unlabelled (the report's tables name every point).

    Runs last: it lays the figure out first and keeps the labels out of the layout, so the label boxes it measures
    are where the SVG draws them.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    inside, placed = ax.get_window_extent(renderer), []
    for (x, y, name), text in zip(points, _labels([p[2] for p in points])):
        for offset, ha, va in _LABEL_PLACES:
            label = ax.annotate(text, (x, y), textcoords="offset points", xytext=offset, ha=ha, va=va, fontsize=7)
            label.set_in_layout(False)
            box = label.get_window_extent(renderer).padded(1)
            if (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
                    and not any(box.overlaps(other) for other in placed)):
                placed.append(box)
                break
            label.remove()


def _resource_points(members: Sequence[Mapping[str, Any]], section: str, field: str,
                     label: str) -> tuple[list[tuple[float, float, str]], str]:
    points = [(r["resource_profile"][section][field], r["primary_score"], r["name"]) for r in members
              if isinstance(r["resource_profile"].get(section), Mapping)
              and r["resource_profile"][section].get(field) is not None]
    return points, label
