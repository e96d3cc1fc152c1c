"""Multi-modal fields: image (a real torch CNN), text (TF-IDF + SVD) and a fused reader; fidelity per field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline

from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, FieldExtractor,
                           InputTypeError, InputValidationError, SeparatixConfig, SklearnExtractor, TorchExtractor)

from .conftest import gaussian_classes
from .shapes import shape_images, tiny_cnn

IDENTITY = DatasetIdentity.declared("shapes-captions", "1")
OFF = SeparatixConfig(enabled=False)


def captions(larger: np.ndarray, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    fillers = ["photo", "picture", "drawing", "sketch"]
    return [f"a {rng.choice(fillers)} where the {big} is large and the {'disk' if big == 'square' else 'square'} "
            f"is {rng.choice(['small', 'tiny'])}" for big in larger]


def fused_features(fields: dict) -> np.ndarray:
    """Mean brightness per image row plus caption length: a fusion of both fields."""
    image = np.asarray(fields["image"]).mean(axis=(1, 3))
    length = np.array([[len(t.split())] for t in fields["caption"]], dtype=np.float64)
    return np.hstack([image, length])


@pytest.fixture(scope="module")
def data():
    images, _, _, larger = shape_images(n=40, seed=3)
    return images, captions(larger), larger


def text_model():
    return make_pipeline(TfidfVectorizer(), TruncatedSVD(4, random_state=0))


def test_each_field_reader_scores_like_a_plain_benchmark_on_its_field(data):
    images, texts, larger = data
    dataset = BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger,
                                               modalities={"image": "image", "caption": "text"}, identity=IDENTITY)
    model = tiny_cnn(pooled=True)
    readers = [FieldExtractor(TorchExtractor("cnn", model, device="cpu"), "image"),
               FieldExtractor(SklearnExtractor("tfidf", text_model()), "caption"),
               FieldExtractor(CallableExtractor("fused", fused_features, cache_identity="fused-v1"),
                              ("image", "caption"))]
    result = Benchmark(dataset, readers, separatix_config=OFF).run()
    by_name = {r.name: r for r in result.extractor_results}
    plain_image = Benchmark(BenchmarkDataset.from_arrays(images, larger, identity=IDENTITY),
                            [TorchExtractor("cnn", model, device="cpu")], separatix_config=OFF).run()
    plain_text = Benchmark(BenchmarkDataset.from_arrays(texts, larger, identity=IDENTITY),
                           [SklearnExtractor("tfidf", text_model())], separatix_config=OFF).run()
    fused_rows = fused_features({"image": images, "caption": texts})
    plain_fused = Benchmark(BenchmarkDataset.from_embeddings(fused_rows, larger, identity=IDENTITY),
                            [CallableExtractor("fused", lambda X: X)], separatix_config=OFF).run()
    for name, plain in (("cnn", plain_image), ("tfidf", plain_text), ("fused", plain_fused)):
        assert by_name[name].overlap.score == pytest.approx(plain.extractor_results[0].overlap.score, abs=1e-12)
    assert by_name["cnn"].embedding["source"] == "image"
    assert by_name["tfidf"].embedding["source"] == "text"
    assert by_name["fused"].embedding["source"] == "fused"
    assert by_name["fused"].embedding["input_fields"] == ["image", "caption"]
    assert by_name["cnn"].recipe["input_fields"] == ["image"]
    data_json = json.loads(result.to_json())
    assert data_json["dataset_summary"]["structure"] == {
        "family": "multimodal", "fields": ["image", "caption"], "modalities": {"image": "image", "caption": "text"},
        "aligned_field": "image"}
    assert "| aligned_field | image |" in result.to_markdown()


def test_field_choice_changes_the_content_hash_and_the_extractor_key(data):
    images, texts, larger = data
    a = BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger,
                                         modalities={"image": "image", "caption": "text"},
                                         identity=DatasetIdentity.content_hash("mm"))
    b = BenchmarkDataset.from_multimodal({"image": images, "caption": texts[::-1]}, larger,
                                         modalities={"image": "image", "caption": "text"},
                                         identity=DatasetIdentity.content_hash("mm"))
    c = BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger,
                                         modalities={"image": "image", "caption": "label"},
                                         identity=DatasetIdentity.content_hash("mm"))
    assert len({a.inputs_fingerprint(), b.inputs_fingerprint(), c.inputs_fingerprint()}) == 3
    assert a.identity.fingerprint != b.identity.fingerprint
    cnn = TorchExtractor("cnn", tiny_cnn(pooled=True), device="cpu")
    assert FieldExtractor(cnn, "image").identity() != FieldExtractor(cnn, "other").identity()


def test_bad_fields_are_rejected_before_anything_runs(data):
    images, texts, larger = data
    modalities = {"image": "image", "caption": "text"}
    with pytest.raises(InputValidationError, match="modalities has no modality for field 'caption'"):
        BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger, modalities={"image": "image"},
                                         identity=IDENTITY)
    with pytest.raises(InputValidationError, match="modalities names fields \\['audio'\\] that inputs lacks"):
        BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger,
                                         modalities={**modalities, "audio": "audio"}, identity=IDENTITY)
    with pytest.raises(InputValidationError, match="every field needs one value per sample"):
        BenchmarkDataset.from_multimodal({"image": images, "caption": texts[:-1]}, larger, modalities=modalities,
                                         identity=IDENTITY)
    for missing in (texts[:2] + [None] + texts[3:], np.array(texts[:2] + [None] + texts[3:], dtype=object)):
        # a list or a NumPy object array (whose shape hid its None before)
        with pytest.raises(InputValidationError, match=r"inputs\['caption'\] has no value \(None\) for samples \[2\]"):
            BenchmarkDataset.from_multimodal({"image": images, "caption": missing}, larger, modalities=modalities,
                                             identity=IDENTITY)
    with pytest.raises(InputValidationError, match="aligned_field 'audio' is not a field"):
        BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger, modalities=modalities,
                                         aligned_field="audio", identity=IDENTITY)
    dataset = BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger, modalities=modalities,
                                               identity=IDENTITY)
    with pytest.raises(InputValidationError, match=r"extractors\[0\] \('tfidf'\) declares no input fields"):
        Benchmark(dataset, [SklearnExtractor("tfidf", text_model())])
    with pytest.raises(InputValidationError, match=r"reads fields \['audio'\] that the dataset lacks"):
        Benchmark(dataset, [FieldExtractor(SklearnExtractor("tfidf", text_model()), "audio")])
    plain = BenchmarkDataset.from_arrays(texts, larger, identity=IDENTITY)
    with pytest.raises(InputValidationError, match="but the dataset has no fields"):
        Benchmark(plain, [FieldExtractor(SklearnExtractor("tfidf", text_model()), "caption")])
    with pytest.raises(InputTypeError, match="inputs must be a non-empty mapping"):
        BenchmarkDataset.from_multimodal([images], larger, modalities=modalities, identity=IDENTITY)
    with pytest.raises(InputValidationError, match="fields must be distinct non-empty field names"):
        FieldExtractor(SklearnExtractor("tfidf", text_model()), ("caption", "caption"))


def test_a_field_reader_called_directly_names_its_fields(data):
    """FieldExtractor(ext, 3) raised "'int' object is not iterable"; transform on inputs without the field a
    KeyError."""
    with pytest.raises(InputTypeError, match=r"fields must be a field name or a sequence of field names, got int"):
        FieldExtractor(CallableExtractor("n", np.asarray), 3)
    images, texts, larger = data
    dataset = BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger,
                                               modalities={"image": "image", "caption": "text"}, identity=IDENTITY)
    reader = FieldExtractor(CallableExtractor("fused", fused_features), ("image", "caption", "audio"))
    with pytest.raises(InputValidationError, match=r"'fused' reads fields \['audio'\] that X lacks; it has "
                                                   r"\['image', 'caption'\]"):
        reader.transform(dataset.inputs)
    with pytest.raises(InputValidationError, match=r"reads fields \['image', 'caption', 'audio'\] that X lacks; it "
                                                   r"has \['a'\]"):
        reader.transform({"a": 1})
    both = FieldExtractor(CallableExtractor("fused", fused_features), ("image", "caption"))
    np.testing.assert_array_equal(both.transform({"image": images, "caption": texts}), both.transform(dataset.inputs))


def test_named_outputs_pass_through_a_field_reader(data):
    images, texts, larger = data
    dataset = BenchmarkDataset.from_multimodal({"image": images, "caption": texts}, larger,
                                               modalities={"image": "image", "caption": "text"}, identity=IDENTITY)
    model = tiny_cnn(pooled=True)
    two = TorchExtractor("cnn", model, device="cpu", outputs=("full", "half"),
                         output_fn=lambda out: {"full": out, "half": out[:, :4]})
    reader = FieldExtractor(two, "image")
    assert not hasattr(FieldExtractor(TorchExtractor("one", model, device="cpu"), "image"), "output_names")
    result = Benchmark(dataset, [reader], separatix_config=OFF).run()
    assert [r.name for r in result.extractor_results] == ["cnn:full", "cnn:half"]
    assert {r.embedding["output_name"]: r.embedding["source"] for r in result.extractor_results} == {
        "full": "image", "half": "image"}


def test_the_extractors_table_names_each_outputs_branch_or_fused_source():
    """``embedding["source"]`` and ``input_fields`` were stored but in no report."""
    X, y = gaussian_classes(n_per_class=20, n_classes=2, dim=4)
    dataset = BenchmarkDataset.from_multimodal({"num": X, "caption": [f"row {i}" for i in range(len(y))]}, y,
                                               modalities={"num": "tabular", "caption": "text"}, identity=IDENTITY)
    both = lambda f: np.hstack([f["num"], [[len(t)] for t in f["caption"]]])  # noqa: E731
    readers = [FieldExtractor(CallableExtractor("num", np.asarray, cache_identity="num-v1"), "num"),
               FieldExtractor(CallableExtractor("both", both, cache_identity="both-v1"), ("num", "caption"))]
    md = Benchmark(dataset, readers, separatix_config=OFF).run().to_markdown()
    assert "| extractor | type | source | dim |" in md
    assert "| num | callable | tabular (num) | 4 |" in md and "| both | callable | fused (num, caption) | 5 |" in md
    plain = Benchmark(BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY), [CallableExtractor("id", np.asarray)],
                      separatix_config=OFF).run().to_markdown()
    assert "| extractor | type | dim |" in plain
