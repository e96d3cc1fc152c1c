"""ZeroShotBenchmark: encoder forms, the plan and its keys, results (JSON / Markdown / DataFrame), failures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline

from vertebrae import (BenchmarkDataset, DatasetIdentity, OverlapScoringConfig, TextEncoder, ZeroShotBenchmark,
                       ZeroShotBenchmarkResult, ZeroShotConfig, ZeroShotDataset)
from vertebrae.errors import (ConfigError, DataWarning, ExtractorError, InputTypeError, InputValidationError,
                                  ScoringWarning, SerializationError)
from vertebrae.execution.local import LocalRunner
from vertebrae.extractors import SklearnExtractor
from vertebrae.families.zero_shot import ExtractorEncoder, PrecomputedZeroShotEncoder

from .references import direct_oi, label_codes

IDENTITY = DatasetIdentity.declared("zero-shot-benchmark", "1")
WORDS = {"sport": ["goal", "match", "team", "score", "league"], "food": ["pasta", "bread", "cheese", "soup", "salad"],
         "tech": ["laptop", "phone", "software", "chip", "cloud"]}


def texts_and_labels():
    rng = np.random.default_rng(0)
    texts, labels = [], []
    for label, words in WORDS.items():
        for i in range(12):
            chosen = rng.choice(words, size=3, replace=False)
            texts.append(f"{chosen[0]} and {chosen[1]} with {chosen[2]} {i}")
            labels.append(label)
    return texts, labels


def text_dataset() -> ZeroShotDataset:
    texts, labels = texts_and_labels()
    source = BenchmarkDataset.from_arrays(texts, labels, identity=IDENTITY)
    prompts = {label: " ".join(words) for label, words in WORDS.items()}
    return ZeroShotDataset.from_prompts(source, prompts)


class WordCounter:
    """A real (tiny) text model with encode(list[str]): bag-of-words over a fixed vocabulary."""

    vocabulary = sorted(w for words in WORDS.values() for w in words)

    def encode(self, texts):
        return np.array([[text.split().count(w) for w in self.vocabulary] for text in texts], dtype=np.float32)


class Shuffled:
    """Same vocabulary, but the prompt branch is scrambled: a bad encoder (two-branch form)."""

    name = "bad"

    def encode_samples(self, inputs):
        return WordCounter().encode(inputs)

    def encode_prompts(self, prompts):
        return WordCounter().encode(prompts)[:, ::-1]

    def recipe(self):
        return {"type": "scrambled_test", "name": self.name}


class Noisy:
    """Word counts plus fixed Gaussian noise (the same for the same texts): classes that overlap."""

    def encode(self, texts):
        counts = WordCounter().encode(texts)
        return counts + np.random.default_rng(0).normal(0.0, 1.5, counts.shape).astype(np.float32)


class TwoBranch:
    """The two-branch protocol form, with its sample modality declared (checked against the samples)."""

    name = "two-branch"
    modalities = {"samples": "text", "prompts": "text"}

    def __init__(self):
        self.model = WordCounter()

    def encode_samples(self, inputs):
        return self.model.encode(inputs)

    def encode_prompts(self, prompts):
        return self.model.encode(prompts)

    def recipe(self):
        return {"type": "two_branch_test", "name": self.name}


def run(data, encoders, **kwargs) -> ZeroShotBenchmarkResult:
    config = kwargs.pop("config", ZeroShotConfig(top_k=(1, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning))
        return ZeroShotBenchmark(data, encoders, config=config, progress=False, **kwargs).run()


def test_encoder_forms_mapping_two_branch_and_extractor():
    data = text_dataset()
    tfidf = SklearnExtractor("tfidf", make_pipeline(TfidfVectorizer(), TruncatedSVD(5, random_state=0)))
    result = run(data, {"counts": WordCounter(), "two-branch": TwoBranch(), "tfidf": tfidf})
    counts = result["counts"]
    assert counts.recipe["type"] == "text_encoder" and counts.scores["top1_accuracy"] == 1.0
    assert result["two-branch"].scores == counts.scores
    assert counts.embedding["samples"]["modality"] == "text"
    samples = result["two-branch"].embedding["samples"]
    assert (samples["modality"], samples["branch"], samples["source"]) == ("text", "samples",
                                                                          "TwoBranch.encode_samples")
    assert result["two-branch"].embedding["prompts"]["modality"] == "text"
    assert result["tfidf"].recipe["type"] == "extractor_encoder" and result["tfidf"].recipe["fit_on"] == "samples"
    assert counts.embedding["samples"]["cache_status"] == "bypassed_unsafe_identity"
    assert counts.embedding["samples"]["cache_eligible"] is False
    assert result["tfidf"].embedding["samples"]["cache_status"] == "disabled"


def test_extractor_encoder_fits_on_the_samples_once_and_never_with_labels():
    fits = []

    class Recording(SklearnExtractor):
        def fit(self, X, y=None):
            fits.append((len(X), y))
            return super().fit(X, y)

    data = text_dataset()
    run(data, [Recording("tfidf", TfidfVectorizer())])
    assert fits == [(36, None)]
    with pytest.raises(InputValidationError, match="extractor 'lda' is supervised"):
        ZeroShotBenchmark(data, [SklearnExtractor("lda", TfidfVectorizer(), supervised=True)])
    encoder = ExtractorEncoder(SklearnExtractor("tfidf", TfidfVectorizer()))
    import pickle

    encoder.fit(data.sample_input)  # a remote copy carries the fit (the fit job's artifact travels to both branches)
    copy = pickle.loads(pickle.dumps(encoder))
    assert (copy.encode_prompts(data.flat_prompts) != encoder.encode_prompts(data.flat_prompts)).nnz == 0


def test_ranking_follows_the_configured_metric_and_overlap_is_context_only():
    data = text_dataset()
    result = run(data, {"bad": Shuffled(), "good": WordCounter()})
    assert [r.name for r in result.ranked_results()] == ["good", "bad"]
    good = result["good"]
    assert good.primary_score == good.scores["top1_accuracy"]
    # The overlap context is OverlapIndex called directly on the sample embeddings: auto k of a 12-row class is
    # min(12, max(2, 12 // 5)) = 2 (below min_k 10), seed 0.  Word counts separate the classes (1.0), so the
    # same is checked on noisy counts, whose score lies strictly between 0 and 1.
    _, labels = texts_and_labels()
    assert good.overlap.k_per_class == {"str:food": 2, "str:sport": 2, "str:tech": 2}
    assert good.overlap.score == direct_oi(WordCounter().encode(data.sample_input), label_codes(labels), 2).index
    noisy = run(data, {"noisy": Noisy()})["noisy"].overlap.score
    assert noisy == direct_oi(Noisy().encode(data.sample_input), label_codes(labels), 2).index and 0 < noisy < 1
    macro = run(data, {"bad": Shuffled(), "good": WordCounter()}, config=ZeroShotConfig(metric="macro_f1"))
    assert macro["good"].primary_score == macro["good"].scores["macro_f1"]
    assert macro.primary_metric_name == "macro_f1"


def test_quality_cohort_and_tied_ranks():
    data = text_dataset()
    result = run(data, {"a": WordCounter(), "b": WordCounter(), "bad": Shuffled()},
                 config=ZeroShotConfig(quality_tolerance=0.0))
    assert [r.name for r in result.quality_cohort()] == ["a", "b"]
    assert [r.name for r in result.quality_cohort(tolerance=1.0)] == ["a", "b", "bad"]
    assert result.to_dataframe()["rank"].tolist() == [1, 1, 3]
    with pytest.raises(ConfigError, match=r"quality_cohort.tolerance must be in \[0.0, inf\], got -1.0"):
        result.quality_cohort(-1)


def test_json_round_trip_is_deterministic_and_regenerates_the_report(tmp_path):
    data = text_dataset()
    first = run(data, {"counts": WordCounter(), "bad": Shuffled()})
    second = run(data, {"counts": WordCounter(), "bad": Shuffled()})
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k != "timing"}  # noqa: E731
    assert json.dumps(strip(first), sort_keys=True) == json.dumps(strip(second), sort_keys=True)
    path = first.save_json(tmp_path / "zero_shot.json")
    loaded = ZeroShotBenchmarkResult.load(path)
    assert loaded.to_dict() == first.to_dict()
    assert loaded.to_markdown() == first.to_markdown()
    assert first.save_markdown(tmp_path / "r.md").read_text() == first.to_markdown()
    protocol = loaded.protocol
    assert protocol["prompts"][0] == {"label_key": "str:food", "display": "food", "label_text": "food",
                                      "prompts": ["pasta bread cheese soup salad"]}
    assert protocol["prompts_fingerprint"] == data.fingerprint and loaded.config == ZeroShotConfig(top_k=(1, 2))
    with pytest.raises(SerializationError, match="not a vertebrae zero_shot result"):
        ZeroShotBenchmarkResult.from_dict({"result_type": "retrieval", "schema_version": 1})
    with pytest.raises(SerializationError, match=r"\$: missing key 'protocol'"):
        ZeroShotBenchmarkResult.from_dict({"result_type": "zero_shot", "schema_version": 1})


def test_dataframe_and_markdown_share_field_names():
    result = run(text_dataset(), {"counts": WordCounter(), "bad": Shuffled()})
    frame = result.to_dataframe()
    for column in ("rank", "extractor", "primary_metric", "primary_score", "top1_accuracy", "macro_f1",
                   "balanced_accuracy", "top2_accuracy", "margin_mean", "overlap_score", "embedding_dim",
                   "runtime.classify"):
        assert column in frame.columns, column
    assert frame["extractor"].tolist() == ["counts", "bad"]
    markdown = result.to_markdown()
    for heading in ("## Ranking", "## Per-class scores", "## Confusion matrices", "## Margins", "## Prompts",
                    "## Protocol", "## Encoders", "## Warnings"):
        assert heading in markdown
    assert "never combined with the zero-shot score" in markdown
    assert "| counts | food | 12 | 12 | 1.0000 | 1.0000 | 1.0000 |" in markdown


def test_artifact_keys_move_only_with_what_each_stage_reads():
    data = text_dataset()
    encoder = TextEncoder("counts", WordCounter(), cache_identity="counts-v1")
    base = ZeroShotBenchmark(data, [encoder]).plan().chain_keys[0]
    texts, labels = texts_and_labels()
    source = BenchmarkDataset.from_arrays(texts, labels, identity=IDENTITY)
    edited = ZeroShotDataset.from_prompts(source, {**{k: " ".join(v) for k, v in WORDS.items()}, "tech": "a chip"})
    moved = ZeroShotBenchmark(edited, [encoder]).plan().chain_keys[0]
    assert moved["encode_samples"] == base["encode_samples"] and moved["overlap"] == base["overlap"]
    assert all(moved[s] != base[s] for s in ("encode_prompts", "prototypes", "classify", "assemble"))
    budget = ZeroShotBenchmark(data, [encoder], config=ZeroShotConfig(max_dense_bytes=10**6, block_rows=64))
    assert budget.plan().chain_keys[0] == base
    dot = ZeroShotBenchmark(data, [encoder], config=ZeroShotConfig(similarity="dot")).plan().chain_keys[0]
    assert dot["encode_samples"] == base["encode_samples"] and dot["prototypes"] != base["prototypes"]
    renamed = ZeroShotBenchmark(data, [TextEncoder("other", WordCounter(), cache_identity="counts-v1")])
    assert {k: v for k, v in renamed.plan().chain_keys[0].items() if k != "assemble"} == \
        {k: v for k, v in base.items() if k != "assemble"}


def test_on_error_record_keeps_the_other_encoders():
    class Broken(WordCounter):
        def encode(self, texts):
            raise RuntimeError("model exploded")

    data = text_dataset()
    with pytest.raises(ExtractorError, match="encoder 'broken' failed in encode_samples: RuntimeError"):
        run(data, {"broken": Broken(), "counts": WordCounter()})
    result = run(data, {"broken": Broken(), "counts": WordCounter()}, on_error="record")
    assert [r.name for r in result.ranked_results()] == ["counts"]
    assert result["broken"].error["stage"] == "encode_samples" and result["broken"].primary_score is None
    assert ZeroShotBenchmarkResult.from_json(result.to_json()).to_dict() == result.to_dict()
    assert "failed in the encode_samples stage" in result.to_markdown()
    assert len(result.to_dataframe(include_invalid=True)) == 2


@pytest.mark.parametrize("name, error, says", [
    ("a+b", InputValidationError, "name 'a\\+b' contains '\\+', which result names use before a compression"),
    ("", InputValidationError, "name must be a non-empty string, got ''"),
    (5, InputTypeError, "name must be a non-empty string, got int 5"),
])
def test_a_custom_encoder_name_is_checked_as_benchmark_checks_it(name, error, says):
    """Benchmark refused these extractor names; ZeroShotBenchmark took them from a user's own encoder (or a mapping
    key); now the same check, naming the encoder's position (or key) and type."""
    data = text_dataset()
    custom = TwoBranch()
    custom.name = name
    with pytest.raises(error, match=rf"^encoders\[1\] \(TwoBranch\) {says}"):
        ZeroShotBenchmark(data, [Shuffled(), custom])
    if isinstance(name, str):
        with pytest.raises(error, match=rf"^encoders\[{re.escape(repr(name))}\] {says}"):
            ZeroShotBenchmark(data, {"counts": WordCounter(), name: WordCounter()})


