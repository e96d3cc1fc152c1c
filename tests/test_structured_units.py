"""Structured unit outputs: word units on MiniLM's real token states, spatial and slot units on arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, HFTextExtractor, InputValidationError,
                           PrecomputedExtractor, SeparatixConfig, UnitAnnotations, save_unit_artifact)
from vertebrae.extractors.huggingface import token_states

IDENTITY = DatasetIdentity.declared("tagged-sentences", "1")
OFF = SeparatixConfig(enabled=False)
NAMES = ["Alice", "Bob", "Carmen", "Dmitri", "Esther", "Farid"]
CITIES = ["Paris", "Lagos", "Osaka", "Lima", "Oslo", "Quito"]
DAYS = ["Monday", "Tuesday", "Friday", "Sunday"]


def tagged_sentences(n: int = 24, seed: int = 0):
    """Sentences "<name> flew to <city> on <day>"; one unit per tagged word (unit ids repeat across sentences)."""
    rng = np.random.default_rng(seed)
    texts, records, words = [], [], []
    for parent in range(n):
        name, city, day = rng.choice(NAMES), rng.choice(CITIES), rng.choice(DAYS)
        verb = rng.choice(["flew to", "drove to", "moved to"])
        text = f"{name} {verb} {city} on {day}"
        texts.append(text)
        for unit, (word, label) in enumerate(((name, "PERSON"), (city, "CITY"), (day, "DAY"))):
            start = text.index(word)
            records.append({"parent": parent, "unit_id": f"w{unit}", "chars": (start, start + len(word)),
                            "label": label})
            words.append(text[:start].count(" "))  # the word's index in the sentence
    return texts, records, words


@pytest.fixture(scope="module")
def tagged(minilm_path):
    texts, records, words = tagged_sentences()
    extractor = HFTextExtractor("minilm", minilm_path, device="cpu", progress=False)
    states, offsets = token_states(extractor, texts)
    return texts, records, words, states, offsets


def reference_rows(minilm_path, texts, records, words):
    """Independent: plain transformers, tokens chosen by word_ids() (not by character offsets), mean-pooled."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(str(minilm_path)), AutoModel.from_pretrained(str(minilm_path))
    rows = []
    with torch.no_grad():
        for record, word in zip(records, words):
            encoded = tokenizer(texts[record["parent"]], return_tensors="pt")
            hidden = model.eval()(**encoded).last_hidden_state[0].numpy()
            chosen = [i for i, w in enumerate(encoded.word_ids()) if w == word]
            rows.append(hidden[chosen].mean(axis=0))
    return np.array(rows)


def test_word_units_on_minilm_token_states_match_an_independent_reference_and_plain_benchmark(tagged, minilm_path,
                                                                                            tmp_path):
    texts, records, words, states, offsets = tagged
    units = UnitAnnotations.from_records(records, task_family="token")
    dataset = units.materialize(states, offsets=offsets, recipe="mean", identity=IDENTITY)
    reference = reference_rows(minilm_path, texts, records, words)
    np.testing.assert_allclose(dataset.embeddings, reference, atol=1e-4)
    assert units.global_ids[:4] == ["0:w0", "0:w1", "0:w2", "1:w0"]
    result = Benchmark(dataset, [PrecomputedExtractor("minilm-tokens")], separatix_config=OFF).run()
    plain = Benchmark(BenchmarkDataset.from_embeddings(dataset.embeddings, [r["label"] for r in records],
                                                       identity=IDENTITY, groups=[r["parent"] for r in records]),
                      [PrecomputedExtractor("minilm-tokens")], separatix_config=OFF).run()
    assert result.extractor_results[0].overlap.score == pytest.approx(plain.extractor_results[0].overlap.score,
                                                                      abs=1e-12)
    assert result.extractor_results[0].overlap.score > 0.8  # names, cities and days are far apart in MiniLM
    structure = json.loads(result.to_json())["dataset_summary"]["structure"]
    assert structure["task_family"] == "token" and structure["alignment_mode"] == "chars"
    assert structure["alignment_recipe"] == "mean" and structure["n_units"] == 72
    row = result.rows()[0]
    assert (row["task_family"], row["alignment_mode"], row["alignment_recipe"]) == ("token", "chars", "mean")
    assert "task_family" not in plain.rows()[0]
    manifest = json.loads(save_unit_artifact(dataset, tmp_path / "units").read_text())
    assert (manifest["task_family"], manifest["alignment_mode"], manifest["alignment_recipe"]) == \
        ("token", "chars", "mean")
    np.testing.assert_array_equal(np.load(tmp_path / "units" / "rows.npy"), dataset.embeddings)
    assert dataset.groups.summary()["n_groups"] == 24


