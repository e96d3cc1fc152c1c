"""Bounded dataset inputs (issue 38, items 7, 8 and 9): image pixel budgets, many classes, links in image folders.

Item 7: an image whose header declares more pixels than ``max_image_pixels`` is refused before it is decoded
(named), a JPEG is decoded at a reduced size within the budget instead (``Image.draft``), and Pillow's
``DecompressionBombWarning`` never reaches the user.  Item 8: more classes than the overlap score takes
(``MAX_CLASSES``: its work and its result grow with the square of the class count) is refused before any work,
saying the threshold and why.  Item 9: an image folder follows a link only while its target stays inside the
dataset folder, unless the config opts in with ``follow_links = "anywhere"``; tested with real links.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
import time
import warnings

import numpy as np
import pytest

from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, InputValidationError
from vertebrae.cli.main import main
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.inputs import images, raw
from vertebrae.scoring import overlap
from vertebrae.scoring.overlap import OverlapIndexScorer

IDENTITY = DatasetIdentity.declared("bounded", "1")


def _one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"vertebrae {command}: error: "), err
    return err


# ----------------------------------------------------------------------------- item 8: many classes
def test_100000_classes_of_2_rows_are_refused_early_with_the_threshold_and_why():
    """The issue's case gave no result within 120 s; now it is refused in the time it takes to build the targets."""
    n = 100_000
    X = np.random.default_rng(0).normal(size=(2 * n, 4)).astype(np.float32)
    dataset = BenchmarkDataset.from_arrays(X, np.repeat(np.arange(n), 2), identity=IDENTITY)
    start = time.perf_counter()
    with pytest.raises(InputValidationError) as caught:
        Benchmark(dataset, [PrecomputedExtractor("a", X)], progress=False)
    assert time.perf_counter() - start < 30
    message = str(caught.value)
    assert "100,000 classes" in message and "at most 1,000" in message and "9,999,900,000 pairs" in message
    assert "square of the class count" in message and "label view" in message


def test_the_threshold_is_exact_and_the_scorer_refuses_too(monkeypatch):
    """MAX_CLASSES classes are scored (a hand-derived pair count: 2 x 3 ordered pairs for 3 classes); one more
    is refused, by the scorer called directly as by Benchmark."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 3))
    y = np.repeat(np.arange(3), 4)
    monkeypatch.setattr(overlap, "MAX_CLASSES", 3)
    result = OverlapIndexScorer().score(X, y, warn=False)
    assert sum(len(row) for row in result.pairwise_scores.values()) == 3 * 2
    monkeypatch.setattr(overlap, "MAX_CLASSES", 2)
    with pytest.raises(InputValidationError, match=r"3 classes; the overlap score takes at most 2,.*\(6 pairs"):
        OverlapIndexScorer().score(X, y, warn=False)


def test_the_cli_refuses_many_classes_in_one_line(tmp_path, capsys):
    n = overlap.MAX_CLASSES + 1
    np.save(tmp_path / "x.npy", np.random.default_rng(2).normal(size=(2 * n, 3)))
    (tmp_path / "y.txt").write_text("\n".join(f"c{i // 2}" for i in range(2 * n)) + "\n")
    (tmp_path / "run.toml").write_text('[dataset]\nid = "many"\nrevision = "1"\nlabels = "y.txt"\n'
                                       '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert f"{n:,} classes; the overlap score takes at most {n - 1:,}" in _one_line(capsys, "run")
    assert not (tmp_path / "out" / "report.json").exists()


# ----------------------------------------------------------------------------- item 7: bounded image decoding
def _png_declaring(path, width: int, height: int) -> None:
    """A valid 1-bit grayscale PNG of ``width`` x ``height`` black pixels, deflated in chunks (a few KB on disk,
    never the decoded size in memory): the issue's kind of file."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    packer, row = zlib.compressobj(9), b"\0" * (1 + (width + 7) // 8)  # filter byte + packed bits
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
                     + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def _photos(folder, sizes=((20, 16), (24, 18), (22, 20), (26, 14))) -> list:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i, (w, h) in enumerate(sizes):
        paths.append(folder / f"p{i}.png")
        Image.fromarray(rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def test_a_small_png_declaring_13000_squared_pixels_is_refused_before_decoding(tmp_path):
    """The issue's file: 169 million pixels (under Pillow's refusal limit, over its warning one) decoded to 854 MiB
    with only Pillow's raw warning.  Now it is refused by name, before decoding, with no warning at all."""
    from PIL import Image

    bomb = tmp_path / "bomb.png"
    _png_declaring(bomb, 13_000, 13_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # Pillow's own, raw: what the user never sees
        assert bomb.stat().st_size < 100_000 and Image.open(bomb).size == (13_000, 13_000)
    paths = _photos(tmp_path / "ok")[:3] + [bomb]
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InputValidationError) as refused:
            BenchmarkDataset.from_image_paths(paths, ["a", "b", "a", "b"], identity=IDENTITY)
    assert time.perf_counter() - start < 5  # decoding it takes longer, and 854 MiB
    message = str(refused.value)
    assert message.startswith(f"paths[3] ({str(bomb)!r}) declares 13,000 x 13,000 = 169,000,000 pixels"), message
    assert f"max_image_pixels = {images.DEFAULT_MAX_IMAGE_PIXELS:,}" in message and "(PNG)" in message
    assert "refused before decoding" in message and "raise max_image_pixels" in message
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)], caught
    assert images.DEFAULT_MAX_IMAGE_PIXELS < Image.MAX_IMAGE_PIXELS  # well below Pillow's own limit


