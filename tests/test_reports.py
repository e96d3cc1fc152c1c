"""HTML report and figures, the Markdown that leads with the answer, target-aware recommendations."""

from __future__ import annotations

import copy
import html
import json
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, ContinuousOverlapScoringConfig, DatasetIdentity,
                       OverlapScoringConfig, RetrievalBenchmark, RetrievalConfig, RetrievalDataset,
                       SerializationError, StabilityConfig)
from vertebrae.scoring import OverlapIndexScorer
from vertebrae.cli.main import console_summary, main
from vertebrae.errors import DataWarning
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.reports import figures
from vertebrae.reports.html import render_html
from vertebrae.reports.render import render_markdown
from vertebrae.families.labeled.results import RECOMMENDATION_CUTOFFS, recommendation_label
from vertebrae.inputs.targets import build_targets

from .chromium import chromium_shows, needs_chromium
from .conftest import gaussian_classes

IDENTITY = DatasetIdentity.declared("reports", "1")


@pytest.fixture(scope="module")
def result() -> BenchmarkResult:
    X, y = gaussian_classes(n_per_class=40, n_classes=4, dim=6, seed=4)
    labels = np.array(["cat", "dog", "<b>bold</b>", "a|b"])[y]
    dataset = BenchmarkDataset.from_embeddings(X, labels, identity=IDENTITY, name="report data")
    rng = np.random.default_rng(0)
    extractors = [PrecomputedExtractor("clean", X),
                  PrecomputedExtractor("<script>alert(1)</script>", X + rng.normal(0, 4, X.shape)),
                  PrecomputedExtractor("a much longer extractor name than the others", X + rng.normal(0, 9, X.shape))]
    return Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=3),
                     stability_config=StabilityConfig(repeats=3), progress=False).run()


def retrieval_document() -> dict:
    """The serialized result of a small bidirectional retrieval run (10 queries, 30 gallery items, cutoffs 1/3/10)."""
    rng = np.random.default_rng(1)
    queries, gallery = rng.normal(size=(10, 4)), rng.normal(size=(30, 4))
    gallery[:10] = queries + 0.4 * rng.normal(size=(10, 4))
    ds = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(10)],
                                          identity=IDENTITY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, DeprecationWarning))
        run = RetrievalBenchmark(ds, [PrecomputedExtractor("own")], retrieval_config=RetrievalConfig(
            cutoffs=[1, 3, 10], bidirectional=True), progress=False).run()
    return run.serialized()


@pytest.fixture(scope="module")
def retrieval_data() -> dict:
    return retrieval_document()


# ----------------------------------------------------------------------------- HTML
def test_html_is_one_self_contained_page_with_every_figure(result):
    page = result.to_html()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "<link" not in page and "<img" not in page  # no JavaScript, no fetches
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing loaded over the network
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions == ["Ranking", "Per-class scores", "Pairwise overlap"]  # no compression or resource data
    assert page.count("<svg") == 3
    assert "stability interval" in page  # the ranking's error bars have their legend
    assert page.index("<h2>Answer</h2>") < page.index("<h2>Figures</h2>") < page.index("<h2>Ranking</h2>")
    assert "Top candidate: clean" in page


def test_html_escapes_every_name(result):
    page = result.to_html()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<b>bold</b>" not in page


