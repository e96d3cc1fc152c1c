"""Image datasets: images that load lazily, one batch at a time, as upright RGB Pillow images (EXIF applied).

``BenchmarkDataset.from_image_paths`` and ``from_images`` keep an :class:`ImageInputs` as the
dataset's inputs.  Indexing it loads one image (an extractor's batch loads only its rows), so
a dataset of image files never holds more than a batch of decoded pixels.

Files are checked when the dataset is built — each exists, is read once to hash its bytes,
and its header is verified by Pillow — so a missing, unreadable or truncated file is named
with its row before any extractor runs.  A file that fails later (it changed or was removed
after the dataset was built, or decodes badly past the header) raises an error naming its
row when its batch loads, and the run's ``on_error`` policy records or raises it.

Decoding is bounded: a file whose header declares more pixels than ``max_image_pixels``
(:data:`DEFAULT_MAX_IMAGE_PIXELS`, well below Pillow's own limit; models resize their inputs far
below it anyway) is decoded at a reduced size within the budget where its format allows it
(``Image.draft``: JPEG scales by 1/2, 1/4 or 1/8 while decoding) and refused, named, before any
decoding otherwise.  Pillow's ``DecompressionBombWarning`` is never passed on: the budget has
already decided.

The dataset's content is the SHA-256 of each file's bytes (or of each in-memory image's
pixels) plus the loading rule (:data:`LOADER`; and the budget when it reduced a file), never the
paths alone: a renamed folder keeps its cache, an edited image does not.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._base.config import check_int
from .._base.files import read_regular
from ..errors import DataWarning, DependencyError, InputTypeError, InputValidationError
from .._base.fingerprint import content_sha256

#: How an item becomes an extractor's input: Pillow decodes it, turns it upright by its EXIF orientation (as
#: ``PIL.ImageOps.exif_transpose`` does: a phone photo stored sideways is embedded as it is viewed) and
#: converts it to 8-bit RGB.  Part of the dataset's content hash, so datasets hashed under the old rule miss.
LOADER = {"library": "pillow", "mode": "RGB", "exif_orientation": "applied"}
#: The most pixels one image file may decode to (50 megapixels: 150 MB of RGB); Pillow warns at 89.5 and refuses
#: at 179 megapixels.  A file that declares more is decoded at a reduced size within it, or refused.
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000
#: JPEG's reduced decoding scales (``Image.draft``), smallest reduction first.
_DRAFT_SCALES = (2, 4, 8)


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        from .._base.extras import install_hint

        raise DependencyError(f"image datasets need Pillow; {install_hint('vision')}") from None
    return Image


def _decode_errors(Image: Any) -> tuple[type[BaseException], ...]:
    """What Pillow raises for bytes it cannot decode (a truncated or corrupt file, an unknown format)."""
    return (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


class ImageInputs(Sequence):
    """The images of a dataset, each loaded on access as an RGB ``PIL.Image.Image``.

    ``files`` holds one path per row (``from_image_paths``) or ``None`` when ``arrays`` holds
    the pixels themselves (``from_images``: ``(height, width, 3)`` uint8 each).
    """

    def __init__(self, *, files: tuple[Path, ...] | None = None, arrays: tuple[np.ndarray, ...] | None = None,
                 file_sha256: tuple[str, ...] | None = None, row_numbers: tuple[int, ...] | None = None,
                 max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, reduced: tuple[bool, ...] | None = None) -> None:
        self.files, self.arrays, self.file_sha256 = files, arrays, file_sha256
        #: The pixel budget of one decoded file, and which files it makes decode at a reduced size.
        self.max_image_pixels = max_image_pixels
        self.reduced = reduced if reduced is not None else (False,) * len(files or ())
        #: The dataset row of each item, for messages (a subset's item 0 is some other dataset row).
        self.row_numbers = row_numbers
        self._content: str | None = None

    @property
    def source(self) -> str:
        return "files" if self.files is not None else "in_memory"

    def __len__(self) -> int:
        return len(self.files) if self.files is not None else len(self.arrays or ())

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.subset(range(*index.indices(len(self))))
        row = self._position(index)
        Image = _pillow()
        if self.files is None:
            return Image.fromarray(self.arrays[row])
        return self._load_file(row, Image)

    def subset(self, rows: Any) -> ImageInputs:
        """The images at ``rows``, still loaded on access: a screening rung or a row shard never holds more than
        an extractor's batch of decoded pixels.  Its errors name the dataset's rows."""
        positions = [self._position(row) for row in rows]
        pick = (lambda items: None if items is None else tuple(items[i] for i in positions))
        numbers = tuple(positions) if self.row_numbers is None else tuple(self.row_numbers[i] for i in positions)
        return ImageInputs(files=pick(self.files), arrays=pick(self.arrays), file_sha256=pick(self.file_sha256),
                           row_numbers=numbers, max_image_pixels=self.max_image_pixels,
                           reduced=pick(self.reduced) if self.files is not None else None)

    def _position(self, index: Any) -> int:
        row = int(index)
        if not -len(self) <= row < len(self):
            raise IndexError(f"image row {row} is out of range for {len(self)} images")
        return row % len(self)

    def _load_file(self, position: int, Image: Any) -> Any:
        path = self.files[position]
        row = position if self.row_numbers is None else self.row_numbers[position]
        try:
            data = read_regular(path)  # a FIFO swapped in since the dataset was built must not hang the run
        except OSError as exc:
            raise InputValidationError(f"image row {row} ({str(path)!r}) cannot be read now ({exc.strerror or exc}); "
                                       "it was readable when the dataset was built") from None
        if hashlib.sha256(data).hexdigest() != self.file_sha256[position]:
            raise InputValidationError(f"image row {row} ({str(path)!r}) changed since the dataset was built; rebuild "
                                       "the dataset so its identity matches the files")
        where = f"image row {row} ({str(path)!r})"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the budget has decided
                image, _ = bounded_open(Image, data, self.max_image_pixels, where)
                image.load()
                return upright(image).convert("RGB")
        except InputValidationError:  # over the budget: named already (a ValueError, like Pillow's own)
            raise
        except _decode_errors(Image) as exc:
            raise InputValidationError(f"{where} cannot be decoded ({exc}); replace or drop the file") from None

    def __vertebrae_content__(self) -> str:
        """The content digest dataset identity and artifact keys hash (see vertebrae._base.fingerprint); computed once,
        when first asked (hashing in-memory pixels reads every one)."""
        if self._content is None:
            content = (["files", list(self.file_sha256 or ())] if self.files is not None
                       else ["pixels", content_sha256(list(self.arrays or ()))])
            if any(self.reduced):  # the budget decided how those files decode
                content += ["reduced within max_image_pixels", self.max_image_pixels]
            self._content = content_sha256([LOADER, *content])
        return self._content

    def structure(self) -> dict[str, Any]:
        """Modality and provenance facts for the dataset summary."""
        facts: dict[str, Any] = {"family": "images", "modality": "image", "source": self.source,
                                 "loader": dict(LOADER), "n_images": len(self)}
        if self.files is not None:
            facts["common_root"] = _common_root(self.files)
        return facts

    def __repr__(self) -> str:
        return f"ImageInputs({len(self)} images, {self.source})"


def upright(image: Any) -> Any:
    """``image`` as it is viewed: turned by its EXIF orientation tag (a new image, the tag dropped), as phone cameras
    store a portrait photo sideways and let viewers turn it."""
    from PIL import ImageOps

    return ImageOps.exif_transpose(image)


def _common_root(files: Sequence[Path]) -> str:
    try:
        return os.path.commonpath([str(p.resolve()) for p in files])
    except ValueError:  # paths on different drives
        return ""


def bounded_open(Image: Any, data: bytes, max_image_pixels: int, where: str) -> tuple[Any, bool]:
    """The opened (not yet decoded) image of ``data`` and whether it decodes at a reduced size.

    Only the header is read here.  An image declaring more than ``max_image_pixels`` pixels is drafted to the
    least reduction that fits (JPEG) or refused, naming ``where``, before a pixel is decoded.
    """
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    if width * height <= max_image_pixels:
        return image, False
    for scale in _DRAFT_SCALES:  # JPEG decodes 1/scale as ceil(width / scale) x ceil(height / scale)
        if math.ceil(width / scale) * math.ceil(height / scale) <= max_image_pixels:
            # Pillow picks the largest scale whose result is at least the size asked for: this one
            asked = (max(1, width // scale), max(1, height // scale))
            if image.draft("RGB", asked) is not None and image.size[0] * image.size[1] <= max_image_pixels:
                return image, True
            break
    raise InputValidationError(
        f"{where} declares {width:,} x {height:,} = {width * height:,} pixels, more than max_image_pixels = "
        f"{max_image_pixels:,} (decoded as RGB it would take {width * height * 3 / 2**20:,.0f} MiB), and its "
        f"format ({image.format}) cannot be decoded at a reduced size within it; it is refused before decoding: "
        "downscale the file, drop it, or raise max_image_pixels")


def image_files(paths: Any, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> ImageInputs:
    """Validate image files up front: each exists, is hashed, declares at most ``max_image_pixels`` pixels (or
    decodes at a reduced size within them), and has a header Pillow verifies."""
    max_image_pixels = check_int("from_image_paths", "max_image_pixels", max_image_pixels, minimum=1)
    if isinstance(paths, (str, bytes, os.PathLike)) or not hasattr(paths, "__iter__"):
        raise InputTypeError(f"paths must be a sequence of image file paths (one per row), got {type(paths).__name__}; "
                             "for a folder pass sorted(Path(folder).glob('*.png'))")
    items = list(paths)
    if not items:
        raise InputValidationError("paths is empty; a benchmark needs at least two classes with two rows each")
    Image = _pillow()
    files, digests, reduced = [], [], []
    for row, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            raise InputTypeError(f"paths[{row}] is {type(item).__name__}, not a path")
        path = Path(item)
        if not path.is_file():
            what = "is not a file" if path.exists() else "does not exist"
            raise InputValidationError(f"paths[{row}] ({str(path)!r}) {what}; fix the path or drop row {row}")
        try:
            data = read_regular(path)
        except OSError as exc:
            raise InputValidationError(f"paths[{row}] ({str(path)!r}) cannot be read ({exc.strerror or exc}); check "
                                       "its permissions") from None
        where = f"paths[{row}] ({str(path)!r})"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the budget decides
                opened, smaller = bounded_open(Image, data, max_image_pixels, where)
                Image.open(io.BytesIO(data)).verify()
        except InputValidationError:  # over the budget: named already (a ValueError, like Pillow's own)
            raise
        except _decode_errors(Image) as exc:
            raise InputValidationError(f"{where} is not a readable image ({exc}); it may be truncated or not an "
                                       f"image: replace it or drop row {row}") from None
        if smaller:
            warnings.warn(f"{where} declares more than max_image_pixels = {max_image_pixels:,} pixels; it is decoded "
                          f"at a reduced size ({opened.size[0]} x {opened.size[1]}) within them", DataWarning,
                          stacklevel=3)
        files.append(path)
        digests.append(hashlib.sha256(data).hexdigest())
        reduced.append(smaller)
    return ImageInputs(files=tuple(files), file_sha256=tuple(digests), max_image_pixels=max_image_pixels,
                       reduced=tuple(reduced))


def in_memory_images(images: Any) -> ImageInputs:
    """Validate in-memory images (uint8 arrays or PIL images) and keep each as ``(height, width, 3)`` uint8 RGB."""
    if isinstance(images, np.ndarray) and images.ndim in (3, 4) and images.dtype != object:
        items: list[Any] = list(images)  # a stacked (n, height, width[, channels]) array
    elif isinstance(images, (str, bytes)) or not hasattr(images, "__iter__"):
        raise InputTypeError(f"images must be a sequence of arrays or PIL images (one per row), got "
                             f"{type(images).__name__}")
    else:
        items = list(images)
    if not items:
        raise InputValidationError("images is empty; a benchmark needs at least two classes with two rows each")
    return ImageInputs(arrays=tuple(_rgb_array(item, row) for row, item in enumerate(items)))


def _rgb_array(item: Any, row: int) -> np.ndarray:
    if not isinstance(item, np.ndarray):
        if type(item).__module__.startswith("PIL."):
            return np.asarray(upright(item).convert("RGB"), dtype=np.uint8).copy()
        raise InputTypeError(f"images[{row}] is {type(item).__name__}; pass a uint8 array or a PIL image")
    return rgb_array(item, f"images[{row}]")


def rgb_array(item: np.ndarray, where: str) -> np.ndarray:
    """The pixel rule for an in-memory array (datasets and vision extractors alike): 8-bit, ``(height, width)``
    grayscale or ``(height, width, 1|3|4)`` channels last, made ``(height, width, 3)`` RGB; ``where`` names the row.

    A channels-first ``(3, height, width)`` array would otherwise embed as a 3-pixel-high image, silently.
    """
    if item.dtype != np.uint8:
        raise InputValidationError(f"{where} has dtype {item.dtype}; images are 8-bit: convert with "
                                   "(np.clip(x, 0, 1) * 255).round().astype(np.uint8) for values in [0, 1]")
    if item.ndim == 3 and item.shape[2] == 1:
        item = item[:, :, 0]
    if item.ndim == 2:
        item = np.repeat(item[:, :, None], 3, axis=2)
    elif item.ndim == 3 and item.shape[2] in (3, 4):
        item = item[:, :, :3]  # RGBA -> RGB drops alpha, as Pillow's convert("RGB") does
    else:
        raise InputValidationError(f"{where} has shape {item.shape}; pass (height, width) grayscale or "
                                   "(height, width, 1|3|4) channels-last pixels (for channels first: "
                                   "x.transpose(1, 2, 0))")
    if item.shape[0] == 0 or item.shape[1] == 0:
        raise InputValidationError(f"{where} has no pixels (shape {item.shape})")
    return np.ascontiguousarray(item)
