"""explain's attention FLOPs and score memory come from the kernel's cost(): math's are the
dense counts explain always gave; a kernel that computes fewer pairs (causal sdpa, a toy local
kernel) shows fewer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tfam  # noqa: F401  (registers the kernels)
from tfam.explain import FLOPS_PER_ELEMENT, ExplainTable, explain
from tfam.layers.kernels import KERNELS, AttentionCost, MathKernel, causal_pairs, register_kernel

VIT = dict(image_size=(8, 12), patch_size=4, in_channels=1, dim=10, heads=2, depth=1, num_classes=3)
GPT = dict(vocab_size=11, max_positions=9, dim=8, heads=2, depth=1)


class ToyLocalKernel(MathKernel, register=False):
    """math's output, but it claims to compute only the 2 keys before each query: cost() is
    all explain reads."""

    name = "toy_cost_local"

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        return AttentionCost(flops=4.0 * lq * min(lk, 2) * head_dim, score_elements=lq * 2)


@pytest.fixture(scope="module", autouse=True)
def _toy_registered() -> Iterator[None]:
    before = dict(KERNELS)
    register_kernel(ToyLocalKernel)
    yield
    del KERNELS[ToyLocalKernel.name]
    assert KERNELS == before


def rows(table: ExplainTable, block: str = "1") -> dict[str, object]:
    return {r.step: r for r in table.rows if r.block == block}


def attention_flops(b: int, h: int, pairs: int, dh: int) -> dict[str, int]:
    """The scores, softmax and weighted-sum rows for ``pairs`` (query, key) pairs per head."""
    n = b * h * pairs
    return {
        "scores Q K^T / sqrt(Dh)": 2 * n * dh + n,
        "softmax": FLOPS_PER_ELEMENT["softmax"] * n,
        "weighted sum alpha V": 2 * n * dh,
    }


def check(table: ExplainTable, step: str, expected: dict[str, int], score_bytes: int) -> None:
    found = rows(table)
    for name, flops in expected.items():
        assert found[name].flops == flops, name
    assert found[step].score_bytes == score_bytes


def test_math_gives_the_dense_counts_explain_always_gave() -> None:
    b, n, h, dh = 2, 7, 2, 5  # ViT toy: 6 patches + [CLS]
    table = explain("vit", batch_size=b, attention="math", **VIT)
    assert rows(table)["scores Q K^T / sqrt(Dh)"].flops == 2156  # the number before cost()
    check(table, "MHSA", attention_flops(b, h, n * n, dh), n * n * 4 * h * b)
    # Causal: math forms every score and masks after, so it is still counted dense.
    gpt = explain("gpt", seq_len=6, attention="math", **GPT)
    step = next(r.step for r in gpt.rows if r.level == 0 and r.score_bytes)
    check(gpt, step, attention_flops(1, 2, 36, 4), 36 * 4 * 2)
    assert "counted dense as attention='math'" in rows(gpt)["scores Q K^T / sqrt(Dh)"].note


def test_a_kernel_that_computes_fewer_pairs_shows_fewer_flops() -> None:
    # Causal sdpa skips the keys after each query (its default cost()).
    gpt = explain("gpt", seq_len=6, attention="sdpa", **GPT)
    step = next(r.step for r in gpt.rows if r.level == 0 and r.score_bytes)
    check(gpt, step, attention_flops(1, 2, causal_pairs(6, 6), 4), 36 * 4 * 2)
    assert "computes 21 of the 36" in rows(gpt)["scores Q K^T / sqrt(Dh)"].note
    # A kernel's own cost(): O(n) pairs and O(n) score memory.
    b, n, h, dh = 2, 7, 2, 5
    table = explain("vit", batch_size=b, attention=ToyLocalKernel.name, **VIT)
    check(table, "MHSA", attention_flops(b, h, n * 2, dh), n * 2 * 4 * h * b)
    dense = explain("vit", batch_size=b, attention="math", **VIT)
    assert table.total_flops < dense.total_flops
    assert "holds 14 score entries per head" in rows(table)["MHSA"].note


BUILT_IN = sorted(k for k in KERNELS if k != ToyLocalKernel.name)


@pytest.mark.parametrize("family,overrides", [("vit", VIT), ("gpt", GPT)])
@pytest.mark.parametrize("kernel", BUILT_IN)
def test_every_kernel_is_explained_from_its_cost(family, overrides, kernel):
    """Every registered kernel is explained (those that never form weights too: the trace then
    runs the plain forward), its attention row's score FLOPs are its cost()'s pairs, and the
    parameter total is the real count."""
    model = tfam.create_model(family, attention=kernel, **overrides)
    table = explain(model)
    assert table.total_params == sum(p.numel() for p in model.parameters())
    c = model.config
    n = table.symbols["N"] + 1 if family == "vit" else c.max_positions
    mha = next(m for m in model.modules() if isinstance(m, tfam.layers.MultiHeadAttention))
    cost = mha.kernel.cost(n, n, c.head_dim, is_causal=family == "gpt")
    pairs = round(cost.flops / (4 * c.head_dim))
    softmax = next(r for r in table.rows if r.block == "1" and r.step == "softmax")
    assert softmax.flops == FLOPS_PER_ELEMENT["softmax"] * c.heads * pairs
