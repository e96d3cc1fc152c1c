"""Raw-input datasets: image files and arrays (lazy Pillow loading), audio waveforms, DataFrame columns."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from vertebrae import Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, OverlapScoringConfig
from vertebrae.errors import InputTypeError, InputValidationError

ID = DatasetIdentity.content_hash("raw")


def pixels(n: int, seed: int = 0) -> list[np.ndarray]:
    """Images of varying size; class c (= row % 2) is bright in channel c."""
    rng = np.random.default_rng(seed)
    images = []
    for i in range(n):
        image = rng.integers(0, 60, size=(8 + i % 3, 10 + i % 4, 3), dtype=np.uint8)
        image[:, :, i % 2] += 150
        images.append(image)
    return images


def write_images(folder, images, fmt: str = "PNG") -> list:
    paths = []
    for i, image in enumerate(images):
        path = folder / f"img{i}.{fmt.lower()}"
        Image.fromarray(image).save(path, fmt)
        paths.append(path)
    return paths


@pytest.fixture
def image_folder(tmp_path):
    images = pixels(8)
    return write_images(tmp_path, images), images, [i % 2 for i in range(8)]


def test_image_paths_load_lazily_as_rgb_pil_images(image_folder):
    paths, images, labels = image_folder
    dataset = BenchmarkDataset.from_image_paths(paths, labels, identity=ID)
    X = dataset.extractor_input
    assert len(X) == 8 and X.files == tuple(paths)
    loaded = X[3]
    assert isinstance(loaded, Image.Image) and loaded.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(loaded), images[3])  # PNG is lossless
    assert dataset.summary()["structure"] == {"family": "images", "modality": "image", "source": "files",
                                              "loader": {"library": "pillow", "mode": "RGB", "exif_orientation": "applied"},
                                              "n_images": 8,
                                              "common_root": str(paths[0].parent.resolve())}


def test_exif_orientation_6_is_applied_on_load_as_a_manual_transpose_gives(tmp_path):
    """A phone photo stored sideways (EXIF orientation 6: turn 90 degrees clockwise to view) is embedded upright."""
    import hashlib

    from vertebrae._base.fingerprint import content_sha256

    stored = np.random.default_rng(1).integers(0, 256, size=(6, 10, 3), dtype=np.uint8)  # 6 high, 10 wide
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation
    path = tmp_path / "phone.jpg"
    Image.fromarray(stored).save(path, "JPEG", exif=exif, quality=95)
    with Image.open(path) as raw:
        assert raw.getexif()[0x0112] == 6
        decoded = np.asarray(raw.convert("RGB"))  # the pixels as stored, not turned
    turned = np.rot90(decoded, k=-1)  # orientation 6 by hand: rotate 90 degrees clockwise
    assert decoded.shape == (6, 10, 3) and turned.shape == (10, 6, 3)
    other = tmp_path / "plain.png"
    Image.fromarray(stored).save(other)
    dataset = BenchmarkDataset.from_image_paths([path, other, path, other], [0, 1, 0, 1], identity=ID)
    np.testing.assert_array_equal(np.asarray(dataset.inputs[0]), turned)
    np.testing.assert_array_equal(np.asarray(dataset.inputs[1]), stored)  # no tag: unchanged
    with Image.open(path) as opened:  # a PIL image handed over in memory follows the same rule
        in_memory = BenchmarkDataset.from_images([opened, stored, opened, stored], [0, 1, 0, 1], identity=ID)
    np.testing.assert_array_equal(in_memory.inputs.arrays[0], turned)
    # the rule is part of the content the dataset's identity hashes
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (path, other, path, other)]
    rule = {"library": "pillow", "mode": "RGB", "exif_orientation": "applied"}
    assert dataset.inputs.__vertebrae_content__() == content_sha256([rule, "files", digests])
    assert dataset.summary()["structure"]["loader"] == rule


def test_image_identity_is_file_content_not_paths(image_folder, tmp_path):
    paths, images, labels = image_folder
    first = BenchmarkDataset.from_image_paths(paths, labels, identity=ID)
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    moved = []
    for i, path in enumerate(paths):  # same bytes under other names
        target = renamed / f"other{i}.png"
        target.write_bytes(path.read_bytes())
        moved.append(target)
    same = BenchmarkDataset.from_image_paths(moved, labels, identity=ID)
    assert same.identity.content_sha256 == first.identity.content_sha256
    assert same.inputs_fingerprint() == first.inputs_fingerprint()
    edited = images[5].copy()
    edited[0, 0, 0] ^= 1  # one pixel, one bit
    Image.fromarray(edited).save(moved[5])
    changed = BenchmarkDataset.from_image_paths(moved, labels, identity=ID)
    assert changed.identity.content_sha256 != first.identity.content_sha256
    assert changed.inputs_fingerprint() != first.inputs_fingerprint()


def test_in_memory_images_equal_their_files(image_folder):
    paths, images, labels = image_folder
    from_files = BenchmarkDataset.from_image_paths(paths, labels, identity=ID).extractor_input
    pil = [Image.fromarray(image) for image in images]
    for dataset in (BenchmarkDataset.from_images(images, labels, identity=ID),
                    BenchmarkDataset.from_images(pil, labels, identity=ID)):
        X = dataset.extractor_input
        assert dataset.summary()["structure"]["source"] == "in_memory"
        for row in range(len(images)):
            np.testing.assert_array_equal(np.asarray(X[row]), np.asarray(from_files[row]))
    arrays = BenchmarkDataset.from_images(images, labels, identity=ID)
    assert BenchmarkDataset.from_images(pil, labels, identity=ID).identity == arrays.identity


def test_grayscale_and_rgba_become_rgb():
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4)
    rgba = np.dstack([np.full((3, 4), v, np.uint8) for v in (10, 20, 30, 40)])
    X = BenchmarkDataset.from_images([gray, rgba, gray, rgba], [0, 0, 1, 1], identity=ID).extractor_input
    np.testing.assert_array_equal(np.asarray(X[0]), np.asarray(Image.fromarray(gray).convert("RGB")))
    np.testing.assert_array_equal(np.asarray(X[1]), np.asarray(Image.fromarray(rgba).convert("RGB")))


def test_a_bad_file_is_named_with_its_row_before_anything_runs(image_folder, tmp_path):
    paths, _, labels = image_folder
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(paths[2].read_bytes()[:60])
    not_image = tmp_path / "notes.png"
    not_image.write_text("hello")
    cases = [(tmp_path / "missing.png", "paths[4] .*does not exist"), (tmp_path, "paths[4] .*is not a file"),
             (truncated, r"paths\[4\] .*truncated.png.*not a readable image"),
             (not_image, r"paths\[4\] .*notes.png.*not a readable image")]
    for bad, message in cases:
        broken = list(paths)
        broken[4] = bad
        with pytest.raises(InputValidationError, match=message.replace("[4]", r"\[4\]")):
            BenchmarkDataset.from_image_paths(broken, labels, identity=ID)


def test_a_file_that_breaks_mid_run_goes_through_on_error(image_folder):
    paths, _, labels = image_folder
    dataset = BenchmarkDataset.from_image_paths(paths, labels, identity=ID)
    paths[6].write_bytes(b"corrupted after the dataset was built")

    def mean_colour(images):
        return np.array([np.asarray(image, dtype=np.float64).mean(axis=(0, 1)) for image in images])

    extractor = CallableExtractor("colour", mean_colour)
    config = OverlapScoringConfig(k=2, min_samples_per_cluster=2)
    result = Benchmark(dataset, [extractor], scoring_config=config, on_error="record", progress=False).run()
    error = result["colour"].error
    assert error["stage"] == "extract" and "image row 6" in error["message"] and "changed" in error["message"]
    with pytest.raises(InputValidationError, match="image row 6"):
        Benchmark(dataset, [extractor], scoring_config=config, progress=False).run()


def test_image_datasets_pickle_and_load_the_same(image_folder):
    paths, _, labels = image_folder
    dataset = BenchmarkDataset.from_image_paths(paths, labels, identity=ID)
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.identity == dataset.identity and copy.inputs_fingerprint() == dataset.inputs_fingerprint()
    np.testing.assert_array_equal(np.asarray(copy.extractor_input[1]), np.asarray(dataset.extractor_input[1]))


@pytest.mark.parametrize("images, error, message", [
    ("img.png", InputTypeError, "sequence of arrays or PIL images"),
    ([], InputValidationError, "images is empty"),
    ([np.zeros((4, 4, 3), np.float32)], InputValidationError, r"images\[0\] has dtype float32; .*astype\(np.uint8\)"),
    ([np.zeros((4, 4, 2), np.uint8)], InputValidationError, r"images\[0\] has shape \(4, 4, 2\)"),
    ([np.zeros((0, 4, 3), np.uint8)], InputValidationError, r"images\[0\] has no pixels"),
    ([[1, 2, 3]], InputTypeError, r"images\[0\] is list"),
])
def test_in_memory_image_rejections(images, error, message):
    with pytest.raises(error, match=message):
        BenchmarkDataset.from_images(images, [0] * max(len(images), 1), identity=ID)


def test_image_path_rejections(image_folder):
    paths, _, labels = image_folder
    with pytest.raises(InputTypeError, match="sequence of image file paths"):
        BenchmarkDataset.from_image_paths(str(paths[0]), labels, identity=ID)
    with pytest.raises(InputTypeError, match=r"paths\[1\] is int"):
        BenchmarkDataset.from_image_paths([paths[0], 3], [0, 1], identity=ID)
    with pytest.raises(InputValidationError, match="identity is required"):
        BenchmarkDataset.from_image_paths(paths, labels)
    with pytest.raises(InputValidationError, match="y has 4 rows"):
        BenchmarkDataset.from_image_paths(paths, labels[:4], identity=ID)


# -- audio ----------------------------------------------------------------------------------------------------------
def clips(n: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.normal(size=100 + 37 * i).astype(np.float32) for i in range(n)]


def test_audio_keeps_waveforms_and_the_sampling_rate():
    waves = clips()
    dataset = BenchmarkDataset.from_audio_arrays(waves, [0, 1] * 3, sampling_rate=100, identity=ID)
    X = dataset.extractor_input
    assert isinstance(X, list) and X.sampling_rate == 100 and len(X) == 6
    for got, want in zip(X, waves):
        np.testing.assert_array_equal(got, want)
    structure = dataset.summary()["structure"]
    assert structure == {"family": "audio", "modality": "audio", "source": "in_memory", "sampling_rate": 100,
                         "channels": 1, "duration_seconds": {"min": 1.0, "median": 1.925, "max": 2.85}}
    other_rate = BenchmarkDataset.from_audio_arrays(waves, [0, 1] * 3, sampling_rate=200, identity=ID)
    assert other_rate.identity.content_sha256 != dataset.identity.content_sha256
    assert other_rate.inputs_fingerprint() != dataset.inputs_fingerprint()
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.extractor_input.sampling_rate == 100 and copy.inputs_fingerprint() == dataset.inputs_fingerprint()


def test_stereo_clips_are_channels_by_samples():
    waves = [np.zeros((2, 50 + i), np.float64) for i in range(4)]
    dataset = BenchmarkDataset.from_audio_arrays(waves, [0, 0, 1, 1], sampling_rate=np.int64(16000), identity=ID)
    assert dataset.summary()["structure"]["channels"] == 2


@pytest.mark.parametrize("waveforms, rate, error, message", [
    (clips(2), True, InputTypeError, "sampling_rate must be a positive integer"),
    (clips(2), 16000.0, InputTypeError, "sampling_rate must be a positive integer"),
    (clips(2), 0, InputValidationError, "sampling_rate must be a whole number of Hz from 1 to 10000000 .*, got 0"),
    (clips(2), -8000, InputValidationError, "got -8000"),
    ("clip.wav", 16000, InputTypeError, "waveforms must be a list of arrays"),
    ([], 16000, InputValidationError, "waveforms is empty"),
    ([np.zeros(10, np.int16)], 16000, InputValidationError, r"waveforms\[0\] has dtype int16.*32768"),
    ([np.zeros(10), np.array([0.0, np.nan])], 16000, InputValidationError, r"waveforms\[1\] has NaN"),
    ([np.zeros(10), np.array([0.0, np.inf])], 16000, InputValidationError, r"waveforms\[1\] has NaN or infinite"),
    ([np.zeros((2, 2, 5))], 16000, InputValidationError, r"waveforms\[0\] has shape \(2, 2, 5\)"),
    ([np.zeros((100, 2))], 16000, InputValidationError, r"more channels than samples.*w\.T"),
    ([np.zeros(0)], 16000, InputValidationError, r"waveforms\[0\] has no samples"),
    ([np.zeros(10), np.zeros((2, 10))], 16000, InputValidationError, r"waveforms\[1\] has shape \(2, 10\).*channel"),
])
def test_audio_rejections(waveforms, rate, error, message):
    with pytest.raises(error, match=message):
        BenchmarkDataset.from_audio_arrays(waveforms, [0] * max(len(waveforms), 1), sampling_rate=rate, identity=ID)



@pytest.mark.parametrize("bad, error, problem", [
    (np.zeros(10, np.int16), InputValidationError, "has dtype int16; pass float samples (int16 PCM: divide by 32768.0)"),
    (np.array(["a", "b"]), InputTypeError, "has dtype <U1; a waveform holds real-valued float samples"),
    (np.zeros((2, 2, 5)), InputValidationError, "has shape (2, 2, 5); pass 1-D samples or 2-D channels x samples"),
    (np.zeros((100, 2)), InputValidationError, "has shape (100, 2), more channels than samples; 2-D waveforms are "
                                               "channels x samples: pass w.T"),
    (np.zeros(0), InputValidationError, "has no samples (an empty waveform)"),
    (np.array([0.0, np.inf]), InputValidationError, "has NaN or infinite samples; clean or drop that row"),
])
def test_datasets_audio_files_and_audio_extractors_share_one_set_of_waveform_rules(tmp_path, bad, error, problem):
    """The same bad clip fails the same way wherever it enters; only the location in front differs."""
    from vertebrae.extractors.hf_audio import check_waveforms
    from vertebrae.inputs.raw import load_waveforms

    good = np.zeros(10)
    with pytest.raises(error) as dataset:
        BenchmarkDataset.from_audio_arrays([good, bad], [0, 1], sampling_rate=16000, identity=ID)
    assert str(dataset.value) == f"BenchmarkDataset.from_audio_arrays: waveforms[1] {problem}"
    with pytest.raises(error) as extractor:
        check_waveforms([good, bad], where="HFAudioExtractor 'w'")
    assert str(extractor.value) == f"HFAudioExtractor 'w': X[1] {problem}"
    np.savez(tmp_path / "clips.npz", good, bad)
    with pytest.raises(error) as audio_file:
        load_waveforms(tmp_path / "clips.npz")
    assert str(audio_file.value) == f"{tmp_path / 'clips.npz'}: row 1 (array 'arr_1') {problem}"

# -- DataFrames -----------------------------------------------------------------------------------------------------
def frame() -> pd.DataFrame:
    return pd.DataFrame({"text": [f"text {i}" for i in range(6)], "topic": list("aabbcc"),
                         "cat": [1, 0, 1, 0, 1, 1], "dog": [0, 1, 1, 1, 0, 1], "size": np.arange(6.0),
                         "weight": np.linspace(1, 2, 6)})


def test_dataframe_text_and_single_labels():
    dataset = BenchmarkDataset.from_dataframe(frame(), input_col="text", label_col="topic", identity=ID)
    assert dataset.extractor_input == [f"text {i}" for i in range(6)]
    assert dataset.target_type == "single_label" and dataset.targets.summary()["n_classes"] == 3
    assert dataset.summary()["structure"] == {"family": "dataframe", "modality": "text", "input_columns": ["text"],
                                              "label_columns": ["topic"]}
    direct = BenchmarkDataset.from_arrays(list(frame()["text"]), list(frame()["topic"]), identity=ID)
    assert direct.identity == dataset.identity


def test_several_label_columns_are_a_multi_label_indicator_with_their_names():
    dataset = BenchmarkDataset.from_dataframe(frame(), input_col=["size", "weight"], label_col=["cat", "dog"],
                                              identity=ID)
    assert dataset.target_type == "multi_label"
    indicator = dataset.targets.indicator
    np.testing.assert_array_equal(getattr(indicator, "toarray", lambda: indicator)(), frame()[["cat", "dog"]].to_numpy())
    catalog = dataset.targets.catalog
    assert [catalog.value(key) for key in catalog.keys] == ["cat", "dog"]
    np.testing.assert_array_equal(dataset.extractor_input, frame()[["size", "weight"]].to_numpy())
    assert dataset.summary()["structure"]["modality"] == "tabular"


def test_a_label_column_of_words_among_indicator_columns_says_what_it_holds():
    with pytest.raises(InputValidationError, match=r"label column 'topic' must hold 0/1 or booleans .* \(it holds "
                                                   r"\w+ values, not numbers\)"):  # it said "(rows all do not)"
        BenchmarkDataset.from_dataframe(frame(), input_col="size", label_col=["cat", "topic"], identity=ID)


def test_a_single_string_is_not_a_collection_of_inputs():
    """len("abcd") made it four one-character texts."""
    with pytest.raises(InputTypeError, match="got one str; wrap a single text in a list"):
        BenchmarkDataset.from_arrays("abcd", [0, 0, 1, 1], identity=ID)


def test_one_numeric_column_is_a_one_feature_matrix():
    dataset = BenchmarkDataset.from_dataframe(frame(), input_col="size", label_col="topic", identity=ID)
    np.testing.assert_array_equal(dataset.extractor_input, np.arange(6.0)[:, None])
    assert dataset.summary()["structure"]["modality"] == "tabular"


def test_dataframe_of_image_paths(image_folder):
    paths, images, labels = image_folder
    df = pd.DataFrame({"file": [str(p) for p in paths], "label": labels})
    dataset = BenchmarkDataset.from_dataframe(df, input_col="file", label_col="label", modality="image", identity=ID)
    direct = BenchmarkDataset.from_image_paths(paths, labels, identity=ID)
    assert dataset.identity == direct.identity
    np.testing.assert_array_equal(np.asarray(dataset.extractor_input[2]), images[2])
    assert dataset.summary()["structure"]["family"] == "dataframe"
    assert dataset.summary()["structure"]["loader"] == {"library": "pillow", "mode": "RGB", "exif_orientation": "applied"}


@pytest.mark.parametrize("kwargs, error, message", [
    ({"input_col": "texts", "label_col": "topic"}, InputValidationError, r"input_col names columns \['texts'\]"),
    ({"input_col": "text", "label_col": ["cat", "cow"]}, InputValidationError, r"label_col names columns \['cow'\]"),
    ({"input_col": [], "label_col": "topic"}, InputValidationError, "input_col is empty"),
    ({"input_col": "text", "label_col": ["cat", "cat"]}, InputValidationError, "lists a column twice"),
    ({"input_col": ["size", "cat"], "label_col": "cat"}, InputValidationError, "both input_col and label_col"),
    ({"input_col": "text", "label_col": "topic", "modality": "video"}, InputValidationError, "modality must be one of"),
    ({"input_col": ["text", "topic"], "label_col": "cat", "modality": "text"}, InputValidationError,
     "reads one input column"),
    ({"input_col": ["text", "size"], "label_col": "cat"}, InputValidationError, r"columns \['text'\] are not numeric"),
    ({"input_col": "size", "label_col": "topic", "modality": "text"}, InputTypeError, "column 'size' row 0 is float"),
    ({"input_col": "text", "label_col": ["size", "cat"]}, InputValidationError,
     r"label column 'size' must hold 0/1 .*rows \[2, 3, 4, 5\]"),
])
def test_dataframe_rejections(kwargs, error, message):
    with pytest.raises(error, match=message):
        BenchmarkDataset.from_dataframe(frame(), identity=ID, **kwargs)


def test_dataframe_missing_values_are_named_with_their_rows():
    df = frame()
    df.loc[[1, 4], "text"] = None
    with pytest.raises(InputValidationError, match=r"column 'text' \(input_col\) has missing values in rows \[1, 4\]"):
        BenchmarkDataset.from_dataframe(df, input_col="text", label_col="topic", identity=ID)
    df = frame()
    df.loc[2, "topic"] = np.nan
    with pytest.raises(InputValidationError, match=r"column 'topic' \(label_col\) has missing values in rows \[2\]"):
        BenchmarkDataset.from_dataframe(df, input_col="text", label_col="topic", identity=ID)
    with pytest.raises(InputTypeError, match="df must be a pandas DataFrame"):
        BenchmarkDataset.from_dataframe({"text": []}, input_col="text", label_col="topic", identity=ID)


def test_a_subset_of_images_stays_lazy_and_names_the_dataset_rows(image_folder):
    paths, images, labels = image_folder
    X = BenchmarkDataset.from_image_paths(paths, labels, identity=ID).extractor_input
    picked = X.subset([6, 2])
    assert type(picked).__name__ == "ImageInputs" and len(picked) == 2 and picked.files == (paths[6], paths[2])
    np.testing.assert_array_equal(np.asarray(picked[1]), images[2])
    assert type(X[2:5]).__name__ == "ImageInputs" and X[2:5].files == tuple(paths[2:5])
    in_memory = BenchmarkDataset.from_images(images, labels, identity=ID).extractor_input.subset([7, 0])
    np.testing.assert_array_equal(np.asarray(in_memory[0]), images[7])
    paths[6].write_bytes(b"corrupted after the dataset was built")
    with pytest.raises(InputValidationError, match="image row 6 .*changed"):
        picked[0]  # the dataset's row, not the subset's position 0
    with pytest.raises(InputValidationError, match="image row 6 .*changed"):
        X[5:8].subset([1])[0]


def test_a_screened_image_benchmark_hands_its_extractor_lazy_images():
    from vertebrae import ScreeningConfig

    images = pixels(60)
    labels = [i % 2 for i in range(60)]
    received = []

    def mean_colour(batch):
        received.append(type(batch).__name__)
        return np.array([np.asarray(image, dtype=np.float64).mean(axis=(0, 1)) for image in batch])

    def noise(batch):
        return np.random.default_rng(len(batch)).normal(size=(len(batch), 3))

    dataset = BenchmarkDataset.from_images(images, labels, identity=ID)
    result = Benchmark(dataset, [CallableExtractor("colour", mean_colour), CallableExtractor("noise", noise)],
                       scoring_config=OverlapScoringConfig(k=2, min_samples_per_cluster=2),
                       screening=ScreeningConfig(start_rows=20, eta=2), progress=False).run()
    assert received and set(received) == {"ImageInputs"}
    assert result["colour"].screening["status"] == "finalist"
