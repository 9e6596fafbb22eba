"""Shared fixtures: a seeded RNG for every test and float64 reference formulas, and
``requires_data`` for the tests that need a data set installed outside pip.

The thread count is left alone on purpose: tests must pass with whatever the machine gives.
Only under pytest-xdist (``make test`` runs ``-n auto``) does each worker take its share of the
cores, so that N workers do not run N times the cores' threads.
"""

from __future__ import annotations

import math
import os
import random
import signal
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

SEED = 0

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(
        max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    )

# ---------------------------------------------------------------------------------------------
# Data sets that `make data` / `make install` put outside the repository

# Each name (the catalog's, plus "minilm" for the packaged weights) -> the finders whose
# FileNotFoundError says it is absent and how to install it: (module, function, arguments).
_DATA_FINDERS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "fashion-mnist": (("tfam.data.sources.images", "find_fashion_mnist", ()),),
    "kjv": (("tfam.data.sources.sword", "find_module", ("engKJV2006eb",)),),
    "kjv-rv": (
        ("tfam.data.sources.sword", "find_module", ("engKJV2006eb",)),
        ("tfam.data.sources.sword", "find_module", ("spaRV1909eb",)),
    ),
    "sentiment": (("tfam.data.sources.sentiment", "find_sentiment_sdist", ()),),
    "turkish-pos": (("tfam.data.sources.treebank", "treebank_files", ()),),
    "minilm": (("tfam.data.text.wordpiece", "minilm_dir", ()),),
}
# TFAM_TEST_HIDE_DATA=fashion-mnist,minilm (or "all") makes those data sets absent for this test
# run, to check that every test needing one is skipped with the reason, not failed.
HIDE_ENV = "TFAM_TEST_HIDE_DATA"


def _hidden() -> set[str]:
    names = {n.strip() for n in os.environ.get(HIDE_ENV, "").split(",") if n.strip()}
    if "all" in names:
        return set(_DATA_FINDERS)
    unknown = names - set(_DATA_FINDERS)
    if unknown:
        raise ValueError(f"{HIDE_ENV}: {sorted(unknown)} unknown; valid: {sorted(_DATA_FINDERS)}")
    return names


def _hide_data(names: set[str]) -> None:
    """Make ``names`` absent for this run by emptying the places their finders search (so the
    finders still give their own messages, and tests that point them elsewhere still work)."""
    import tempfile
    from pathlib import Path

    from tfam.data.sources import images, sword, treebank
    from tfam.data.text import wordpiece

    for name in names:
        if name == "fashion-mnist":
            images.FASHION_MNIST_DIRS[:] = []
            os.environ.pop("TFAM_DATA", None)
        elif name in ("kjv", "kjv-rv"):
            sword.sword_paths = lambda: [
                Path(p) for p in os.environ.get("SWORD_PATH", "").split(os.pathsep) if p
            ]
        elif name == "sentiment":  # an empty cache (subprocesses inherit it too)
            os.environ["TFAM_CACHE"] = tempfile.mkdtemp(prefix="tfam-hidden-cache-")
            os.environ.pop("TFAM_DATA", None)
        elif name == "turkish-pos":
            treebank.TREEBANK_FILES = ("data/hidden-web.conllu", "data/hidden-wiki.conllu")
        elif name == "minilm":
            wordpiece.MINILM_PACKAGE = "tfam_hidden_minilm"


def data_missing(name: str) -> str | None:
    """Why data set ``name`` cannot be used here (the finder's message: where it looked and
    how to install it), or None when it is installed."""
    import importlib

    for module_name, function, args in _DATA_FINDERS[name]:
        try:
            getattr(importlib.import_module(module_name), function)(*args)
        except FileNotFoundError as err:
            return str(err).splitlines()[0]
    return None


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "requires_data(*names): skipped, with the reason, when one of these data sets is not "
        "installed (fashion-mnist, kjv, kjv-rv, sentiment, turkish-pos, minilm; `make data`, "
        "`make install`)",
    )
    hidden = _hidden()
    if hidden:
        _hide_data(hidden)


def pytest_collection_modifyitems(config, items) -> None:
    """``@pytest.mark.requires_data("fashion-mnist")`` on a test (or ``pytestmark`` on a module):
    skipped with the finder's reason when a named data set is absent, before any fixture runs."""
    missing: dict[str, str | None] = {}
    for item in items:
        for mark in item.iter_markers("requires_data"):
            for name in mark.args:
                if name not in _DATA_FINDERS:
                    raise ValueError(
                        f"{item.nodeid}: requires_data({name!r}): expected one of "
                        f"{sorted(_DATA_FINDERS)}"
                    )
                if name not in missing:
                    missing[name] = data_missing(name)
                if missing[name]:
                    item.add_marker(
                        pytest.mark.skip(reason=f"{name} is not installed: {missing[name]}")
                    )


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    """Every test starts from the same global RNG state, so failures reproduce."""
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)


