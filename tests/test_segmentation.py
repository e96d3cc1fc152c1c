"""Dense segmentation tokens from a real torch CNN on generated shape images; fidelity with a plain benchmark."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, InputTypeError, InputValidationError,
                           PrecomputedExtractor, SegmentationDataset, SeparatixConfig, spatial_feature_map)

from vertebrae.inputs.datasets import build_groups

from .shapes import BACKGROUND, CLASS_METADATA, DISK, SQUARE, shape_images, tiny_cnn

IDENTITY = DatasetIdentity.declared("shapes", "1")


@pytest.fixture(scope="module")
def shapes():
    images, semantic, instance, _ = shape_images(n=24, seed=0)
    dataset = SegmentationDataset.from_arrays(images=images, semantic_masks=semantic, instance_masks=instance,
                                              class_metadata=CLASS_METADATA, identity=IDENTITY)
    return dataset, spatial_feature_map(tiny_cnn(), images)


def reference_tokens(features, masks, min_purity, background=(BACKGROUND,)):
    """The purity rule written out cell by cell: (rows, labels, image of each row, drop counts)."""
    n, _, h, w = features.shape
    ch, cw = masks.shape[1] // h, masks.shape[2] // w
    rows, labels, images, dropped = [], [], [], Counter()
    for i in range(n):
        for r in range(h):
            for c in range(w):
                cell = Counter(masks[i, r * ch:(r + 1) * ch, c * cw:(c + 1) * cw].ravel().tolist())
                label, count = max(cell.items(), key=lambda kv: (kv[1], -kv[0]))
                if count / (ch * cw) < min_purity:
                    dropped["ambiguous"] += 1
                elif label in background:
                    dropped["background"] += 1
                else:
                    rows.append(features[i, :, r, c])
                    labels.append(label)
                    images.append(i)
    return np.array(rows), np.array(labels), np.array(images), dropped


def test_cells_follow_the_purity_rule_and_score_like_a_plain_benchmark(shapes):
    dataset, features = shapes
    assert features.shape == (24, 8, 8, 8)
    tokens = dataset.token_dataset(features, min_purity=0.75)
    rows, labels, images, dropped = reference_tokens(features, dataset.semantic_masks, 0.75)
    np.testing.assert_array_equal(tokens.embeddings, rows)
    np.testing.assert_array_equal(tokens.targets.keys, BenchmarkDataset.from_embeddings(
        rows, labels, identity=IDENTITY).targets.keys)
    structure = tokens.summary()["structure"]
    assert structure["candidate_tokens"] == 24 * 64
    assert structure["retained_tokens"] == len(rows) == 24 * 64 - sum(dropped.values())
    assert structure["ignored_token_reasons"] == {"background": dropped["background"],
                                                  "ambiguous": dropped["ambiguous"], "ignore_index": 0}
    assert structure["tokens_per_class"] == {str(SQUARE): int((labels == SQUARE).sum()),
                                             str(DISK): int((labels == DISK).sum())}
    assert structure["spatial_layout"] == {"feature_layout": "NCHW", "feature_grid": [8, 8], "mask_shape": [16, 16],
                                           "cell_pixels": [2, 2]}
    assert structure["background_pixels"] == int((dataset.semantic_masks == BACKGROUND).sum())
    assert structure["instances_per_class"] == {str(SQUARE): 24, str(DISK): 24}
    assert tokens.groups.summary()["n_groups"] == 24
    settings = {"separatix_config": SeparatixConfig(enabled=False)}
    ours = Benchmark(tokens, [PrecomputedExtractor("cnn")], **settings).run()
    plain = Benchmark(BenchmarkDataset.from_embeddings(rows, labels, identity=IDENTITY, groups=images),
                      [PrecomputedExtractor("cnn")], **settings).run()
    a, b = ours.extractor_results[0].overlap, plain.extractor_results[0].overlap
    assert a.score == pytest.approx(b.score, abs=1e-12)
    assert a.per_class_scores == b.per_class_scores and len(a.per_class_scores) == 2  # per-class token overlap
    data = json.loads(ours.to_json())
    assert data["dataset_summary"]["structure"]["family"] == "segmentation"
    assert data["dataset_summary"]["groups"]["n_groups"] == 24
    assert "| retained_tokens |" in ours.to_markdown()


def test_a_stricter_purity_drops_more_cells_as_ambiguous(shapes):
    dataset, features = shapes
    loose = dataset.token_dataset(features, min_purity=0.51).summary()["structure"]
    strict = dataset.token_dataset(features, min_purity=1.0).summary()["structure"]
    assert strict["ignored_token_reasons"]["ambiguous"] > loose["ignored_token_reasons"]["ambiguous"]
    _, _, _, dropped = reference_tokens(features, dataset.semantic_masks, 1.0)
    assert strict["ignored_token_reasons"]["ambiguous"] == dropped["ambiguous"]


def test_ignore_index_cells_are_counted_and_nested_subsets_keep_original_indices(shapes):
    dataset, features = shapes
    masks = dataset.semantic_masks.copy()
    masks[:, :4, :4] = 255
    marked = SegmentationDataset.from_arrays(images=dataset.images, semantic_masks=masks,
                                             class_metadata=CLASS_METADATA, ignore_index=np.int64(255),
                                             identity=IDENTITY)  # a NumPy integer was refused as "must be an int"
    reasons = marked.token_dataset(features).summary()["structure"]["ignored_token_reasons"]
    assert reasons["ignore_index"] == 24 * 4  # the 4x4 corner is 2x2 whole cells per image
    nested = dataset.subset(range(5, 15)).subset([2, 3])
    np.testing.assert_array_equal(nested.source_indices, [7, 8])
    tokens = nested.token_dataset(features[[7, 8]])
    assert set(tokens.groups.keys.tolist()) == set(build_groups([7, 8], 2).keys.tolist())
    assert tokens.summary()["structure"]["source_indices"] == [7, 8]
    provenance = nested.assign_cells((8, 8)).provenance
    assert set(provenance[:, 0].tolist()) == {7, 8}
    np.testing.assert_array_equal(nested.token_rows(features[[7, 8]]), tokens.embeddings)


def test_bad_segmentation_input_is_rejected(shapes):
    dataset, features = shapes
    images, masks = dataset.images, dataset.semantic_masks
    with pytest.raises(InputValidationError, match="semantic_masks has class 2 .first in image 0. that class_metadata "
                                                   "lacks"):
        SegmentationDataset.from_arrays(images=images, semantic_masks=masks, class_metadata={0: {"background": True},
                                                                                              1: {}},
                                        identity=IDENTITY)
    with pytest.raises(InputValidationError, match="images has 23 images but semantic_masks has 24"):
        SegmentationDataset.from_arrays(images=images[:23], semantic_masks=masks, class_metadata=CLASS_METADATA,
                                        identity=IDENTITY)
    with pytest.raises(InputValidationError, match="semantic_masks must be an integer"):
        SegmentationDataset.from_arrays(images=images, semantic_masks=masks.astype(float),
                                        class_metadata=CLASS_METADATA, identity=IDENTITY)
    with pytest.raises(InputValidationError, match="instance_masks has shape"):
        SegmentationDataset.from_arrays(images=images, semantic_masks=masks, instance_masks=masks[:, :8],
                                        class_metadata=CLASS_METADATA, identity=IDENTITY)
    with pytest.raises(InputValidationError, match="marks every class as background"):
        SegmentationDataset.from_arrays(images=images, semantic_masks=masks * 0,
                                        class_metadata={0: {"background": True}}, identity=IDENTITY)
    with pytest.raises(InputTypeError, match="class_metadata key 'sky' must be an int"):
        SegmentationDataset.from_arrays(images=images, semantic_masks=masks, class_metadata={"sky": {}},
                                        identity=IDENTITY)
    with pytest.raises(InputValidationError, match="the feature grid 5x5 does not divide the 16x16 masks"):
        dataset.token_dataset(np.zeros((24, 3, 5, 5)))
    with pytest.raises(InputValidationError, match="feature_map has 2 images but the dataset has 24"):
        dataset.token_dataset(features[:2])
    with pytest.raises(InputValidationError, match="feature_map must be a numeric .N, C, H, W. array"):
        dataset.token_dataset(features[:, 0])
    with pytest.raises(InputValidationError, match=r"min_purity must be a number in \(0.5, 1\]"):
        dataset.token_dataset(features, min_purity=0.5)
    with pytest.raises(InputValidationError, match="subset index 30 is out of range for 24 images"):
        dataset.subset([1, 30])
    with pytest.raises(InputValidationError, match="NaN or infinite values .first in image 3."):
        bad = features.copy()
        bad[3, 0, 0, 0] = np.nan
        dataset.token_dataset(bad)


def test_separatix_sees_source_images_as_groups(shapes):
    """The benchmark forwards the token groups: its Separatix result equals a direct grouped call."""
    from vertebrae.scoring import SeparatixScorer

    dataset, features = shapes
    tokens = dataset.token_dataset(features)
    benchmark = Benchmark(tokens, [PrecomputedExtractor("cnn")], separatix_config=SeparatixConfig(run_when="always"))
    result, settings = benchmark.run().extractor_results[0], benchmark.settings
    direct = SeparatixScorer(settings.separatix_config, settings.scoring_config, settings.continuous_config).diagnose(
        tokens.embeddings, tokens.targets, overlap_score=result.overlap.score,
        groups=dataset.assign_cells((8, 8)).provenance[:, 0])
    assert result.separatix.status == direct.status == "completed"
    assert result.separatix.scores == direct.scores
    ungrouped = SeparatixScorer(settings.separatix_config, settings.scoring_config, settings.continuous_config).diagnose(
        tokens.embeddings, tokens.targets, overlap_score=result.overlap.score)
    assert result.separatix.report["grouping"] != ungrouped.report["grouping"]