def test_html_is_rendered_from_the_json_only(result, tmp_path):
    path = result.save_json(tmp_path / "r.json")
    assert BenchmarkResult.load(path).to_html() == result.to_html()  # deterministic, figures included
    assert main(["report", str(path), "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text() == result.to_html()


def test_html_without_matplotlib_keeps_the_tables(result, tmp_path):
    # matplotlib is installed for the tests; hiding it from a child interpreter is the only way to
    # exercise the missing-extra path (sys.modules[name] = None makes the import fail for real).
    path = result.save_json(tmp_path / "r.json")
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from vertebrae.families.labeled.results import load_result\n"
            f"print(load_result({str(path)!r}).to_html())")
    page = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    hint = html.escape(figures.INSTALL_HINT)
    assert hint in page and "<svg" not in page
    assert page.index(hint) < page.index("<h2>Answer</h2>")  # the first screen says how to get figures
    assert "<h2>Ranking</h2>" in page and "clean" in page


def test_retrieval_html_shows_the_cutoff_figure(retrieval_data):
    page = render_html(retrieval_data)
    assert re.findall(r"<figcaption>(.*?)</figcaption>", page) == ["Ranking", "Metrics at each cutoff"]
    fig = figures.retrieval_cutoffs_figure(retrieval_data)
    assert fig.axes[0].get_title() == "ndcg@k" and fig.get_suptitle() == "Dashed: reverse direction"
    forward, reverse = fig.axes[0].get_lines()  # one candidate: one colour, the reverse direction dashed
    assert (forward.get_linestyle(), reverse.get_linestyle()) == ("-", "--")
    assert reverse.get_color() == forward.get_color()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["own"]


def test_render_html_rejects_unknown_result_types():
    with pytest.raises(SerializationError, match=r"\$.result_type: no HTML report for result type 'zebra'"):
        render_html({"result_type": "zebra"})


#: Measures what the page shows after layout: its h2 titles, each figure's drawn size, and the tables wider
#: than their box (which would need sideways scrolling). Injected into a copy only: the report has no scripts.
PROBE = """<script>
const box = e => { const b = e.getBoundingClientRect(); return [b.width, b.height]; };
const found = {titles: [...document.querySelectorAll("h2")].map(h => h.textContent),
               figures: [...document.querySelectorAll("figure svg")].map(box),
               overflowing: [...document.querySelectorAll("table")].filter(t => t.scrollWidth > t.clientWidth + 1)
                                 .map(t => t.querySelector("th").textContent)};
const out = document.createElement("pre"); out.id = "probe"; out.textContent = JSON.stringify(found);
document.body.appendChild(out);
</script>"""
@needs_chromium
def test_headless_chromium_shows_every_section_and_figure(result, tmp_path):
    page = result.save_html(tmp_path / "report.html")
    shown = chromium_shows(page, tmp_path, PROBE)
    markdown_titles = re.findall(r"^## (.+)$", result.to_markdown(), flags=re.M)
    assert shown["titles"] == ["Answer", "Figures", *markdown_titles[1:]]
    assert "Stability" in shown["titles"]
    assert len(shown["figures"]) == 3 and all(w > 100 and h > 100 for w, h in shown["figures"]), shown["figures"]
    assert shown["overflowing"] == []  # no table needs sideways scrolling at 1400 px


def test_html_says_what_the_markdown_says(result):
    """Same section titles in the same order; stability, caveats, revision and input files in both (issue 26.14)."""
    data = copy.deepcopy(result.serialized())
    clean = next(r for r in data["extractor_results"] if r["name"] == "clean")
    clean["overlap"]["score"] = clean["stability"]["summaries"]["score"]["interval_high"] + 0.01  # outside
    data["metadata"]["input_files"] = [{"role": "labels", "path": "labels.csv", "sha256": "ab" * 32,
                                        "size_bytes": 123}]
    md, page = render_markdown(data), render_html(data)
    md_titles = [html.unescape(t).replace("\\|", "|") for t in re.findall(r"^#{2,4} (.+)$", md, flags=re.M)]
    page_titles = [html.unescape(t) for t in re.findall(r"<h[2-4]>(.*?)</h[2-4]>", page)]
    assert page_titles == md_titles[:1] + ["Figures"] + md_titles[1:]
    for shown in ("Kendall tau", "rank retention", "outside its own stability interval", "declared: reports @ 1",
                  "labels.csv", "a much longer extractor name than the others"):
        assert shown in md and shown in page, shown
    assert "in the HTML report" not in md


def test_markdown_gives_answer_then_caveats_then_table_and_compact_detail(result):
    data = copy.deepcopy(result.serialized())
    clean = next(r for r in data["extractor_results"] if r["name"] == "clean")
    clean["overlap"]["score"] = clean["stability"]["summaries"]["score"]["interval_high"] + 0.01
    md = render_markdown(data)
    answer = md[md.index("## Answer"):md.index("## Ranking")]
    assert answer.index("**Top candidate: clean**") < answer.index("outside its own stability interval") \
        < answer.index("| rank |")
    titles = re.findall(r"^## (.+)$", md, flags=re.M)
    assert titles.index("Stability") < titles.index("Per-extractor details") == len(titles) - 2
    assert md.count("| class | count | k | overlap |") == 0  # one per-class table, not one per extractor
    per_class = md[md.index("## Per-class overlap"):]
    header = per_class.splitlines()[4]
    assert header == "| extractor | &lt;b&gt;bold&lt;/b&gt; | a\\|b | cat | dog |"  # extractors: rows; classes: columns
    assert re.search(r"^1\. ", md, flags=re.M) is None  # no multi-line numbered decision paths


def test_html_per_class_table_has_a_row_per_extractor(result):
    page = result.to_html()
    section = page[page.index("<h2>Per-class overlap</h2>"):]
    table = section[:section.index("</table>")]
    assert table.count("<tr>") == 1 + 3  # header and three extractors: adding extractors adds rows, not columns
    assert table.split("</tr>")[0].count("<th>") == 1 + 4  # extractor and four classes


def _overlaps(a, b) -> bool:
    return not (a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0)


def test_ranking_figure_zooms_to_the_data_and_keeps_the_legend_off_the_axes(result):
    data = result.serialized()
    fig = figures.ranking_figure(data)
    ax = fig.axes[0]
    values = [r["primary_score"] for r in data["extractor_results"]]
    values += [v for r in data["extractor_results"] for v in (r["stability"]["summaries"]["score"]["interval_low"],
                                                              r["stability"]["summaries"]["score"]["interval_high"])]
    low, high = ax.get_xlim()
    assert low <= min(values) and high >= max(values)
    assert high - low <= 1.25 * (max(values) - min(values))  # zoomed: not a fixed 0-1 axis
    assert "not from 0" in ax.get_xlabel()
    for figure in (fig, figures.per_class_figure(data)):
        figure.draw_without_rendering()
        legend = figure.legends[0].get_window_extent()
        assert not _overlaps(legend, figure.axes[0].get_window_extent())


def test_pairwise_colour_scale_spans_the_matrix(result):
    data = copy.deepcopy(result.serialized())
    pairs = next(r for r in data["extractor_results"] if r["name"] == "clean")["overlap"]["pairwise_scores"]
    a, b, c = list(pairs)[:3]
    pairs[a][b], pairs[b][c] = 0.93, 0.976  # strong spaces: a 0-1 scale would paint both the same yellow
    values = [v for row in pairs.values() for v in row.values() if v is not None]
    assert figures.pairwise_figure(data).axes[0].images[0].get_clim() == (0.93, max(values))


#: The table headers with a word broken across lines, and the tables wider than their box.
TABLE_PROBE = """<script>
const broken = [...document.querySelectorAll("th")].flatMap(th => {
  const words = [];
  for (const t of [...th.childNodes].filter(n => n.nodeType === 3)) {
    for (const m of t.data.matchAll(/[^\\s_]+_?/g)) {
      const r = document.createRange(); r.setStart(t, m.index); r.setEnd(t, m.index + m[0].length);
      if (new Set([...r.getClientRects()].map(x => Math.round(x.top))).size > 1) words.push(m[0]);
    }
  }
  return words;
});
const overflowing = [...document.querySelectorAll("table")].filter(t => t.scrollWidth > t.clientWidth + 1)
  .map(t => t.querySelector("th").textContent);
const out = document.createElement("pre"); out.id = "probe";
out.textContent = JSON.stringify({broken, overflowing, page: document.documentElement.scrollWidth});
document.body.appendChild(out);
</script>"""


@needs_chromium
def test_chromium_fits_the_ranking_in_1280_px_without_breaking_words(tmp_path):
    """The ranking of a run with Separatix, views and probe hints once scrolled sideways at 1280 px and its
    headers broke mid-word ("overl / ap_ / score"); secondary columns now fold into a details table (issue 37.17)."""
    from sklearn.datasets import load_digits

    from vertebrae import SeparatixConfig

    X, y = load_digits(return_X_y=True)
    dataset = BenchmarkDataset.from_embeddings(X[:300], y[:300], identity=IDENTITY)
    run = Benchmark(dataset, [PrecomputedExtractor("raw_pixels", X[:300]),
                              PrecomputedExtractor("random_projection_16", X[:300, :16])],
                    scoring_config=OverlapScoringConfig(k=5), stability_config=StabilityConfig(repeats=3),
                    separatix_config=SeparatixConfig(), progress=False).run()
    page = run.save_html(tmp_path / "report.html")
    assert "<details><summary>More columns:" in page.read_text()
    shown = chromium_shows(page, tmp_path, TABLE_PROBE, width=1280)
    assert shown == {"broken": [], "overflowing": [], "page": 1280}


# ----------------------------------------------------------------------------- figures from documented fields
def test_compression_frontier_is_drawn_from_real_variants(result):
    """No figure without variants; with them, one series per source with the variant labels."""
    from sklearn.datasets import load_digits

    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, EmbeddingCompressionConfig,
                               PrecomputedExtractor, SeparatixConfig)

    assert figures.svg_or_none(figures.compression_frontier_figure(result.serialized())) is None
    X, y = load_digits(return_X_y=True)
    dataset = BenchmarkDataset.from_embeddings(X[:400], y[:400], identity=DatasetIdentity.declared("digits", "400"))
    variants = [EmbeddingCompressionConfig(method="none"), EmbeddingCompressionConfig(method="pca", n_components=8),
                EmbeddingCompressionConfig(method="quantize", dtype="int8")]
    compressed = Benchmark(dataset, [PrecomputedExtractor("raw")], compression=variants,
                           separatix_config=SeparatixConfig(enabled=False)).run()
    svg = figures.svg_or_none(figures.compression_frontier_figure(compressed.serialized()))
    assert "Compression frontier" in svg and "pca8" in svg and "int8" in svg
    assert "Compression frontier" in compressed.to_html()