class _SigintAt:
    """An augmentation that delivers Ctrl-C (SIGINT) to the process on its k-th call (k = 0:
    never): a run stopped at a known step, from inside the training loop."""

    def __init__(self, k: int) -> None:
        self.k, self.calls = k, 0

    def __call__(self, images: Tensor, generator: torch.Generator) -> Tensor:
        self.calls += 1
        if self.calls == self.k:
            signal.raise_signal(signal.SIGINT)
        return images


@pytest.fixture
def sigint_at() -> type[_SigintAt]:
    """``sigint_at(k)``: an augmentation that presses Ctrl-C on its k-th call."""
    return _SigintAt


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny models: on a loaded 2-core machine two OpenMP
    threads wait on each other (a tiny ViT forward took ~0.4 s against ~3 ms on one thread).
    A module opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def rng() -> torch.Generator:
    """A private generator for tests that draw their own inputs (keeps module init separate)."""
    return torch.Generator().manual_seed(SEED)


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(Dh) + bias, masked) V written from the formula, no kernel code.

    q (..., Lq, Dh), k and v (..., Lk, Dh); mask bool (True = may attend) and bias float,
    both broadcastable to (..., Lq, Lk). Rows with no allowed key are defined as zero weights
    (and so a zero output). Runs in the dtype it is given (float64 for references).
    -> (out (..., Lq, Dh), weights (..., Lq, Lk))
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        scores = scores.masked_fill(~mask, float("-inf"))
        has_key = mask.any(dim=-1, keepdim=True)
        # An empty row would be softmax(-inf, ..., -inf) = NaN; give it finite scores (so the
        # backward stays finite too), then zero its weights: "no key -> zero output".
        scores = torch.where(has_key, scores, torch.zeros((), dtype=scores.dtype))
        weights = torch.softmax(scores, dim=-1) * has_key
    return weights @ v, weights


@pytest.fixture(scope="session")
def ref_attention() -> Callable[..., tuple[Tensor, Tensor]]:
    """The float64-ready reference attention formula (see ``reference_attention``)."""
    return reference_attention


def reference_mhsa(
    mha: torch.nn.Module,
    x: Tensor,
    context: Tensor | None = None,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """Concat(head_1..head_H) W_O with head_h = Attention(X W_Q^h, C W_K^h, C W_V^h), computed
    with explicit per-head loops from a tfam MultiHeadAttention's weights.

    x (B, Lq, D), context (B, Lk, D) -> (B, Lq, D).
    """
    d, h = mha.dim, mha.heads
    dh = d // h
    if mha.fused_qkv:
        w, b = mha.qkv.weight, mha.qkv.bias
        wq, wk, wv = w[:d], w[d : 2 * d], w[2 * d :]
        bq, bk, bv = (None, None, None) if b is None else (b[:d], b[d : 2 * d], b[2 * d :])
    else:
        wq, wk, wv = mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight
        bq, bk, bv = mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias
    c = x if context is None else context

    def proj(t: Tensor, weight: Tensor, b: Tensor | None) -> Tensor:
        out = t @ weight.T
        return out if b is None else out + b

    q, k, v = proj(x, wq, bq), proj(c, wk, bk), proj(c, wv, bv)
    heads = []
    for i in range(h):
        sl = slice(i * dh, (i + 1) * dh)
        m = None if mask is None else mask.expand(x.shape[0], h, x.shape[1], c.shape[1])[:, i]
        bi = None if bias is None else bias.expand(x.shape[0], h, x.shape[1], c.shape[1])[:, i]
        out_i, _ = reference_attention(q[..., sl], k[..., sl], v[..., sl], m, bi)
        heads.append(out_i)
    return proj(torch.cat(heads, dim=-1), mha.out_proj.weight, mha.out_proj.bias)


@pytest.fixture(scope="session")
def ref_mhsa() -> Callable[..., Tensor]:
    """The per-head-loop reference of multi-head attention (see ``reference_mhsa``)."""
    return reference_mhsa


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor (elements) any operation makes, forward and backward."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.fixture(scope="session")
def largest_tensor() -> type[TorchDispatchMode]:
    """``with largest_tensor() as spy: ...; spy.largest``: the memory tests' witness that no
    operation made a tensor larger than the bound (an O(E) or O(L * window) kernel)."""
    return _LargestTensor