def test_spatial_and_slot_units_pool_the_named_cells():
    rng = np.random.default_rng(0)
    maps = [rng.normal(size=(3, 4, 5)) for _ in range(2)]
    mask = np.zeros((4, 5), dtype=bool)
    mask[3, :] = True
    boxes = UnitAnnotations.from_records([
        {"parent": 0, "unit_id": "a", "box": (0, 0, 2, 2), "label": ["car"]},
        {"parent": 0, "unit_id": "b", "box": (1, 1, 4, 3), "label": ["car", "red"]},
        {"parent": 1, "unit_id": "a", "box": (2, 2, 3, 5), "label": ["red"]},
        {"parent": 1, "unit_id": "b", "box": (0, 4, 4, 5), "label": ["car"]},
    ], task_family="region", target_type="multi_label")
    rows = boxes.materialize(maps, recipe="max", identity=IDENTITY).embeddings
    np.testing.assert_allclose(rows[1], maps[0][:, 1:4, 1:3].max(axis=(1, 2)))
    np.testing.assert_allclose(rows[2], maps[1][:, 2:3, 2:5].max(axis=(1, 2)))
    depth = UnitAnnotations.from_records([{"parent": p, "unit_id": "far", "mask": mask, "label": float(p)}
                                          for p in (0, 1)] + [{"parent": p, "unit_id": "near", "mask": ~mask,
                                                               "label": 2.0 + p} for p in (0, 1)],
                                         task_family="depth", target_type="regression")
    depth_rows = depth.materialize(maps, identity=IDENTITY)
    np.testing.assert_allclose(depth_rows.embeddings[0], maps[0][:, 3, :].mean(axis=1))
    assert depth_rows.target_type == "regression"
    points = UnitAnnotations.from_records([{"parent": 1, "unit_id": 0, "point": (3, 4), "label": "x"},
                                           {"parent": 0, "unit_id": 0, "point": (0, 0), "label": "y"},
                                           {"parent": 0, "unit_id": 1, "point": (1, 0), "label": "x"},
                                           {"parent": 1, "unit_id": 1, "point": (0, 1), "label": "y"}],
                                          task_family="keypoint")
    np.testing.assert_allclose(points.materialize(maps, identity=IDENTITY).embeddings[0], maps[1][:, 3, 4])
    assert points.structure("mean", 2)["alignment_recipe"] == "select"
    slots = UnitAnnotations.from_records([{"parent": 0, "unit_id": s, "slot": s, "label": s % 2} for s in range(4)],
                                         task_family="latent")
    sequence = rng.normal(size=(4, 6))
    np.testing.assert_allclose(slots.materialize([sequence], identity=IDENTITY).embeddings, sequence)
    frames = UnitAnnotations.from_records([{"parent": 0, "unit_id": u, "span": (u, u + 2), "label": u % 2}
                                           for u in range(4)], task_family="frame")
    np.testing.assert_allclose(frames.materialize([np.vstack([sequence, sequence])], recipe="last",
                                                  identity=IDENTITY).embeddings, sequence[[1, 2, 3, 0]])


@pytest.mark.parametrize("records, kwargs, message", [
    ([{"parent": 0, "unit_id": "a", "span": (0, 1), "label": 1}, {"parent": 0, "unit_id": "a", "span": (1, 2),
                                                                   "label": 2}],
     {}, r"records\[1\] repeats unit_id 'a' of parent 0 \(first at records\[0\]\)"),
    ([{"parent": 0, "unit_id": "a", "span": (0, 1), "label": 1}, {"parent": 0, "unit_id": "b", "slot": 1,
                                                                   "label": 2}],
     {}, r"records\[1\] locates its unit by 'slot' but earlier units use 'span'"),
    ([{"parent": 0, "unit_id": "a", "label": 1}], {}, r"records\[0\] needs parent, unit_id, label and exactly one"),
    ([{"parent": -1, "unit_id": "a", "span": (0, 1), "label": 1}], {}, "parent must be a non-negative int"),
    ([{"parent": 0, "unit_id": "a", "span": (0, 1), "label": 1}], {"task_family": "audio"}, "task_family must be"),
])
def test_bad_unit_records_are_rejected(records, kwargs, message):
    with pytest.raises(InputValidationError, match=message):
        UnitAnnotations.from_records(records, **{"task_family": "token", **kwargs})


def test_bad_alignment_is_rejected_naming_the_unit():
    sequence = [np.zeros((4, 3)), np.ones((4, 3))]
    span = UnitAnnotations.from_records([{"parent": 1, "unit_id": "x", "span": (2, 9), "label": 1}],
                                        task_family="token")
    with pytest.raises(InputValidationError, match=r"unit '1:x': span \(2, 9\) is empty or outside the 4 positions"):
        span.materialize(sequence, identity=IDENTITY)
    with pytest.raises(InputValidationError, match="unit '1:x' names parent 1 but there are 1 parent outputs"):
        span.materialize(sequence[:1], identity=IDENTITY)
    chars = UnitAnnotations.from_records([{"parent": 0, "unit_id": "x", "chars": (0, 3), "label": 1}],
                                         task_family="token")
    with pytest.raises(InputValidationError, match="need offsets="):
        chars.materialize(sequence[:1], identity=IDENTITY)
    box = UnitAnnotations.from_records([{"parent": 0, "unit_id": "x", "box": (0, 0, 9, 1), "label": 1}],
                                       task_family="region")
    with pytest.raises(InputValidationError, match=r"outputs\[0\] must be a finite \(D, H, W\) array"):
        box.materialize(sequence, identity=IDENTITY)
    with pytest.raises(InputValidationError, match=r"unit '0:x': box \(0, 0, 9, 1\) is empty or outside the 2x2"):
        box.materialize([np.zeros((3, 2, 2))], identity=IDENTITY)
    with pytest.raises(InputValidationError, match="recipe must be one of"):
        box.materialize([np.zeros((3, 2, 2))], recipe="sum", identity=IDENTITY)