def test_cohort_resources_reads_the_resource_profile(result):
    data = copy.deepcopy(result.serialized())
    data["metadata"]["quality_tolerance"] = 1.0  # everyone in the cohort
    assert figures.svg_or_none(figures.cohort_resources_figure(data)) is None
    for i, r in enumerate(data["extractor_results"]):
        r["resource_profile"] = {"latency": {"warm_median_seconds": 0.01 * (i + 1)},
                                 "embedding_bytes": {"evaluated_logical_bytes": 1000}}
    svg = figures.svg_or_none(figures.cohort_resources_figure(data))
    assert "warm median latency (s)" in svg and "clean" in svg
    for r in data["extractor_results"]:
        r["resource_profile"]["latency"] = {}
    assert "evaluated embedding bytes" in figures.svg_or_none(figures.cohort_resources_figure(data))


def test_monitor_trend_from_snapshot_rows():
    rows = [{"evaluation_index": i, "status": "ok", "extractor": name, "primary_score": 0.9 - 0.1 * i}
            for i in range(3) for name in ("a", "b")]
    rows.append({"evaluation_index": 3, "status": "failed", "extractor": "a", "primary_score": None})
    document = {"result_type": "monitor", "rows": rows}
    svg = figures.svg_or_none(figures.monitor_trend_figure(document))
    assert "Monitor trend" in svg and "failed snapshot" in svg
    page = render_html(document)
    assert "Trend" in page and page.count("<tr>") == len(rows) + 1
    assert figures.svg_or_none(figures.monitor_trend_figure({"result_type": "monitor", "rows": []})) is None


