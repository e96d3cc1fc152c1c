"""Every figure the HTML report can draw keeps its text on its canvas, unoverlapped, at every size a run can reach.

Issue 37.16: with 3 classes the pairwise heatmap cut its title and tick labels at the left edge and its two-line
colour-bar label overlapped itself. Each figure kind is drawn here at the sizes that matter to it (2, 3, 10 and 100
classes; 1, 5 and 100 candidates, variants, snapshots or rungs; long names) from documents that real runs wrote
(small runs below), grown to those sizes and loaded back through the result schemas. Two checks read the drawn
figures: matplotlib's tight bounding box against the canvas, and headless Chromium's layout of the inline SVGs
(no text outside its figure, no two texts overlapping).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, EmbeddingCompressionConfig, OverlapScoringConfig,
                       RepresentationMonitor, ResourceProfilingConfig, ScreeningConfig, SeparatixConfig,
                       StabilityConfig, TextEncoder, ZeroShotBenchmark)
from vertebrae.errors import DataWarning
from vertebrae.extractors import PrecomputedExtractor
from vertebrae._base.profile_records import latency_summary
from vertebrae.families.result_protocol import result_from_dict
from vertebrae.reports import figures, html

from .chromium import chromium_shows, needs_chromium
from .conftest import gaussian_classes
from .test_reports import retrieval_document as retrieval_run
from .test_zero_shot_benchmark import WordCounter, text_dataset

IDENTITY = DatasetIdentity.declared("figure-layout", "1")
QUIET = {"separatix_config": SeparatixConfig(enabled=False), "scoring_config": OverlapScoringConfig(k=3),
         "progress": False}


def name(i: int) -> str:
    """Candidate names as runs write them: short ones and long model paths with a layer and pooling."""
    return f"c{i}" if i % 2 else f"sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2:layer{i}_mean"


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    """One small real run per figure's data, serialized: what the documents below are grown from."""
    X, y = gaussian_classes(n_per_class=40, n_classes=4, dim=6, seed=4)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    noisy = X + np.random.default_rng(0).normal(0, 4, X.shape)
    found = {"classes": Benchmark(dataset, [PrecomputedExtractor("clean", X)], stability_config=StabilityConfig(repeats=3),
                                  **QUIET).run().serialized()}
    found["compression"] = Benchmark(dataset, [PrecomputedExtractor("raw", X)], **QUIET, compression=[
        EmbeddingCompressionConfig(method="none"), EmbeddingCompressionConfig(method="pca", n_components=2)]
    ).run().serialized()
    found["resources"] = Benchmark(dataset, [PrecomputedExtractor("raw", X)], resource_profiling=ResourceProfilingConfig(),
                                   **QUIET).run().serialized()
    found["screening"] = Benchmark(dataset, [PrecomputedExtractor("clean", X), PrecomputedExtractor("noisy", noisy)],
                                   screening=ScreeningConfig(eta=2, seed=1, repeats=5), **QUIET).run().serialized()
    monitor = RepresentationMonitor(dataset, reporters=[], error_policy="continue",
                                    **{k: v for k, v in QUIET.items() if k != "progress"})
    monitor.evaluate(PrecomputedExtractor("snap", X))
    monitor.evaluate(_broken)
    found["monitor"] = {"result_type": "monitor", "rows": monitor.history}
    found["retrieval"] = retrieval_run()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, DeprecationWarning))
        found["zero_shot"] = ZeroShotBenchmark(text_dataset(), [TextEncoder("words", WordCounter())],
                                               scoring_config=OverlapScoringConfig(k=2), progress=False).run().serialized()
    return found


def _broken(X: Any) -> Any:
    raise RuntimeError("checkpoint is corrupt")


# ----------------------------------------------------------------------------- documents at every size
def rescored(r: dict, new_name: str, score: float) -> dict:
    """A copy of a serialized benchmark result under another name, its primary score (and the metric and overlap
    score it is read from) set to ``score``."""
    r = copy.deepcopy(r)
    r["name"], r["primary_score"] = new_name, score
    if "metrics" in r:
        r["metrics"][r["primary_metric_name"]]["score"] = score
    else:  # a zero-shot result
        r["scores"][r["primary_metric_name"]] = score
    if r["primary_metric_name"] == "overlap":
        r["overlap"]["score"] = score
    return r


