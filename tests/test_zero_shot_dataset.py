"""ZeroShotDataset: prompt declarations, typed labels, the protocol fingerprint and every rejection."""

from __future__ import annotations

import numpy as np
import pytest

from vertebrae import BenchmarkDataset, DatasetIdentity, ZeroShotDataset
from vertebrae.errors import InputTypeError, InputValidationError

IDENTITY = DatasetIdentity.declared("zero-shot-dataset", "1")
TEXTS = ["good day", "bad day", "fine", "awful", "great", "terrible"]


def source(labels=("positive", "negative") * 3, texts=TEXTS) -> BenchmarkDataset:
    return BenchmarkDataset.from_arrays(list(texts), list(labels), identity=IDENTITY)


def test_templates_render_per_class_in_catalog_order():
    data = ZeroShotDataset.from_templates(source(), ["a {label} tweet", "{label} sentiment"])
    # catalog order is sorted by key: negative before positive
    assert data.prompts == (("a negative tweet", "negative sentiment"), ("a positive tweet", "positive sentiment"))
    assert data.flat_prompts == ["a negative tweet", "negative sentiment", "a positive tweet", "positive sentiment"]
    assert data.prompt_classes == [0, 0, 1, 1]
    assert [p["label_key"] for p in data.declaration()] == ["str:negative", "str:positive"]
    assert data.summary()["n_prompts"] == 4 and data.summary()["templates"] == ["a {label} tweet", "{label} sentiment"]


def test_typed_labels_stay_distinct_classes_with_catalog_display_text():
    labels = [1, "1", True, 1, "1", True]
    data = ZeroShotDataset.from_templates(source(labels), ["class {label}"])
    assert data.n_classes == 3
    assert sorted(data.flat_prompts) == ["class 1 (int)", "class 1 (str)", "class True"]


def test_label_text_overrides_the_display_text_with_typed_keys():
    labels = [0, 1, 0, 1, 0, 1]
    data = ZeroShotDataset.from_templates(source(labels), ["a {label} tweet"], label_text={0: "sad", 1: "happy"})
    assert data.flat_prompts == ["a sad tweet", "a happy tweet"]
    with pytest.raises(InputValidationError, match="'1' \\(str\\), which is not a class"):
        ZeroShotDataset.from_templates(source(labels), ["a {label}"], label_text={"1": "happy"})
    with pytest.raises(InputValidationError, match="non-empty string"):
        ZeroShotDataset.from_templates(source(labels), ["a {label}"], label_text={1: " "})
    with pytest.raises(InputValidationError, match=r"label_text gives no text for class\(es\) \['2'\]; give every"):
        ZeroShotDataset.from_templates(source([0, 1, 2] * 2), ["a {label}"], label_text={0: "sad", 1: "happy"})


def test_rendered_prompts_as_mapping_or_pairs():
    data = ZeroShotDataset.from_prompts(source(), {"positive": ["a happy tweet", "joy"], "negative": "a sad tweet"})
    assert data.prompts == (("a sad tweet",), ("a happy tweet", "joy")) and data.templates is None
    pairs = ZeroShotDataset.from_prompts(source(), [("negative", "a sad tweet"), ("positive", ["a happy tweet", "joy"])])
    assert pairs.fingerprint == data.fingerprint


def test_fingerprint_covers_the_complete_ordered_declaration():
    base = ZeroShotDataset.from_prompts(source(), {"positive": ["a", "b"], "negative": ["c"]})
    same = ZeroShotDataset.from_prompts(source(), {"negative": ["c"], "positive": ["a", "b"]})
    reordered = ZeroShotDataset.from_prompts(source(), {"positive": ["b", "a"], "negative": ["c"]})
    edited = ZeroShotDataset.from_prompts(source(), {"positive": ["a", "b "], "negative": ["c"]})
    assert base.fingerprint == same.fingerprint  # classes always in catalog order
    assert len({base.fingerprint, reordered.fingerprint, edited.fingerprint}) == 3
    assert base.prompts_fingerprint() == base.fingerprint


