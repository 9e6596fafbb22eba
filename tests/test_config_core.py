"""BaseConfig on its own: bricks are built from it; its checks are fast for any size."""

from __future__ import annotations

import pytest

from tfam.config import BaseConfig, divisors
from tfam.models.vit import ViTConfig


def test_divisors_are_the_first_divisors_in_order():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(97) == [1, 97]
    assert divisors(2**40, limit=5) == [1, 2, 4, 8, 16]
    assert divisors(1) == [1]


def test_bad_heads_for_a_huge_dim_is_reported_at_once():
    """The valid values are found in O(sqrt(n)) steps; looping to n (as before) would not end."""
    with pytest.raises(ValueError, match=r"heads=7 is invalid: dim=1099511627776 .* \[1, 2, 4"):
        BaseConfig(dim=2**40, heads=7)
    with pytest.raises(ValueError, match=r"patch_size=7 is invalid: .*height 1000000006.*\[1, 2"):
        ViTConfig(image_size=1_000_000_006, patch_size=7)


def test_position_must_be_one_the_family_implements():
    assert BaseConfig(dim=8, heads=2, position="rope").position == "rope"
    # ViT takes RoPE (2-D on its patch grid) but no 1-D score bias.
    assert ViTConfig(position="rope").position == "rope"
    with pytest.raises(ValueError, match=r"position='alibi' is invalid: expected one of 'learned'"):
        ViTConfig(position="alibi")