def test_pillows_bomb_warning_never_reaches_the_user_within_the_budget(tmp_path, monkeypatch):
    """With Pillow's own warning limit lowered below an image a raised budget allows (a real Pillow setting),
    building and loading the dataset warns nothing: the budget has decided."""
    from PIL import Image

    paths = _photos(tmp_path, sizes=((40, 30),) * 4)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000)  # 1,200 pixels per image: Pillow would warn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = BenchmarkDataset.from_image_paths(paths, ["a", "b"] * 2, identity=IDENTITY, max_image_pixels=5_000)
        loaded = dataset.inputs[0]
    assert loaded.size == (40, 30) and not caught, [str(w.message) for w in caught]


def test_a_jpeg_over_the_budget_decodes_at_a_reduced_size_within_it(tmp_path):
    """JPEG decodes at 1/2, 1/4 or 1/8 (``Image.draft``): the least reduction within the budget, equal to Pillow's
    own drafted decode; a file the budget reduces changes the content digest, an unreduced dataset's is unchanged."""
    from PIL import Image

    from vertebrae._base.fingerprint import content_sha256
    from vertebrae.errors import DataWarning

    rng = np.random.default_rng(3)
    big = tmp_path / "big.jpg"
    Image.fromarray(rng.integers(0, 255, size=(300, 400, 3), dtype=np.uint8)).save(big, quality=90)
    paths = _photos(tmp_path / "small")[:3] + [big]
    labels = ["a", "b", "a", "b"]
    with pytest.warns(DataWarning, match=r"paths\[3\] .*decoded at a reduced size \(100 x 75\)"):
        reduced = BenchmarkDataset.from_image_paths(paths, labels, identity=IDENTITY, max_image_pixels=10_000)
    direct = Image.open(big)  # 400 x 300 = 120,000 pixels; 1/2 is 30,000 > 10,000; 1/4 is 7,500
    direct.draft("RGB", (100, 75))
    np.testing.assert_array_equal(np.asarray(reduced.inputs[3]), np.asarray(direct.convert("RGB")))
    full = BenchmarkDataset.from_image_paths(paths, labels, identity=IDENTITY)
    assert full.inputs[3].size == (400, 300)
    assert reduced.inputs.__vertebrae_content__() != full.inputs.__vertebrae_content__()
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert full.inputs.__vertebrae_content__() == content_sha256([images.LOADER, "files", digests])
    assert reduced.inputs.subset([0, 1]).__vertebrae_content__() == full.inputs.subset([0, 1]).__vertebrae_content__()
    with pytest.raises(InputValidationError, match=r"paths\[3\] .* 400 x 300 = 120,000 pixels.*\(JPEG\)"):
        BenchmarkDataset.from_image_paths(paths, labels, identity=IDENTITY, max_image_pixels=1_000)  # 1/8: 2,500