def test_bad_encoders_and_arguments_are_rejected_before_any_work():
    data = text_dataset()
    with pytest.raises(InputTypeError, match="has encode\\(\\) but no name"):
        ZeroShotBenchmark(data, [WordCounter()])
    with pytest.raises(InputTypeError, match="encoders\\[0\\] \\(int\\) is not an encoder"):
        ZeroShotBenchmark(data, [3])
    with pytest.raises(InputValidationError, match="encoders is empty"):
        ZeroShotBenchmark(data, [])
    with pytest.raises(InputValidationError, match="both named 'two-branch'"):
        ZeroShotBenchmark(data, [TwoBranch(), TwoBranch()])
    with pytest.raises(InputValidationError, match="mapping key must equal the encoder's name"):
        ZeroShotBenchmark(data, {"other": TwoBranch()})
    with pytest.raises(InputTypeError, match="dataset must be a ZeroShotDataset"):
        ZeroShotBenchmark(data.source, [TwoBranch()])
    with pytest.raises(ConfigError, match="config must be a ZeroShotConfig"):
        ZeroShotBenchmark(data, [TwoBranch()], config={"metric": "macro_f1"})
    with pytest.raises(InputValidationError, match="exclude_classes names 'music'"):
        ZeroShotBenchmark(data, [TwoBranch()], scoring_config=OverlapScoringConfig(exclude_classes=["music"]))
    with pytest.raises(ConfigError, match="on_error must be one of"):
        ZeroShotBenchmark(data, [TwoBranch()], on_error="ignore")
    with pytest.raises(InputTypeError, match="model must have an encode"):
        TextEncoder("x", object())


