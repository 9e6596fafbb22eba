"""AdamW parameter groups (who gets weight decay) and the warmup + cosine schedule."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tfam
from tfam.training import (
    TrainConfig,
    build_optimizer,
    build_scheduler,
    param_groups,
    split_decay,
    warmup_cosine_factor,
)
from tfam.training.optim import WarmupCosine


def tiny_vit() -> nn.Module:
    return tfam.create_model(
        "vit", image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=32, depth=2, heads=2
    )


def test_vit_groups_follow_the_rule() -> None:
    model = tiny_vit()
    decay, no_decay = split_decay(model)
    params = dict(model.named_parameters())
    assert sorted(decay + no_decay) == sorted(params)  # every parameter, once
    assert not set(decay) & set(no_decay)
    # The rule, written independently: matrices decay, except the position table and [CLS].
    for name, p in params.items():
        expect_decay = p.ndim >= 2 and name not in ("pos_embed", "cls_token")
        assert (name in decay) == expect_decay, name
    assert "pos_embed" in no_decay and "cls_token" in no_decay
    assert "head.weight" in decay and "patch_embed.proj.weight" in decay
    assert "head.bias" in no_decay and any(n.endswith("norm1.weight") for n in no_decay)


class Custom(nn.Module):
    """Special tokens by suffix, a module-level no_weight_decay() list, a nested one."""

    def __init__(self) -> None:
        super().__init__()
        self.dist_token = nn.Parameter(torch.zeros(1, 1, 4))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, 4))
        self.table = nn.Parameter(torch.zeros(5, 4))  # 2-D, but listed below
        self.proj = nn.Linear(4, 4)
        self.inner = Inner()
        self.frozen = nn.Parameter(torch.zeros(3, 3), requires_grad=False)

    def no_weight_decay(self) -> set[str]:
        return {"table"}


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rel_bias = nn.Parameter(torch.zeros(7, 2))
        self.fc = nn.Linear(4, 4)

    def no_weight_decay(self) -> list[str]:
        return ["rel_bias"]  # relative to this module: inner.rel_bias


def test_custom_model_no_decay_sources() -> None:
    decay, no_decay = split_decay(Custom())
    assert sorted(decay) == ["inner.fc.weight", "proj.weight"]
    assert sorted(no_decay) == [
        "dist_token",
        "inner.fc.bias",
        "inner.rel_bias",
        "mask_token",
        "proj.bias",
        "table",
    ]  # the frozen parameter is in neither


def test_weight_decay_is_decoupled_and_only_on_the_decay_group() -> None:
    model = tiny_vit()
    lr, wd = 0.1, 0.5
    opt = build_optimizer(model, lr=lr, weight_decay=wd)
    assert [g["weight_decay"] for g in opt.param_groups] == [wd, 0.0]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # zero gradient: only the decay term can move a weight
    opt.step()
    decay, _ = split_decay(model)
    for name, p in model.named_parameters():
        expected = before[name] * (1 - lr * wd) if name in decay else before[name]
        torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-7, msg=name)


def test_param_groups_validates() -> None:
    with pytest.raises(ValueError, match="weight_decay=-1"):
        param_groups(tiny_vit(), -1)
    with pytest.raises(ValueError, match="lr=0"):
        build_optimizer(tiny_vit(), lr=0)


def test_schedule_factor_values() -> None:
    w, total, floor = 10, 110, 0.01
    f = [warmup_cosine_factor(s, w, total, floor) for s in range(total + 5)]
    assert f[0] == pytest.approx(1 / w)
    assert f[w - 1] == pytest.approx(1.0)  # end of warmup: full rate
    assert f[w] == pytest.approx(1.0)  # cosine starts at the top
    assert all(a < b for a, b in zip(f[: w - 1], f[1:w]))  # linear rise
    assert all(a >= b for a, b in zip(f[w:], f[w + 1 :]))  # then never rises
    assert f[w + (total - w) // 2] == pytest.approx((1 + floor) / 2)  # half-way down
    assert f[total] == pytest.approx(floor) and f[-1] == pytest.approx(floor)  # floor, stays
    assert warmup_cosine_factor(0, 0, 10, 0.0) == 1.0  # no warmup


def test_retargeted_cosine_continues_without_a_jump_and_ends_at_the_new_step() -> None:
    w, total, floor = 10, 110, 0.01
    plain = WarmupCosine(w, total, floor)
    assert [plain(s) for s in range(total + 3)] == [
        warmup_cosine_factor(s, w, total, floor) for s in range(total + 3)
    ]
    for new_total in (70, 200):  # a budget that shrank, one that grew
        f = WarmupCosine(w, total, floor)
        f.retarget(40, new_total)
        assert f(40) == pytest.approx(plain(40), rel=1e-12)  # the same rate at the re-plan
        after = [f(s) for s in range(40, new_total + 3)]
        assert all(a >= b for a, b in zip(after, after[1:]))  # then never rises
        assert f(new_total) == pytest.approx(floor) and f(new_total + 2) == pytest.approx(floor)
        assert f(new_total - 1) > floor  # the floor is reached at the new end, not before
    # Shrunk, the rate falls faster than it would have; grown, slower.
    shrunk, grown = WarmupCosine(w, total, floor), WarmupCosine(w, total, floor)
    shrunk.retarget(40, 70)
    grown.retarget(40, 200)
    assert shrunk(60) < plain(60) < grown(60)
    # During warmup only the end moves: the plain schedule to the new end.
    early = WarmupCosine(w, total, floor)
    early.retarget(5, 70)
    assert [early(s) for s in range(75)] == [
        warmup_cosine_factor(s, w, 70, floor) for s in range(75)
    ]
    # A factor pickled before anchors existed (no anchor fields) is the plain schedule.
    old = WarmupCosine(w, total, floor)
    del old.anchor_step, old.anchor_t
    assert old(50) == plain(50)


def test_scheduler_drives_the_optimizer_lr() -> None:
    model = tiny_vit()
    base, min_lr, warmup, total = 2e-3, 1e-5, 4, 20
    opt = build_optimizer(model, lr=base)
    sched = build_scheduler(opt, warmup, total, min_lr=min_lr)
    seen = []
    for _ in range(total):
        seen.append(opt.param_groups[0]["lr"])  # the lr this optimiser step uses
        opt.step()
        sched.step()
    for step, lr in enumerate(seen):
        expected = base * warmup_cosine_factor(step, warmup, total, min_lr / base)
        assert lr == pytest.approx(expected, rel=1e-12)
    assert seen[warmup - 1] == pytest.approx(base)
    assert opt.param_groups[0]["lr"] == pytest.approx(min_lr)  # after the last step
    assert all(g["lr"] == opt.param_groups[0]["lr"] for g in opt.param_groups)
    # A cosine, not a line: a quarter of the way into the decay it is above the midpoint.
    quarter = warmup + (total - warmup) // 4
    expected = min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi / 4))
    assert seen[quarter] == pytest.approx(expected)


def test_schedule_and_config_errors_name_the_argument() -> None:
    opt = build_optimizer(tiny_vit(), lr=1e-3)
    with pytest.raises(ValueError, match="warmup_steps=11"):
        build_scheduler(opt, 11, 10)
    with pytest.raises(ValueError, match="min_lr=0.1"):
        build_scheduler(opt, 1, 10, min_lr=0.1)
    with pytest.raises(ValueError, match="accum_steps=0"):
        TrainConfig(accum_steps=0)
    with pytest.raises(ValueError, match="label_smoothing=1.5"):
        TrainConfig(label_smoothing=1.5)
    with pytest.raises(ValueError, match="warmup_epochs=3"):
        TrainConfig(epochs=2, warmup_epochs=3)