def loaded(data: dict, results: list[dict]) -> dict:
    """``data`` holding ``results`` (each timed as the run's first one was), checked by the result schemas as a saved
    file is."""
    data = copy.deepcopy(data)
    data["extractor_results"] = results
    if "ranking_stability" in data:
        data["ranking_stability"] = None
    stage_seconds = next(iter(data["timing"]["runtime"].values()))
    data["timing"]["runtime"] = {r["name"]: stage_seconds for r in results}
    result_from_dict(data)
    return data


def classes_document(runs: dict, n_classes: int, n_candidates: int, flat: bool = False) -> dict:
    """``n_candidates`` candidates over ``n_classes`` classes (long and short labels); ``flat``: every score 1.0."""
    data = runs["classes"]
    keys = [f"str:c{j}" for j in range(n_classes)]
    results = []
    for i in range(n_candidates):
        score = 0.95 - 0.003 * i
        r = rescored(data["extractor_results"][0], name(i), score)
        overlap = r["overlap"]
        overlap["labels"] = {key: f"class {j}" if j % 3 else f"a long class label {j}" for j, key in enumerate(keys)}
        overlap["per_class_scores"] = {key: 1.0 if flat else 0.5 + 0.5 * (j * 7 % n_classes) / n_classes
                                       for j, key in enumerate(keys)}
        overlap["pairwise_scores"] = {a: {b: 1.0 if flat else 0.6 + 0.4 * ((ia + ib) % n_classes) / n_classes
                                          for ib, b in enumerate(keys) if b != a} for ia, a in enumerate(keys)}
        overlap["class_counts"] = dict.fromkeys(keys, 20)
        overlap["k_per_class"] = dict.fromkeys(keys, 3)
        summary = r["stability"]["summaries"]["score"]
        summary["interval_low"], summary["interval_high"] = score - 0.01, score + 0.01
        results.append(r)
    return loaded(data, results)


def frontier_document(runs: dict, n_sources: int, n_variants: int) -> dict:
    """``n_sources`` embeddings, each with ``n_variants`` PCA variants of growing size (the real run's ``pca2``)."""
    data = runs["compression"]
    template = next(r for r in data["extractor_results"] if r["compression"]["method"] == "pca")
    results = []
    for s in range(n_sources):
        for v in range(n_variants):
            dim = 2 * (v + 1)
            r = rescored(template, f"{name(s)}+pca{dim}", 0.5 + 0.08 * v - 0.001 * s)
            compression = r["compression"]
            compression.update(source=name(s), variant=f"pca{dim}", requested_dim=dim, output_dim=dim)
            compression["parameters"]["n_components"] = dim
            footprint = compression["footprint"]
            footprint["evaluated_bytes_per_row"] = 8.0 * dim
            footprint["evaluated_bytes"] = 8 * dim * footprint["n_rows"]
            results.append(r)
    return loaded(data, results)


def cohort_document(runs: dict, n_members: int, latency: bool = True) -> dict:
    """``n_members`` profiled candidates in the quality cohort; x is warm latency (``latency``) or embedding bytes."""
    data = copy.deepcopy(runs["resources"])
    data["metadata"]["quality_tolerance"] = 1.0
    results = []
    for i in range(n_members):
        r = rescored(data["extractor_results"][0], name(i), 0.9 - 0.002 * i)
        profile = r["resource_profile"]
        if latency:  # a batched extractor's calls, summarized by the profiler's own function
            calls = [0.001 * (i + 1) * (1 + 0.1 * j) for j in range(4)]
            profile["latency"] = latency_summary((0.01, 40), calls, len(calls) + 1, "host_observed")
        profile["embedding_bytes"]["evaluated_logical_bytes"] = 1000 * (i + 1)
        results.append(r)
    return loaded(data, results)


def screening_document(runs: dict, n_candidates: int, n_rungs: int) -> dict:
    """``n_candidates`` screened over ``n_rungs`` rungs (rows doubling): the first two finalists, the others cut at
    a rung of their own."""
    data = copy.deepcopy(runs["screening"])
    finalist = next(r for r in data["extractor_results"] if r["screening"]["status"] == "finalist")
    cut = next(r for r in data["extractor_results"] if r["screening"]["status"] == "screened_out")
    results = []
    for i in range(n_candidates):
        kept, score = i < 2, 0.9 - 0.7 * i / n_candidates
        r = rescored(finalist, name(i), score) if kept else copy.deepcopy(cut) | {"name": name(i)}
        last = n_rungs - 1 if kept else i % n_rungs
        template = r["screening"]["rungs"][0]
        r["screening"]["rungs"] = [template | {"rung": j, "rows": 30 * 2 ** j, "partial_score": score - 0.02 * j,
                                               "continued": kept or j < last} for j in range(last + 1)]
        if not kept:
            r["screening"].update(last_rung=last, rows=30 * 2 ** last, partial_score=score - 0.02 * last)
        results.append(r)
    data["metadata"]["screening"].update(candidates=n_candidates, finalists=[name(i) for i in range(min(2, n_candidates))])
    return loaded(data, results)