class Declared(TwoBranch):
    """A two-branch encoder declaring other kinds; it records every call."""

    def __init__(self, name, samples, prompts):
        super().__init__()
        self.name, self.modalities, self.calls = name, {"samples": samples, "prompts": prompts}, []

    def encode_samples(self, inputs):
        self.calls.append("samples")
        return super().encode_samples(inputs)

    def encode_prompts(self, prompts):
        self.calls.append("prompts")
        return super().encode_prompts(prompts)


def test_an_encoder_of_the_wrong_kind_is_refused_before_any_encoder_runs():
    """Before: the first encoder ran on both branches, then an image encoder failed on the texts."""
    data, first = text_dataset(), Declared("first", "text", "text")
    with pytest.raises(InputValidationError, match=r"encoders\[1\] \('clip', Declared\) samples branch embeds image, "
                                                   r"but the source dataset holds text; pass an encoder that reads "
                                                   r"text, or build the source dataset from image with "
                                                   r"BenchmarkDataset.from_images"):
        ZeroShotBenchmark(data, [first, Declared("clip", "image", "text")]).run()
    with pytest.raises(InputValidationError, match=r"encoders\[1\] .* prompts branch embeds audio, but "
                                                   r"dataset.flat_prompts holds text; pass an encoder that reads text$"):
        ZeroShotBenchmark(data, [first, Declared("odd", "text", "audio")]).run()
    assert first.calls == []