def test_the_run_config_takes_max_image_pixels_and_refuses_in_one_line(tmp_path, capsys):
    for label in ("cat", "dog"):
        _photos(tmp_path / "photos" / label, sizes=((20, 16), (24, 18)))
    head = '[dataset]\nid = "d"\nrevision = "1"\nimages = "photos"\n'
    tail = '\n[[extractors]]\nname = "s"\nkind = "sklearn"\nmodel = "sklearn.decomposition:PCA"\n'
    for body, message in [
        ("max_image_pixels = 400\n", "photos/cat/p1.png') declares 24 x 18 = 432 pixels, more than max_image_pixels"
                                     " = 400"),
        ("max_image_pixels = 0\n", "config [dataset] max_image_pixels must be a positive whole number of pixels"),
        ('follow_links = "outside"\n', 'config [dataset] follow_links must be "inside" (the default) or "anywhere"'),
    ]:
        (tmp_path / "run.toml").write_text(head + body + tail)
        assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
        assert message in _one_line(capsys, "run"), body
    (tmp_path / "labels.txt").write_text("a\nb\n")
    np.save(tmp_path / "x.npy", np.zeros((2, 2)))
    (tmp_path / "run.toml").write_text('[dataset]\nid = "d"\nrevision = "1"\nlabels = "labels.txt"\n'
                                       'max_image_pixels = 400\n[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert "max_image_pixels applies to a raw-input source" in _one_line(capsys, "run")


# ----------------------------------------------------------------------------- item 9: links in image folders
@pytest.fixture
def linked(tmp_path):
    """photos/cat/{p0,p1}.png, photos/dog/{p0,p1}.png, and outside/x.png beside the dataset folder."""
    for label in ("cat", "dog"):
        _photos(tmp_path / "photos" / label, sizes=((20, 16), (24, 18)))
    _photos(tmp_path / "outside", sizes=((30, 30),))
    return tmp_path / "photos", tmp_path / "outside"


def test_links_inside_the_dataset_folder_are_followed(linked):
    photos, _ = linked
    (photos / "dog" / "alias.png").symlink_to(photos / "cat" / "p0.png")
    (photos / "bird").symlink_to(photos / "cat", target_is_directory=True)  # a class folder linked in the folder
    (photos / "cat" / "again").symlink_to(photos / "cat", target_is_directory=True)  # a loop: walked once
    paths, labels = raw.image_folder(photos)
    names = [str(pathlib.Path(p).relative_to(photos)) for p in paths]
    assert names == ["bird/p0.png", "bird/p1.png", "cat/p0.png", "cat/p1.png", "dog/alias.png", "dog/p0.png",
                     "dog/p1.png"], names
    assert labels == ["bird"] * 2 + ["cat"] * 2 + ["dog"] * 3


@pytest.mark.parametrize("where", ["file", "class folder", "subfolder"])
def test_a_link_out_of_the_dataset_folder_is_refused_unless_the_config_opts_in(linked, where):
    photos, outside = linked
    link = {"file": photos / "dog" / "x.png", "class folder": photos / "fox",
            "subfolder": photos / "cat" / "more"}[where]
    link.symlink_to(outside / "p0.png" if where == "file" else outside, target_is_directory=where != "file")
    target = (outside / "p0.png" if where == "file" else outside).resolve()
    with pytest.raises(InputValidationError) as refused:
        raw.image_folder(photos)
    assert str(refused.value).startswith(f"{link}: a symbolic link to {target}, outside the dataset folder {photos}")
    assert 'follow_links = "anywhere"' in str(refused.value)
    paths, _ = raw.image_folder(photos, "anywhere")
    assert any(str(link) in p for p in paths) and len(paths) == 5


def test_the_cli_refuses_a_link_out_of_the_folder_in_one_line_and_follows_it_when_asked(linked, capsys):
    photos, outside = linked
    (photos / "dog" / "x.png").symlink_to(outside / "p0.png")
    config = photos.parent / "run.toml"
    head = '[dataset]\nid = "d"\nrevision = "1"\nimages = "photos"\n'
    tail = ('\n[[extractors]]\nname = "pixels"\nkind = "callable"\nmodel = "vertebrae_bounded_features:mean_rgb"\n'
            "[separatix]\nenabled = false\n")
    (photos.parent / "vertebrae_bounded_features.py").write_text(
        "import numpy as np\n\n\ndef mean_rgb(images):\n    return np.stack([np.asarray(i, dtype=np.float32).mean("
        "axis=(0, 1)) + i.size[0] for i in images])\n")
    sys.path.insert(0, str(photos.parent))
    try:
        config.write_text(head + tail)
        assert main(["run", str(config), "-o", str(photos.parent / "out"), "-q"]) == 2
        assert "x.png: a symbolic link to" in _one_line(capsys, "run")
        config.write_text(head + 'follow_links = "anywhere"\n' + tail)
        assert main(["run", str(config), "-o", str(photos.parent / "out"), "-q"]) == 0
        data = json.loads((photos.parent / "out" / "report.json").read_text())
        assert data["dataset_summary"]["n_samples"] == 5
    finally:
        sys.path.remove(str(photos.parent))
        sys.modules.pop("vertebrae_bounded_features", None)
