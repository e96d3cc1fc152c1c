"""Target views and label hierarchies: validation, one result per view, shared extraction, fidelity."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, ConfigError, ContinuousOverlapScoringConfig, DatasetIdentity,
                           InputTypeError, InputValidationError, LabelViewConfig, OverlapScoringConfig,
                           PrecomputedExtractor, SeparatixConfig, SerializationError, SklearnExtractor, TargetView,
                           TargetViewConfig)

IDENTITY = DatasetIdentity.declared("views", "1")
QUIET = dict(separatix_config=SeparatixConfig(enabled=False), scoring_config=OverlapScoringConfig(k=4),
             continuous_config=ContinuousOverlapScoringConfig(k=3, n_null_permutations=2))


@pytest.fixture(scope="module")
def viewed():
    """Six blob classes; views: coarse (pairs of classes), multi-label tags, and a regression score."""
    X, y = gaussian_classes(n_per_class=15, n_classes=6, dim=6, seed=3)
    coarse = np.array(["low", "low", "mid", "mid", "high", "high"])[y]
    tags = [tuple(t for t, on in (("even", c % 2 == 0), ("big", c >= 3), ("one", c == 1)) if on) or ("none",)
            for c in y]
    score = X[:, 0] * 2.0 + np.random.default_rng(0).normal(0, 0.1, len(y))
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY).with_target_views([
        TargetView("coarse", coarse), TargetView("tags", tags, target_type="multi_label"),
        TargetView("severity", score, target_type="regression", target_names=["severity"])])
    return dataset, X


def extractors(X):
    return [PrecomputedExtractor("raw", X), SklearnExtractor("pca2", PCA(2, random_state=0))]


# ----------------------------------------------------------------------------- validation
def test_views_are_validated_like_targets_and_named_in_errors(viewed):
    dataset, X = viewed
    with pytest.raises(InputValidationError, match="target view .short. has 6 rows"):
        dataset.with_target_views([TargetView("short", [1, 2, 3] * 2)])
    with pytest.raises(InputValidationError, match="view named 'coarse' already exists"):
        dataset.with_target_views([TargetView("coarse", np.zeros(len(X)))])
    with pytest.raises(InputValidationError, match="no brackets"):
        dataset.with_target_views([TargetView("a[b]", np.zeros(len(X)))])
    with pytest.raises(InputTypeError, match="not a TargetView"):
        dataset.with_target_views([("coarse", np.zeros(len(X)))])
    with pytest.raises(ConfigError, match=r"unknown target view\(s\) \['fine'\]"):
        Benchmark(dataset, extractors(X), target_view_config=TargetViewConfig(views=("fine",)))
    with pytest.raises(ConfigError, match=r"names output\(s\) \['layer_6'\] that no extractor produces"):
        Benchmark(dataset, extractors(X), target_view_config=TargetViewConfig(output_views={"layer_6": ("coarse",)}))
    with pytest.raises(ConfigError, match="unknown field 'view'"):
        TargetViewConfig(view=("coarse",))


def test_hierarchy_paths_are_structural_and_classification_only():
    X, y = gaussian_classes(n_per_class=10, n_classes=4, dim=4)
    # "a/b" + "c" and "a" + "b/c" would collide if the levels were joined with "/"
    paths = [("a/b", "c"), ("a", "b/c"), ("a/b", "d"), ("a", "e")] * 10
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY).with_label_hierarchy(paths, ("top", "leaf"))
    assert len(dataset.label_view("top").targets.catalog) == 2
    assert len(dataset.label_view("leaf").targets.catalog) == 4
    with pytest.raises(InputValidationError, match=r"label_paths\[2\] = \('a',\) must be a sequence of 2 labels"):
        BenchmarkDataset.from_arrays(X, y, identity=IDENTITY).with_label_hierarchy(
            paths[:2] + [("a",)] + paths[3:], ("top", "leaf"))
    regression = BenchmarkDataset.from_arrays(X, X[:, 0], identity=IDENTITY, target_type="regression")
    with pytest.raises(InputValidationError, match="label hierarchies are classification"):
        regression.with_label_hierarchy(paths, ("top", "leaf"))


# ----------------------------------------------------------------------------- in a benchmark
def test_one_result_per_view_named_as_the_spec_shows_with_shared_extraction(viewed):
    dataset, X = viewed
    benchmark = Benchmark(dataset, extractors(X), target_view_config=TargetViewConfig(), **QUIET)
    plan = benchmark.plan()
    names = [chain.name for chain in plan.chains]
    assert names == [f"{e}[target={v}]" for e in ("raw", "pca2") for v in ("coarse", "tags", "severity")]
    extract_keys = {keys["extract"] for keys in plan.chain_keys}
    assert len(extract_keys) == 2  # one extraction per extractor, shared by its three views
    assert sum(job.stage == "extract" for job in plan.jobs) == 2
    scores = {keys["score"] for keys in plan.chain_keys}
    assert len(scores) == 6
    result = benchmark.run()
    coarse = result["pca2[target=coarse]"]
    assert coarse.target_view == "coarse" and coarse.label_view is None and coarse.view == "target=coarse"
    assert result["raw[target=tags]"].overlap.target_type == "multi_label"
    assert result["raw[target=severity]"].overlap.target_type == "regression"
    assert result.views() == ["target=coarse", "target=tags", "target=severity"]
    frame = result.to_dataframe()
    assert {"target_view", "label_view"} <= set(frame.columns)
    assert frame.groupby("target_view")["rank"].apply(sorted).to_dict() == {v: [1, 2] for v in
                                                                             ("coarse", "tags", "severity")}
    reloaded = type(result).from_dict(result.to_dict())
    assert reloaded["raw[target=tags]"].target_view == "tags"
    assert "raw[target=coarse]" in result.to_markdown()


def test_rankings_and_cohorts_stay_within_a_view(viewed):
    dataset, X = viewed
    result = Benchmark(dataset, extractors(X), target_view_config=TargetViewConfig(views=("coarse", "tags")),
                       **QUIET).run()
    for view in ("target=coarse", "target=tags"):
        assert {r.view for r in result.ranked_results(view)} == {view}
        assert {r.view for r in result.quality_cohort(1.0, view=view)} == {view}
    assert [r.view for r in result.ranked_results()] == ["target=coarse"] * 2 + ["target=tags"] * 2
    with pytest.raises(ConfigError, match="within one view"):
        result.quality_cohort()
    assert sum("Top candidate" in note for note in result.recommendations) == 2
    with pytest.raises(ConfigError, match=r"view='target=nope' names no view of this result; its views: \['target"):
        result.ranked_results("target=nope")


@pytest.mark.parametrize("view", ["coarse", "tags", "severity"])
def test_each_view_scores_exactly_like_a_plain_benchmark_on_its_targets(viewed, view):
    dataset, X = viewed
    viewed_result = Benchmark(dataset, extractors(X), target_view_config=TargetViewConfig(views=(view,)),
                              **QUIET).run()
    plain = Benchmark(dataset.target_view(view), extractors(X), **QUIET).run()
    for name in ("raw", "pca2"):
        assert viewed_result[f"{name}[target={view}]"].overlap.to_dict() == plain[name].overlap.to_dict()


def test_digits_with_a_two_level_hierarchy():
    """Coarse shape families above the digit: the digit level equals a plain benchmark on the digits."""
    X, y = load_digits(return_X_y=True)
    family = {0: "loop", 6: "loop", 8: "loop", 9: "loop", 1: "stroke", 7: "stroke", 4: "stroke",
              2: "curve", 3: "curve", 5: "curve"}
    paths = [(family[int(d)], int(d)) for d in y]
    identity = DatasetIdentity.declared("sklearn-digits", "1797x64")
    dataset = BenchmarkDataset.from_arrays(X.astype(np.float32), y, identity=identity).with_label_hierarchy(
        paths, ("family", "digit"))
    pca = [SklearnExtractor("pca8", PCA(8, random_state=0))]
    result = Benchmark(dataset, pca, label_view_config=LabelViewConfig(), separatix_config=SeparatixConfig(
        enabled=False)).run()
    assert [r.name for r in result.extractor_results] == ["pca8[level=family]", "pca8[level=digit]"]
    family_result, digit_result = result["pca8[level=family]"], result["pca8[level=digit]"]
    assert family_result.label_view == "family" and len(family_result.overlap.per_class_scores) == 3
    plain = Benchmark(BenchmarkDataset.from_arrays(X.astype(np.float32), paths, identity=identity,
                                                   target_type="single_label"), pca,
                      separatix_config=SeparatixConfig(enabled=False)).run()
    assert digit_result.overlap.score == plain["pca8"].overlap.score
    assert 0.0 < family_result.overlap.score < 1.0


def test_hierarchy_levels_from_arrays_keep_readable_displays_and_a_catalog_per_level():
    """Issue 26 item 13: paths zipped from NumPy arrays display as Python values; each level records its catalog."""
    X, y = gaussian_classes(n_per_class=10, n_classes=4, dim=4)
    top = np.array([1, 1, 2, 2])[y]  # np.int64 parts
    leaf = np.array(["cat", "dog", "cod", "eel"])[y]  # np.str_ parts
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY).with_label_hierarchy(
        list(zip(top, leaf)), ("top", "leaf"))
    leaf_catalog = dataset.label_view("leaf").targets.catalog
    assert [e.display for e in leaf_catalog.entries] == ["(1, 'cat')", "(1, 'dog')", "(2, 'cod')", "(2, 'eel')"]
    assert leaf_catalog.value(leaf_catalog.keys[0]) == (1, "cat") and type(leaf_catalog.value(leaf_catalog.keys[0])[1]) is str
    levels = dataset.summary()["label_levels"]
    assert levels["leaf"]["label_catalog"] == leaf_catalog.to_dict()
    assert [e["display"] for e in levels["top"]["label_catalog"]["entries"]] == ["1", "2"]
    result = Benchmark(dataset, [PrecomputedExtractor("raw", X)], label_view_config=LabelViewConfig(levels=("leaf",)),
                       **QUIET).run()
    assert "np." not in result.to_markdown() and "np." not in result.to_json()
    assert result.to_dict()["dataset_summary"]["label_levels"]["leaf"]["label_catalog"]["entries"][1] == {
        "key": leaf_catalog.keys[1], "display": "(1, 'dog')"}


def test_the_markdown_has_one_per_class_table_per_view_with_that_views_classes():
    """Issue 37 item 5: the second level's classes were in no table (its row was all dashes under the first's)."""
    from vertebrae.reports.markdown_table import cell

    X, y = gaussian_classes(n_per_class=10, n_classes=4, dim=4)
    paths = [(("round", "sharp")[int(c) // 2], ("o", "c", "v", "z")[int(c)]) for c in y]
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY).with_label_hierarchy(paths, ("family", "leaf"))
    result = Benchmark(dataset, extractors(X), label_view_config=LabelViewConfig(), **QUIET).run()
    md = result.to_markdown()
    section = md[md.index("## Per-class overlap"):]
    section = section[:section.index("\n## ", 1)]
    assert section.count("| extractor |") == 2 and "–" not in section
    for view, n_classes in (("level=family", 2), ("level=leaf", 4)):
        table = section[section.index(f"### {view}"):]
        table = table[:table.index("### ", 4)] if "### " in table[4:] else table
        lines = [line for line in table.splitlines() if line.startswith("|")]
        names = [r.name for r in result.extractor_results if r.label_view == view.split("=")[1]]
        assert len(lines) == 2 + len(names)
        overlap = result[names[0]].overlap.to_dict()
        assert lines[0] == "| extractor | " + " | ".join(overlap["labels"][k] for k in overlap["per_class_scores"]) + " |"
        assert len(overlap["per_class_scores"]) == n_classes
        for line, name in zip(lines[2:], names):
            expected = [cell(v) for v in result[name].overlap.per_class_scores.values()]
            assert line == "| " + " | ".join([name, *expected]) + " |"


def test_the_target_summary_gives_each_scored_view_its_own_counts_and_k():
    """The target summary listed the dataset's own classes with k looked up in the first view's result (another
    view's k where the keys coincide, else dashes): each scored view now has its own classes, counts and k."""
    from vertebrae.reports.markdown_table import cell

    X, y = gaussian_classes(n_per_class=60, n_classes=4, dim=4)
    coarse = np.where(y == 0, "rare", "common")
    paths = [("round" if c < 3 else "sharp", int(c)) for c in y]
    dataset = (BenchmarkDataset.from_arrays(X, y, identity=IDENTITY).with_target_views([TargetView("coarse", coarse)])
               .with_label_hierarchy(paths, ("family", "leaf")))
    result = Benchmark(dataset, [PrecomputedExtractor("raw", X)], target_view_config=TargetViewConfig(),
                       label_view_config=LabelViewConfig(levels=("family",)),
                       separatix_config=SeparatixConfig(enabled=False)).run()
    md = result.to_markdown()
    section = md[md.index("## Target summary"):]
    section = section[:section.index("\n## ", 1)]
    assert "Views scored: target=coarse, level=family. Available in the dataset: target=coarse, " in section
    for r in result.extractor_results:
        table = section[section.index(f"### {r.view}\n"):]
        lines = [line for line in table.splitlines()[1:] if line.startswith("|")][2:]
        o = r.overlap.to_dict()
        expected = [f"| {cell(o['labels'][key])} | {count} | {o['k_per_class'][key]} | yes |"
                    for key, count in o["class_counts"].items()]
        assert lines[:len(expected)] == expected and len(set(o["k_per_class"].values())) == 2


def test_a_file_whose_view_has_no_summary_is_refused_on_load():
    """The target summary reads each view's classes from the dataset summary: a file without them (edited, cut) is
    refused when loaded, naming the field, instead of a KeyError from the report."""
    X, y = gaussian_classes(n_per_class=10, n_classes=3, dim=4)
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY).with_target_views([TargetView("coarse", y == 0)])
    result = Benchmark(dataset, [PrecomputedExtractor("raw", X)], target_view_config=TargetViewConfig(),
                       **QUIET).run()
    data = json.loads(result.to_json())
    del data["dataset_summary"]["target_views"]
    with pytest.raises(SerializationError, match="target_view .* summarized under dataset_summary.target_views"):
        type(result).from_dict(data)
    data = json.loads(result.to_json())
    data["dataset_summary"]["target_views"]["coarse"]["class_names"].pop()
    with pytest.raises(SerializationError, match="target_views.coarse: .*one name per class count"):
        type(result).from_dict(data)