def test_a_declaration_typo_is_refused_and_a_kind_of_ones_own_is_kept():
    """Before: ``{"samples": "img"}`` or a branch named ``"sample"`` was accepted, so that branch went unchecked.
    A near-miss of a checked kind or an unknown branch is refused (precomputed encoders too); other kinds
    (``video``) are the user's vocabulary, recorded and not checked."""
    data = text_dataset()
    with pytest.raises(InputValidationError, match=r"^encoders\[0\] \('typo', Declared\) modalities\['samples'\] is "
                                                   r"'img', which reads like 'image'"):
        ZeroShotBenchmark(data, [Declared("typo", "img", "text")])
    branch = Declared("branch", "text", "text")
    branch.modalities = {"sample": "text"}
    with pytest.raises(InputValidationError, match=r"modalities names branch 'sample'; a zero-shot encoder's branches "
                                                   r"are \['samples', 'prompts'\]$"):
        ZeroShotBenchmark(data, [branch])
    frozen = PrecomputedZeroShotEncoder("frozen", np.ones((36, 4)), np.ones((4, 4)), modalities={"samples": "Text"})
    with pytest.raises(InputValidationError, match=r"modalities\['samples'\] is 'Text', which reads like 'text'"):
        ZeroShotBenchmark(data, [frozen])
    ZeroShotBenchmark(data, [Declared("own", "video", "text")])  # accepted: not a near-miss, not checked


