"""Opening image files safely: one place for PIL, shared by user images (preprocess.py) and
image folders (folder.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def open_image(path: Path, verify: bool = False):  # noqa: ANN201  (a PIL.Image.Image)
    """Open an image file with Pillow, EXIF orientation applied; a ValueError that names the
    file when it is missing, not an image, corrupt, or larger than Pillow's decompression-bomb
    limit (``PIL.Image.MAX_IMAGE_PIXELS``). ``verify`` only checks the file (no pixels are
    decoded) and returns the unloaded image, whose size and mode are known."""
    import warnings

    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"image file {str(path)!r} not found")
    if not path.is_file():
        raise ValueError(f"image {str(path)!r} is not a file; expected a PNG or JPEG image")
    try:
        with warnings.catch_warnings():
            # A huge image is refused, not decoded: Pillow warns above MAX_IMAGE_PIXELS.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            if verify:
                with Image.open(path) as im:
                    im.verify()
                return im
            with Image.open(path) as im:
                im.load()
                im = ImageOps.exif_transpose(im)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        limit = Image.MAX_IMAGE_PIXELS
        raise ValueError(
            f"image {str(path)!r} is refused: it has more pixels than Pillow decodes safely "
            f"(PIL.Image.MAX_IMAGE_PIXELS = {limit:,}; a decompression bomb?)"
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(
            f"cannot read {str(path)!r} as an image ({reason}); expected a file Pillow can open "
            "(PNG, JPEG, BMP, ...)"
        ) from None
    return im


def to_mode(im, channels: int):  # noqa: ANN001, ANN201  (PIL images)
    """Grayscale (``channels == 1``) or RGB: 16-bit grayscale scaled to 8 bits, transparency
    composited over white."""
    from PIL import Image

    if im.mode.startswith("I;16"):
        # 16-bit grayscale: Pillow's convert("L") would clip, so scale to 8 bits by hand.
        arr = np.asarray(im, dtype=np.float64) / 257.0
        im = Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), mode="L")
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        # Composite transparency over white, as a viewer shows it; the inversion rule then
        # treats the white canvas like paper.
        rgba = im.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        im = Image.alpha_composite(canvas, rgba)
    return im.convert("L" if channels == 1 else "RGB")


def resize_image(im, size: tuple[int, int]):  # noqa: ANN001, ANN201  (PIL images)
    """Resize to (height, width): box filter (an area average) when shrinking, bilinear when
    enlarging; unchanged when already that size."""
    from PIL import Image

    h, w = size
    if (im.height, im.width) == (h, w):
        return im
    shrinking = im.width >= w and im.height >= h
    return im.resize((w, h), Image.Resampling.BOX if shrinking else Image.Resampling.BILINEAR)


__all__ = ["open_image", "resize_image", "to_mode"]
