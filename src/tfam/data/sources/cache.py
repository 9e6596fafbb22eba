"""Where tfam keeps what it reads or builds once (downloaded archives, cleaned texts,
trained tokenizers)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["tfam_cache_dir"]


def tfam_cache_dir() -> Path:
    """``$TFAM_CACHE`` or ``~/.cache/tfam``: where tfam keeps what it builds once (tokenizers)."""
    return Path(os.environ.get("TFAM_CACHE") or Path.home() / ".cache" / "tfam").expanduser()