def monitor_document(runs: dict, n_extractors: int, n_snapshots: int) -> dict:
    """A monitor history of ``n_snapshots`` snapshots of ``n_extractors`` extractors; the last snapshot failed."""
    ok, failed = runs["monitor"]["rows"]
    rows = [ok | {"evaluation_index": t, "extractor": name(i), "primary_score": 0.8 + 0.1 * np.sin(t + i)}
            for t in range(n_snapshots) for i in range(n_extractors)]
    rows.append(failed | {"evaluation_index": n_snapshots})
    return {"result_type": "monitor", "rows": rows}


def retrieval_document(runs: dict, n_candidates: int) -> dict:
    """``n_candidates`` retrieval candidates, both directions; each metric a little lower than the last one's."""
    data = runs["retrieval"]
    primary = data["protocol"]["config"]["primary_metric"]
    results = []
    for i in range(n_candidates):
        r = copy.deepcopy(data["extractor_results"][0]) | {"name": name(i)}
        for direction in ("forward", "reverse"):
            r[direction]["metrics"] = {k: v * (1 - 0.004 * i) for k, v in r[direction]["metrics"].items()}
        # As the result is assembled (and checked on load): the mean of its directions' primary metric.
        r["primary_score"] = float(np.mean([r[d]["metrics"][primary] for d in ("forward", "reverse") if r[d]]))
        results.append(r)
    return loaded(data, results)


def zero_shot_document(runs: dict, n_candidates: int) -> dict:
    data = runs["zero_shot"]
    return loaded(data, [rescored(data["extractor_results"][0], name(i), 1.0 - 0.004 * i) for i in range(n_candidates)])


#: (case id, figure function, document builder, its sizes): every figure the HTML report draws, at the sizes it
#: depends on. The per-class bars and the heatmap at 2, 3, 10 and 100 classes with 1, 5 and 100 candidates; the
#: ranking reads no class, so it is drawn at 3 classes only.
CASES: list[tuple[str, Callable[[Any], Any], Callable[..., dict], tuple]] = [
    *[(f"ranking_figure-{n}candidates", figures.ranking_figure, classes_document, (3, n)) for n in (1, 5, 100)],
    *[(f"{draw.__name__}-{k}classes-{n}candidates", draw, classes_document, (k, n)) for k in (2, 3, 10, 100)
      for n in (1, 5, 100) for draw in (figures.per_class_figure, figures.pairwise_figure)],
    ("pairwise_figure-3classes-flat", figures.pairwise_figure, classes_document, (3, 1, True)),
    *[(f"compression_frontier-{s}sources-{v}variants", figures.compression_frontier_figure, frontier_document, (s, v))
      for s, v in ((1, 1), (1, 5), (5, 1), (20, 5), (100, 1))],
    *[(f"cohort_resources-{n}members-{axis}", figures.cohort_resources_figure, cohort_document, (n, axis == "latency"))
      for n in (1, 5, 100) for axis in ("latency", "bytes")],
    *[(f"screening_rungs-{n}candidates-{r}rungs", figures.screening_rungs_figure, screening_document, (n, r))
      for n in (1, 5, 100) for r in (1, 5)],
    *[(f"monitor_trend-{e}extractors-{t}snapshots", figures.monitor_trend_figure, monitor_document, (e, t))
      for e, t in ((1, 1), (1, 5), (5, 5), (1, 100), (100, 5))],
    *[(f"{draw.__name__}-retrieval-{n}candidates", draw, retrieval_document, (n,)) for n in (1, 5, 100)
      for draw in (figures.ranking_figure, figures.retrieval_cutoffs_figure)],
    *[(f"ranking_figure-zero_shot-{n}candidates", figures.ranking_figure, zero_shot_document, (n,)) for n in (1, 5)],
]


def test_the_sweep_covers_every_figure_the_html_report_draws():
    """A figure kind added to a report without a case here fails this test."""
    drawn = {draw for kinds in (figures.BENCHMARK_FIGURES, figures.RETRIEVAL_FIGURES, figures.ZERO_SHOT_FIGURES,
                                figures.MONITOR_FIGURES) for _, draw in kinds}
    assert drawn == {draw for _, draw, _, _ in CASES}