def test_bad_encoder_output_names_the_encoder_and_branch():
    class WrongRows(WordCounter):
        def encode(self, texts):
            return super().encode(texts)[:-1]

    with pytest.raises(InputValidationError, match="samples embeddings from encoder 'wrong' has 35 rows but the "
                                                   "dataset has 36"):
        run(text_dataset(), {"wrong": WrongRows()})


def test_a_collapsed_sample_branch_is_an_encoder_error():
    class Collapsed(WordCounter):
        def encode(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32)

    with pytest.raises(ExtractorError, match="encoder 'flat' returned the same sample embedding for every row"):
        run(text_dataset(), {"flat": Collapsed()})


def test_trivial_top_k_is_warned_and_recorded():
    with pytest.warns(DataWarning, match="top-k accuracy for k = \\[5\\] is 1 by construction with 3 classes"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoringWarning)
        result = ZeroShotBenchmark(text_dataset(), {"counts": WordCounter()}, progress=False).run()
    assert result["counts"].top_k_accuracies["top5_accuracy"] == 1.0 and result.warnings


def test_runs_on_an_explicit_local_runner_and_import_stays_light():
    result = run(text_dataset(), {"counts": WordCounter()})
    again = ZeroShotBenchmark(text_dataset(), {"counts": WordCounter()}, config=ZeroShotConfig(top_k=(1, 2)),
                              progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoringWarning)
        assert again.run(LocalRunner(progress=False))["counts"].scores == result["counts"].scores
    code = ("import sys, vertebrae; print(sorted(m for m in ('torch', 'sentence_transformers', 'sklearn', 'pandas') "
            "if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


# The table of docs/zero_shot.md: what each stage's key hashes besides its stage name and code version.
KEY_TABLE = {
    "fit": ((), {"inputs", "extractor"}, set()),
    "encode_samples": (("fit",), {"inputs", "extractor"}, {"numpy"}),
    "encode_prompts": (("fit",), {"prompts", "inputs", "extractor"}, {"numpy"}),
    "compress": (("encode_samples", "encode_prompts"), {"extractor"}, {"numpy", "scikit-learn"}),
    "prototypes": (("encode_prompts", "compress"), {"prompts"}, set()),
    "classify": (("encode_samples", "prototypes", "compress"), {"targets"}, set()),
    "overlap": (("encode_samples", "compress"), {"targets"}, {"overlapindex"}),
    "assemble": (("encode_samples", "encode_prompts", "prototypes", "classify", "overlap", "compress"),
                 {"name", "extractor", "targets"}, set()),
}


def test_every_zero_shot_stage_declares_exactly_the_documented_key_parts():
    from vertebrae.execution import registry

    declared = {d.name: ((*d.reads, *d.optional_reads), set(d.context), set(d.packages))
                for d in registry.pipeline_stages("zero_shot")}
    assert declared == KEY_TABLE
    benchmark = ZeroShotBenchmark(text_dataset(), [TextEncoder("counts", WordCounter()),
                                                   SklearnExtractor("tfidf", TfidfVectorizer())],
                                  config=ZeroShotConfig(max_dense_bytes=10**6, block_rows=64))
    settings, (counts, tfidf) = benchmark.settings, benchmark.plan().chains
    configs = {d.name: d.enabled_config(settings, counts)[1] for d in registry.pipeline_stages("zero_shot")}
    assert [d.enabled_config(settings, chain)[0] for chain in (counts, tfidf)
            for d in registry.pipeline_stages("zero_shot") if d.name == "fit"] == [False, True]  # encoders with fit
    assert configs == {"fit": None, "encode_samples": None, "encode_prompts": None, "compress": None,
                       "prototypes": {"similarity": "cosine"},
                       "classify": {"similarity": "cosine"}, "overlap": {"overlap": OverlapScoringConfig().fingerprint()},
                       "assemble": {"metric": "top1_accuracy", "top_k": [1, 5]}}


def test_jobs_pickle_and_run_on_fresh_copies_as_a_remote_worker_would():
    """Each job runs on its own unpickled context, with pickled inputs: what a distributed runner does."""
    import pickle

    from vertebrae.execution.jobs import run_job

    data = text_dataset()
    benchmark = ZeroShotBenchmark(data, [SklearnExtractor("tfidf", TfidfVectorizer()), TwoBranch()],
                                  config=ZeroShotConfig(top_k=(1, 2)), progress=False)
    context = benchmark._context()
    plan = benchmark.plan(context)
    artifacts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoringWarning)
        for job in plan.jobs:
            worker_context, worker_job = pickle.loads(pickle.dumps((context, job)))
            inputs = {stage: pickle.loads(pickle.dumps(artifacts[key])) for stage, key in worker_job.needs.items()}
            artifacts[job.key] = run_job(worker_job, inputs, worker_context)[0]
        local = benchmark.run()
    for chain, keys in zip(plan.chains, plan.chain_keys):
        remote = artifacts[keys["assemble"]].to_dict()
        expected = local[chain.name].to_dict()
        for branch in ("samples", "prompts"):
            for fact in ("cache_eligible", "cache_status"):
                expected["embedding"][branch].pop(fact)
        assert {**remote, "artifact_keys": {}} == {**expected, "artifact_keys": {}}


def test_zero_shot_results_belong_to_the_result_family(tmp_path):
    """load_result, the HTML page and `vertebrae compare` work for zero-shot results like the others."""
    from vertebrae.cli.main import main
    from vertebrae.families.labeled.results import load_result

    data = text_dataset()
    first = run(data, {"counts": WordCounter(), "bad": Shuffled()})
    path = first.save_json(tmp_path / "a.json")
    assert isinstance(load_result(path), ZeroShotBenchmarkResult)
    page = first.to_html()
    assert page.startswith("<!DOCTYPE html>") and "Top candidate: counts" in page and "pasta bread" in page
    first.save_json(tmp_path / "b.json")
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", "json"]) == 0
    class ScrambledCounts(Shuffled):
        name = "counts"

    worse = run(data, [ScrambledCounts(), Shuffled()])
    worse.save_json(tmp_path / "c.json")
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 1