@pytest.mark.parametrize("prompts, message", [
    ({"positive": ["a"]}, r"no entry for class\(es\) \['negative'\]"),
    ({"positive": ["a"], "negative": []}, "class 'negative' has no prompt"),
    ({"positive": ["a"], "negative": ["  "]}, "prompt 0 of class 'negative' is '  '"),
    ({"positive": ["a", "a"], "negative": ["b"]}, "class 'positive' lists the prompt 'a' twice"),
    ({"positive": ["a"], "negative": ["b", "a"]},
     r"prompt 'a' is declared for classes 'negative' \(str\) and 'positive' \(str\)"),
    ({"positive": ["a"], "negative": ["b"], "neutral": ["c"]}, "names 'neutral' \\(str\\), which is not a class"),
])
def test_bad_prompt_declarations_are_rejected(prompts, message):
    with pytest.raises(InputValidationError, match=message):
        ZeroShotDataset.from_prompts(source(), prompts)


def test_templates_follow_str_format_for_the_label_field():
    """Before: '{label!s}' and '{label:>6}' were rejected as not containing {label}."""
    plain = ZeroShotDataset.from_templates(source(), ["a {label}"])
    assert ZeroShotDataset.from_templates(source(), ["a {label!s}"]).flat_prompts == plain.flat_prompts
    padded = ZeroShotDataset.from_templates(source(), ["a {label:>10}"])
    assert padded.flat_prompts == ["a   negative", "a   positive"]
    assert padded.fingerprint != plain.fingerprint
    for template, message in (("a {label.upper}", r"names \{label.upper\}; use only the \{label\} placeholder"),
                              ("a {label} {}", r"names \{\}"), ("a {label", "cannot be rendered .ValueError"),
                              ("{{label}}", "must be a string containing the placeholder")):
        with pytest.raises(InputValidationError, match=message):
            ZeroShotDataset.from_templates(source(), [template])


def test_template_that_does_not_name_the_label_gives_one_prompt_to_two_classes():
    with pytest.raises(InputValidationError, match=r"templates\[1\] = 'a tweet' must be a string containing"):
        ZeroShotDataset.from_templates(source(), ["a {label}", "a tweet"])
    with pytest.raises(InputValidationError, match=r"'a x tweet' is declared for classes 0 \(int\) and 1 \(int\)"):
        ZeroShotDataset.from_templates(source([0, 1] * 3), ["a {label} tweet"], label_text={0: "x", 1: "x"})
    with pytest.raises(InputValidationError, match="cannot be rendered"):
        ZeroShotDataset.from_templates(source(), ["a {label} {other}"])
    with pytest.raises(InputTypeError, match="non-empty list of strings"):
        ZeroShotDataset.from_templates(source(), "a {label}")
    with pytest.raises(InputTypeError, match="non-empty list of strings"):
        ZeroShotDataset.from_templates(source(), [])


def test_a_prompt_collision_names_two_classes_with_the_same_display_apart():
    """Before: 1 displays as '1 (int)' beside '1', as does the label '1 (int)', and the message read
    "classes '1 (int)' and '1 (int)'"."""
    with pytest.raises(InputValidationError, match=r"declared for classes 1 \(int\) and '1 \(int\)' \(str\)"):
        ZeroShotDataset.from_templates(source([1, "1", "1 (int)"] * 2), ["a {label}"])


def test_source_must_be_a_single_label_benchmark_dataset():
    multi = BenchmarkDataset.from_embeddings(np.eye(4), [["a"], ["b"], ["a", "b"], ["b"]], identity=IDENTITY,
                                             target_type="multi_label")
    with pytest.raises(InputValidationError, match="multi_label targets; zero-shot classification needs single-label"):
        ZeroShotDataset.from_templates(multi, ["a {label}"])
    with pytest.raises(InputTypeError, match="source_dataset must be a BenchmarkDataset"):
        ZeroShotDataset.from_templates(TEXTS, ["a {label}"])
    with pytest.raises(InputTypeError, match="mapping of class label"):
        ZeroShotDataset.from_prompts(source(), ["a", "b"])