def test_figures_are_drawn_without_touching_pyplot(result, tmp_path):
    """In a fresh interpreter: other test modules import keras, which imports pyplot into this one."""
    path = tmp_path / "result.json"
    result.save_json(path)
    code = ("import sys\n"
            "from vertebrae.reports import figures\n"
            "from vertebrae.families.labeled.results import load_result\n"
            f"assert figures.svg_or_none(figures.ranking_figure(load_result({str(path)!r}).serialized()))\n"
            "print('matplotlib' in sys.modules, 'matplotlib.pyplot' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False"]  # matplotlib drew the figure; pyplot was never imported


# ----------------------------------------------------------------------------- Markdown
def test_markdown_leads_with_the_answer(result):
    md = result.to_markdown()
    sections = re.findall(r"^## (.+)$", md, flags=re.M)
    assert sections[:3] == ["Answer", "Ranking", "How to read these numbers"]
    answer = md[md.index("## Answer"):md.index("## Ranking")]
    clean = result["clean"]
    low, high = clean.stability.summary.interval_low, clean.stability.summary.interval_high
    assert answer.startswith("## Answer\n\n**Top candidate: clean**")
    assert f"| 1 | clean | {clean.primary_score:.4f} [{low:.4f}, {high:.4f}] | {clean.recommendation} |" in answer
    reading = md[md.index("## How to read"):md.index("## Dataset summary")]
    assert "1.0 means separated classes, 0.0 complete overlap" in reading
    assert "strong_separation at an overlap score of at least 0.8" in reading
    ranking = md[md.index("## Ranking"):md.index("## How to read")]
    header = ranking.splitlines()[4]
    for column in ("primary_metric", "primary_score", "overlap_score", "overlap_macro", "overlap_weighted",
                   "stability_interval", "weakest_class", "best_probe", "probe_metric", "probe_score", "recipe"):
        assert f"| {column} |" in header
    assert "precomputed (sha256 " in ranking and '"content_sha256"' not in md  # recipes summarized


