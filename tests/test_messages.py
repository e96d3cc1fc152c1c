"""Consistent messages: 0-based item numbers, InputTypeError for wrong types, exported warnings (issue 11, item 10)."""

from __future__ import annotations

import numpy as np
import pytest

import vertebrae
from vertebrae import (Benchmark, BenchmarkDataset, ConfigError, DatasetIdentity, InputTypeError,
                       PrecomputedExtractor, StabilityConfig, run_stability_analysis)
from vertebrae.scoring import OverlapIndexScorer, SeparatixScorer
from vertebrae.cli.main import main

from .conftest import gaussian_classes


def test_warning_and_error_classes_are_exported():
    from vertebrae.errors import DataWarning, ScoringWarning, VertebraeWarning

    assert vertebrae.ScoringWarning is ScoringWarning and vertebrae.DataWarning is DataWarning
    assert issubclass(vertebrae.ScoringWarning, vertebrae.VertebraeWarning) and VertebraeWarning is vertebrae.VertebraeWarning
    assert {"ScoringWarning", "DataWarning", "VertebraeWarning", "ConfigTypeError"} <= set(vertebrae.__all__)


def test_item_numbers_are_zero_based_in_python_and_in_config_errors(tmp_path, capsys):
    X, y = gaussian_classes(n_per_class=10, n_classes=2, dim=3)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("d", "1"))
    with pytest.raises(vertebrae.InputValidationError, match=r"extractors\[1\] and extractors\[0\] are both named 'a'"):
        Benchmark(dataset, [PrecomputedExtractor("a", X), PrecomputedExtractor("a", X)])
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", y)
    head = '[dataset]\nid = "d"\nrevision = "1"\nlabels = "y.npy"\n'
    for body, message in [
        ('[[extractors]]\nname = "a"\nembeddings = "x.npy"\n[[extractors]]\nname = "b"\n',
         "config extractors[1] needs name and embeddings"),
        ('[[extractors]]\nname = "a"\nembeddings = "x.npy"\nsize = 3\n', "config section extractors[0] has unknown key"),
        ('[[extractors]]\nname = "a"\nembeddings = "x.npy"\n[[extractors]]\nname = "a"\nembeddings = "x.npy"\n',
         "extractors[1] and extractors[0] are both named 'a'"),
        ('[[extractors]]\nname = "a"\nembeddings = "x.npy"\n[[metrics]]\nname = "m"\n', "config metrics[0] must be"),
    ]:
        (tmp_path / "run.toml").write_text(head + body)
        assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
        assert message in capsys.readouterr().err


def _blob_dataset():
    X, y = gaussian_classes(n_per_class=10, n_classes=2, dim=3)
    return X, y, BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("d", "1"))


X, Y, DATASET = _blob_dataset()
WRONG_TYPES = {
    "Benchmark scoring_config": lambda: Benchmark(DATASET, [PrecomputedExtractor("a", X)], scoring_config={"k": 3}),
    "Benchmark stability_config": lambda: Benchmark(DATASET, [PrecomputedExtractor("a", X)], stability_config="x"),
    "Benchmark separatix_config": lambda: Benchmark(DATASET, [PrecomputedExtractor("a", X)], separatix_config=1),
    "Benchmark dataset": lambda: Benchmark((X, Y), [PrecomputedExtractor("a", X)]),
    "Benchmark extractors": lambda: Benchmark(DATASET, PrecomputedExtractor("a", X)),
    "identity": lambda: BenchmarkDataset.from_embeddings(X, Y, identity="d@1"),
    "declared revision": lambda: DatasetIdentity.declared("d", 1),
    "from_arrays X": lambda: BenchmarkDataset.from_arrays(5, Y, identity=DatasetIdentity.declared("d", "1")),
    "labels": lambda: BenchmarkDataset.from_embeddings(X, 7, identity=DatasetIdentity.declared("d", "1")),
    "extractor name": lambda: PrecomputedExtractor(3, X),
    "group id": lambda: DATASET.with_groups([object()] * len(Y)),
    "config field": lambda: StabilityConfig(repeats="5"),
    "config bool": lambda: vertebrae.SeparatixConfig(enabled="yes"),
    "from_dict": lambda: StabilityConfig.from_dict([("repeats", 5)]),
    "scorer config": lambda: OverlapIndexScorer({"k": 3}),
    "stability config": lambda: run_stability_analysis(X, Y, config={"repeats": 3}),
    "stability scorer": lambda: run_stability_analysis(X, Y, scorer="fast"),
    "separatix config": lambda: SeparatixScorer(config={"budget": "fast"}),
    "retrieval config": lambda: vertebrae.RetrievalBenchmark(_retrieval_dataset(), [vertebrae.PrecomputedPairExtractor(
        "p", np.eye(2), np.eye(2))], retrieval_config={"cutoffs": [1]}),
}


def _retrieval_dataset():
    return vertebrae.RetrievalDataset.from_embeddings(np.eye(2), np.eye(2), relevance=[(0, 0, 1.0), (1, 1, 1.0)],
                                                      identity=DatasetIdentity.declared("r", "1"))


@pytest.mark.parametrize("call", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_wrong_argument_types_raise_input_type_error(call):
    with pytest.raises(InputTypeError):
        call()


def test_config_type_errors_are_still_config_errors():
    with pytest.raises(ConfigError):
        StabilityConfig(repeats="5")
    with pytest.raises(ConfigError):
        StabilityConfig(repeats=1)  # a wrong value (not type) stays a plain ConfigError
    with pytest.raises(ConfigError) as info:
        StabilityConfig(repeats=1)
    assert not isinstance(info.value, InputTypeError)


def test_benchmark_warnings_name_their_extractor_point_at_the_call_and_come_once(recwarn):
    """Issue 26 item 11: a small class warned once per extractor, named, at the user's line (not stages.py)."""
    import warnings

    rng = np.random.default_rng(0)
    y = np.array(["big"] * 40 + ["small"] * 6)
    X = rng.normal(size=(y.size, 4))
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("d", "1"))
    extractors = [PrecomputedExtractor("e1", X), PrecomputedExtractor("e2", X[::-1].copy())]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Benchmark(dataset, extractors, stability_config=StabilityConfig(repeats=3),
                  separatix_config=vertebrae.SeparatixConfig(enabled=False)).run()
    scoring = [str(w.message) for w in caught if issubclass(w.category, vertebrae.ScoringWarning)]
    small = [m for m in scoring if "'small': k reduced" in m]
    assert sorted(m.partition(":")[0] for m in small) == ["e1", "e2"]  # one each, named (3 repeats add none)
    assert len(scoring) == len(set(scoring))
    assert {w.filename for w in caught if issubclass(w.category, vertebrae.ScoringWarning)} == {__file__}