@pytest.fixture(scope="module")
def drawn(runs) -> dict[str, tuple[Any, Any, Any]]:
    """Per case: the tight bounding box of everything drawn, the canvas's box (inches) and the figure. Drawn once
    for both checks below: at 100 candidates a figure takes seconds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    found, documents = {}, {}
    for case, draw, build, sizes in CASES:
        if (build, sizes) not in documents:
            documents[build, sizes] = build(runs, *sizes)
        fig = draw(documents[build, sizes])
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        found[case] = fig.get_tightbbox(canvas.get_renderer()), fig.bbox_inches, fig
    return found


@pytest.mark.parametrize("case", [case[0] for case in CASES])
def test_every_figure_keeps_its_text_on_the_canvas(drawn, case):
    """The tight bounding box of everything drawn lies within the figure's canvas."""
    tight, canvas, _ = drawn[case]
    assert (tight.x0 >= -0.02 and tight.y0 >= -0.02 and tight.x1 <= canvas.x1 + 0.02
            and tight.y1 <= canvas.y1 + 0.02), (tight.extents, canvas.extents)


#: Per inline SVG figure: its laid-out width, the texts whose laid-out box leaves the figure's box, and the pairs of
#: texts that overlap (each text's box is its own rotated rectangle, so neighbouring 45-degree tick labels are not
#: counted as touching).
FIGURE_PROBE = """<script>
const corners = t => { const b = t.getBBox(), m = t.getScreenCTM();
  return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
    .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]); };
const separated = (p, q) => [p, q].some(poly => poly.some((a, i) => {
  const b = poly[(i + 1) % 4], n = [a[1] - b[1], b[0] - a[0]], len = Math.hypot(n[0], n[1]);
  if (len === 0) return false;
  const proj = pts => pts.map(c => (c[0] * n[0] + c[1] * n[1]) / len);
  const [pp, qq] = [proj(p), proj(q)];
  return Math.max(...pp) <= Math.min(...qq) + 1 || Math.max(...qq) <= Math.min(...pp) + 1;
}));
const found = [...document.querySelectorAll("figure svg")].map(svg => {
  const b = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll("text")].filter(t => t.textContent.trim() && t.getBBox().width > 0);
  const outside = texts.filter(t => { const r = t.getBoundingClientRect();
    return r.left < b.left - 1 || r.right > b.right + 1 || r.top < b.top - 1 || r.bottom > b.bottom + 1;
  }).map(t => t.textContent);
  const boxes = texts.map(corners), overlapping = [];
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++)
    if (!separated(boxes[i], boxes[j])) overlapping.push([texts[i].textContent, texts[j].textContent]);
  return {texts: texts.length, width: Math.round(b.width), outside, overlapping};
});
const out = document.createElement("pre"); out.id = "probe"; out.textContent = JSON.stringify(found);
document.body.appendChild(out);
</script>"""


@needs_chromium
def test_chromium_shows_every_figure_unclipped_and_unoverlapped(drawn, tmp_path):
    """Every case above laid out by Chromium at 1280 px on one page (so Chromium starts once): no text outside its
    figure, no two texts of a figure overlapping, and every figure at least 500 px wide (the 3-class heatmap was
    about 150 px)."""
    page = tmp_path / "figures.html"  # in the report's own page, with its style
    page.write_text(html.page("figures", [f"<figure>{figures.svg(fig)}</figure>" for _, _, fig in drawn.values()]),
                    encoding="utf-8")
    found = chromium_shows(page, tmp_path, FIGURE_PROBE, width=1280)
    assert len(found) == len(drawn) and min(shown["texts"] for shown in found) >= 5  # the probe saw every figure
    defects = {case: {k: (len(shown[k]), shown[k][:2]) for k in ("outside", "overlapping") if shown[k]}
               for case, shown in zip(drawn, found)}
    assert {case: shown for case, shown in defects.items() if shown} == {}
    assert {case: shown["width"] for case, shown in zip(drawn, found) if shown["width"] < 500} == {}


def test_a_flat_pairwise_matrix_keeps_its_colour_scale_inside_zero_to_one(runs):
    """An all-1.0 matrix once got a 0.996-1.004 colour bar: values above 1 on a 0-1 score (issue 37.16)."""
    data = classes_document(runs, n_classes=3, n_candidates=1, flat=True)
    assert figures.pairwise_figure(data).axes[0].images[0].get_clim() == (0.99, 1.0)