def test_console_table_is_aligned_for_any_name_length(result):
    lines = console_summary(result).splitlines()
    header, rule, rows = lines[0], lines[1], lines[2:5]
    ends = {line.index("overlap") + len("overlap") for line in [header]}
    for row in rows:  # scores are right-aligned under the metric header
        score = re.search(r"\d\.\d{4}", row)
        assert score.end() in ends
    assert rule.split("  ")[1] == "-" * len("a much longer extractor name than the others")
    assert lines[-2].startswith("Top candidate: clean — highest overlap")
    assert lines[-1].startswith("Tied with the best (paired verdicts over 3 repeats, 95% interval): clean; worse:")


def test_console_summary_cautions_when_the_top_candidate_collapsed_onto_few_points():
    # 4 points under random labels outscore the 8 raw columns they were made from.
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 8)), rng.integers(0, 3, 300)
    points = rng.normal(size=(4, 8))
    collapsed = points[(X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0).astype(int)]
    dataset = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("random-labels", "1"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = Benchmark(dataset, [PrecomputedExtractor("collapsed", collapsed), PrecomputedExtractor("raw", X)],
                        progress=False).run()
    assert run.ranked_results()[0].name == "collapsed" and run["collapsed"].overlap.metadata["distinct_rows"] == 4
    assert run["raw"].overlap.metadata["distinct_rows"] == 300
    lines = console_summary(run).splitlines()
    assert ("Caution: collapsed has only 4 distinct embedding rows among 300, and OverlapIndex scores coincident "
            "rows unreliably; check the pick with --referee probe.") in lines


# ----------------------------------------------------------------------------- recommendations
def test_recommendation_cutoffs_per_target_type():
    assert recommendation_label(0.8) == "strong_separation" and recommendation_label(0.79) == "moderate_separation"
    assert recommendation_label(0.5, "multi_label") == "strong_separation"
    assert recommendation_label(0.34, "multi_label") == "weak_separation"
    assert recommendation_label(0.25, "regression") == "strong_continuous_structure"
    assert recommendation_label(0.1, "regression") == "moderate_continuous_structure"
    assert recommendation_label(0.09, "regression") == "weak_continuous_structure"
    assert set(RECOMMENDATION_CUTOFFS) == {"single_label", "multi_label", "regression"}
    with pytest.raises(ValueError, match="target_type must be one of"):
        recommendation_label(0.5, "ranking")


def test_regression_cutoffs_fit_known_predictable_targets():
    """A near-linear target (Ridge R² about 0.98) is strong; an unpredictable one weak; row norm matters."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import cross_val_score

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 16))
    linear = X @ rng.normal(size=16) + 0.3 * rng.normal(size=600)
    noise = rng.normal(size=600)
    magnitude = np.linalg.norm(X, axis=1)
    assert cross_val_score(Ridge(), X, linear, cv=5, scoring="r2").mean() > 0.95  # the independent reference
    assert cross_val_score(Ridge(), X, noise, cv=5, scoring="r2").mean() < 0.05

    def score(y, normalize=True):
        config = ContinuousOverlapScoringConfig(normalize_embeddings=normalize, n_null_permutations=5)
        return OverlapIndexScorer(continuous_config=config).score(X, build_targets(
            y, target_type="regression", n_samples=len(y))).score

    assert recommendation_label(score(linear), "regression") == "strong_continuous_structure"
    assert recommendation_label(score(noise), "regression") == "weak_continuous_structure"
    assert score(magnitude, normalize=False) > score(magnitude) + 0.05  # normalization removes the norm


def test_regression_markdown_explains_loss_ratio_and_normalization():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(150, 4))
    dataset = BenchmarkDataset.from_embeddings(X, X[:, 0] + 0.1 * rng.normal(size=150), target_type="regression",
                                               identity=IDENTITY)
    run = Benchmark(dataset, [PrecomputedExtractor("linear")], progress=False,
                    continuous_config=ContinuousOverlapScoringConfig(n_null_permutations=2)).run()
    md = run.to_markdown()
    reading = md[md.index("## How to read"):md.index("## Dataset summary")]
    assert "1 - loss_ratio" in reading and "normalize_embeddings=True" in reading
    assert "strong_continuous_structure at an overlap score of at least 0.25" in reading
    page = run.to_html()
    assert "loss_ratio" in page and "<svg" in page
    data = json.loads(run.to_json())
    assert figures.svg_or_none(figures.pairwise_figure(data)) is None  # regression has no class pairs


def test_reports_and_compare_cover_recorded_failures(tmp_path):
    """A failed extractor (PCA(32) on 6 features; a gallery branch dividing by zero) is reported, not fatal."""
    from sklearn.decomposition import PCA

    from vertebrae import SeparatixConfig, SklearnExtractor
    from vertebrae.reports.compare import compare_results
    from vertebrae.families.retrieval import PrecomputedPairExtractor, TwoBranchExtractor

    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=6, seed=5)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    run = Benchmark(dataset, [SklearnExtractor("pca32", PCA(32)), SklearnExtractor("pca3", PCA(3, random_state=0))],
                    separatix_config=SeparatixConfig(enabled=False), on_error="record", progress=False).run()
    assert run["pca32"].error is not None
    page, md = run.to_html(), run.to_markdown()
    assert "Failed in the" in page and "Top candidate: pca3" in page and "Failed in the" in md
    assert [row["extractor"] for row in run.rows(include_invalid=True)] == ["pca3", "pca32"]
    comparison = compare_results(run.serialized(), run.serialized())
    assert comparison["regressed"] == [] and {c["extractor"] for c in comparison["candidates"]} == {"pca3", "pca32"}

    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(6, 4)), rng.normal(size=(15, 4))
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(6)],
                                            identity=IDENTITY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, DeprecationWarning))
        retrieval = RetrievalBenchmark(data, [PrecomputedPairExtractor("pair", queries, gallery),
                                              TwoBranchExtractor("broken", lambda q: q, lambda g: 1 / 0)],
                                       retrieval_config=RetrievalConfig(cutoffs=[1, 5]), on_error="record",
                                       progress=False).run()
    assert "broken: failed in the" in retrieval.to_markdown() and "Top candidate: pair" in retrieval.to_html()
    assert [row["rank"] for row in retrieval.rows(include_invalid=True)] == [1, None]
    assert "failed" in repr(retrieval["broken"])


def test_multi_label_reading_gives_the_chance_level_and_its_cutoffs():
    from vertebrae import SeparatixConfig

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8))
    logits = X @ rng.normal(size=(8, 3))
    Y = (logits > 0).astype(int)
    Y[np.arange(300), logits.argmax(axis=1)] = 1
    dataset = BenchmarkDataset.from_embeddings(X, Y, target_type="multi_label", identity=IDENTITY)
    run = Benchmark(dataset, [PrecomputedExtractor("x")], separatix_config=SeparatixConfig(enabled=False),
                    progress=False).run()
    md = run.to_markdown()
    reading = md[md.index("## How to read"):md.index("## Dataset summary")]
    assert "1.0 means separated labels" in reading and "random labels scored 0.21-0.29" in reading
    assert "strong_separation at an overlap score of at least 0.5, moderate_separation at least 0.35" in reading
    assert run.to_html().count("<svg") == 3  # ranking, per-label bars, pairwise heatmap


def test_console_summary_says_tied_with_for_an_exact_tie_at_the_top():
    """Issue 37 item 23: two candidates with the same embeddings share rank 1; "0.0000 ahead of" misreads that."""
    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=4, seed=3)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    noisy = X + np.random.default_rng(0).normal(0, 3.0, X.shape)
    run = Benchmark(dataset, [PrecomputedExtractor("a", X), PrecomputedExtractor("b", X.copy()),
                              PrecomputedExtractor("c", noisy)], progress=False).run()
    assert run["a"].primary_score == run["b"].primary_score > run["c"].primary_score
    line = next(line for line in console_summary(run).splitlines() if line.startswith("Top candidate"))
    assert line == (f"Top candidate: a — highest overlap ({run['a'].primary_score:.4f}), tied with b (equal scores "
                    "share rank 1; the first in input order is named); 1 other(s) within the quality tolerance, so compare "
                    "them on cost.")
    assert "ahead of" not in line
