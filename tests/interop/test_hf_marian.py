"""Hugging Face MarianMT <-> tfam encoder–decoder Transformer: random tiny configs built offline
(different encoder and decoder depths, shared or separate embeddings, tied or untied heads, an
odd width) give the same logits with padding in source and target, the same greedy and beam
tokens as ``generate``, and survive a round trip, through the API and through `tfam convert`.

Beam search is compared at ``length_penalty=0``: tfam normalises by GNMT's ((5 + |Y|) / 6)^a
and Hugging Face by |Y|^a (with a stopping heuristic), so at a != 0 the two rank finished
hypotheses differently; the last test shows that, under tfam's own score, its choice is never
worse than Hugging Face's."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

import tfam  # noqa: E402
import tfam.cli  # noqa: E402
from tfam.generation import length_penalty_factor  # noqa: E402
from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.layers import KERNELS  # noqa: E402
from tfam.layers.kernels import MathKernel  # noqa: E402
from tfam.layers.position import sinusoidal_table_halves  # noqa: E402
from tfam.models.transformer import Transformer  # noqa: E402

ATOL = 1e-5
VOCAB = 41
PAD = VOCAB - 1  # Marian's layout: the pad id is the last one and starts the decoder
EOS = 0


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True, scope="module")
def quiet_transformers():
    transformers.logging.set_verbosity_error()


def hf_config(**values: object) -> transformers.MarianConfig:
    base = dict(
        vocab_size=VOCAB,
        d_model=24,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=3,  # head width 8
        decoder_attention_heads=3,
        encoder_ffn_dim=40,
        decoder_ffn_dim=40,
        max_position_embeddings=32,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        forced_eos_token_id=None,  # a generate() processor tfam does not have
        activation_function="swish",  # the released checkpoints' activation
        scale_embedding=True,
        dropout=0.0,
        attn_implementation="eager",
    )
    base.update(values)
    return transformers.MarianConfig(**base)


# Random tiny configs: (HF values, fused_qkv on the tfam side).
CONFIGS = {
    "shared-tied": (dict(), True),
    "separate-tied-gelu": (
        dict(
            share_encoder_decoder_embeddings=False,
            encoder_layers=1,
            decoder_layers=2,
            activation_function="gelu",
            scale_embedding=False,
        ),
        False,
    ),
    "shared-untied-relu": (
        dict(tie_word_embeddings=False, activation_function="relu", encoder_layers=3),
        True,
    ),
    "separate-untied-odd-width": (
        dict(
            share_encoder_decoder_embeddings=False,
            tie_word_embeddings=False,
            d_model=15,  # odd: Marian's table has 8 sine and 7 cosine columns
            encoder_ffn_dim=20,
            decoder_ffn_dim=20,
            attn_implementation="sdpa",
        ),
        True,
    ),
}


def randomize(module: nn.Module) -> nn.Module:
    """Unit-scale random weights (seeded by the caller) so that a weight copied to the wrong
    place shows: norm gains near 1, biases of 0.2, matrices std 1/sqrt(fan_in), embeddings of
    0.5 and a random final_logits_bias. The fixed position tables are left alone."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "embed_positions" in name:
                continue
            if p.ndim == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn_like(p))
            elif "embed" in name or "shared" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
        for name in ("final_logits_bias", "logits_bias"):
            bias = getattr(module, name, None)
            if bias is not None:
                bias.copy_(0.3 * torch.randn_like(bias))
    return module.eval()


def hf_model(name: str, seed: int = 0, ending: bool = False) -> transformers.MarianMTModel:
    """A random MarianMTModel of CONFIGS[name]. ``ending``: raise the EOS logit's bias to just
    below the typical best logit, so that decoded rows end at different lengths."""
    torch.manual_seed(seed)
    values, _ = CONFIGS[name]
    hf = randomize(transformers.MarianMTModel(hf_config(**values)))
    if ending:
        g = torch.Generator().manual_seed(7)
        src, tgt = torch.randint(1, PAD, (2, 8, 8), generator=g)
        tgt[:, 0] = PAD
        with torch.no_grad():
            logits = hf(input_ids=src, decoder_input_ids=tgt).logits
            gap = (logits.max(dim=-1).values - logits[..., EOS]).median()
            hf.final_logits_bias[0, EOS] += gap - 0.5
    return hf


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source (3, 9) and target (3, 6) ids with their masks (True = real): rows 1 and 2 end in
    padding on both sides; every target starts with the start token (the pad id)."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, PAD, (3, 9), generator=g)
    tgt = torch.randint(1, PAD, (3, 6), generator=g)
    tgt[:, 0] = PAD
    src_mask, tgt_mask = (
        torch.ones_like(src, dtype=torch.bool),
        torch.ones_like(tgt, dtype=torch.bool),
    )
    src_mask[1, 6:], src_mask[2, 3:] = False, False
    tgt_mask[1, 4:], tgt_mask[2, 2:] = False, False
    src[~src_mask], tgt[~tgt_mask] = PAD, PAD
    return src, src_mask, tgt, tgt_mask


def hf_logits(hf: transformers.MarianMTModel, src, src_mask, tgt, tgt_mask) -> torch.Tensor:
    with torch.no_grad():
        return hf(
            input_ids=src,
            attention_mask=src_mask.long(),
            decoder_input_ids=tgt,
            decoder_attention_mask=tgt_mask.long(),
        ).logits


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_hf_with_padding_on_both_sides(name: str) -> None:
    hf = hf_model(name)
    model = from_hf(hf, fused_qkv=CONFIGS[name][1])
    assert isinstance(model, Transformer)
    c = model.config
    assert (c.depth, c.decoder_depth) == (hf.config.encoder_layers, hf.config.decoder_layers)
    shared = hf.model.encoder.embed_tokens.weight is hf.model.decoder.embed_tokens.weight
    assert c.share_embeddings == shared
    assert (model.src_embed.tokens is model.tgt_embed.tokens) == shared
    assert (model.lm_head.weight is model.tgt_embed.tokens.weight) == c.tie_output
    src, src_mask, tgt, tgt_mask = padded_batch()
    ref = hf_logits(hf, src, src_mask, tgt, tgt_mask)
    with torch.no_grad():
        ours = model(src, tgt, src_mask, tgt_mask)
        default = model(src, tgt)  # tfam's own masks: pad ids, the start token kept visible
    assert ours.shape == ref.shape == (3, 6, VOCAB)
    assert torch.allclose(ours, ref, atol=ATOL, rtol=0), (ours - ref).abs().max()
    assert torch.allclose(default[tgt_mask], ref[tgt_mask], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("logits_bias", [True, False])
def test_to_hf_logits_match_and_round_trip(name: str, logits_bias: bool) -> None:
    model = from_hf(hf_model(name, seed=3), fused_qkv=CONFIGS[name][1])
    if not logits_bias:  # a tfam model without the bias: HF's final_logits_bias is zero
        torch.manual_seed(4)
        model = randomize(Transformer(model.config.replace(logits_bias=False)))
    hf = to_hf(model)
    assert isinstance(hf, transformers.MarianMTModel)
    src, src_mask, tgt, tgt_mask = padded_batch()
    ref = hf_logits(hf, src, src_mask, tgt, tgt_mask)
    with torch.no_grad():
        ours = model(src, tgt, src_mask, tgt_mask)
    assert torch.allclose(ours, ref, atol=ATOL, rtol=0), (ours - ref).abs().max()
    back = from_hf(hf, fused_qkv=model.config.fused_qkv)
    state, again = model.state_dict(), back.state_dict()
    if not logits_bias:  # from_hf always carries Marian's bias (zero here)
        assert back.config == model.config.replace(logits_bias=True)
        assert not again.pop("logits_bias").any()
    else:
        assert back.config == model.config
    assert state.keys() == again.keys()
    for key in state:
        assert torch.equal(state[key], again[key]), key


def test_sinusoids_are_marians_layout() -> None:
    """All sines, then all cosines, at HF's exact values (an odd width included)."""
    for dim in (24, 15):
        hf = transformers.MarianMTModel(
            hf_config(
                d_model=dim,
                encoder_ffn_dim=8,
                decoder_ffn_dim=8,
                encoder_attention_heads=3,
                decoder_attention_heads=3,
            )
        )
        table = hf.model.encoder.embed_positions.weight.detach()
        ours = sinusoidal_table_halves(32, dim)
        assert torch.allclose(ours, table, atol=1e-7, rtol=0)
        half = (dim + 1) // 2
        assert torch.equal(ours[0, :half], torch.zeros(half))  # sin(0)
        assert torch.equal(ours[0, half:], torch.ones(dim - half))  # cos(0)
    model = from_hf(transformers.MarianMTModel(hf_config()))
    assert torch.equal(model.src_embed.position.table, sinusoidal_table_halves(32, 24))


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", ["shared-tied", "separate-tied-gelu", "separate-untied-odd-width"])
def test_greedy_and_beam_tokens_equal_hf_generate(name: str, use_cache: bool) -> None:
    ended_early = 0
    for seed in range(3):
        hf = hf_model(name, seed=seed, ending=True)
        model = from_hf(hf)
        g = torch.Generator().manual_seed(seed)
        src = torch.randint(1, PAD, (4, 8), generator=g)
        mask = torch.ones_like(src, dtype=torch.bool)
        mask[1, 5:], mask[3, 2:] = False, False
        src[~mask] = PAD
        for num_beams in (1, 2, 3, 4):
            kwargs = dict(num_beams=num_beams, length_penalty=0.0, max_new_tokens=10)
            ref = hf.generate(
                input_ids=src,
                attention_mask=mask.long(),
                do_sample=False,
                use_cache=use_cache,
                eos_token_id=EOS,
                pad_token_id=PAD,
                **kwargs,
            )
            ours = model.generate(
                src,
                attention_mask=mask,
                use_cache=use_cache,
                eos_token_id=EOS,
                pad_token_id=PAD,
                **kwargs,
            )
            assert ours.shape == ref.shape and torch.equal(ours, ref), (seed, num_beams, ours, ref)
            ended_early += int((ours == EOS).any(dim=1).sum())
    assert ended_early > 0  # some rows ended (with EOS): finishing and padding were compared


def _gnmt_score(
    model: Transformer, src: torch.Tensor, mask: torch.Tensor, seq: torch.Tensor, alpha: float
) -> float:
    """log p(seq | src) / ((5 + |Y|) / 6)^alpha, |Y| counting the tokens after the start token
    up to and including the first EOS."""
    body = seq[1:]
    ends = (body == EOS).nonzero()
    n = int(ends[0]) + 1 if len(ends) else len(body)
    with torch.no_grad():
        logits = model(src[None], seq[None, :n], mask[None], torch.ones(1, n, dtype=torch.bool))
    logp = torch.log_softmax(logits[0].double(), dim=-1)
    total = float(logp[torch.arange(n), body[:n]].sum())
    return total / length_penalty_factor(n, alpha)


def test_with_a_length_penalty_tfam_ranks_by_gnmt_and_is_never_worse_by_it() -> None:
    """The documented difference: at alpha != 0 the two searches may pick different
    hypotheses, and tfam's pick scores at least as well under tfam's (GNMT) normalisation."""
    differ = 0
    for seed in range(4):
        hf = hf_model("shared-tied", seed=seed, ending=True)
        model = from_hf(hf)
        g = torch.Generator().manual_seed(seed)
        src = torch.randint(1, PAD, (4, 8), generator=g)
        mask = torch.ones_like(src, dtype=torch.bool)
        kwargs = dict(num_beams=3, length_penalty=1.0, max_new_tokens=10)
        ref = hf.generate(input_ids=src, attention_mask=mask.long(), do_sample=False, **kwargs)
        ours = model.generate(src, attention_mask=mask, **kwargs)
        for i in range(src.shape[0]):
            a = _gnmt_score(model, src[i], mask[i], ours[i], 1.0)
            b = _gnmt_score(model, src[i], mask[i], ref[i], 1.0)
            assert a >= b - 1e-9, (seed, i, a, b)
            differ += a > b + 1e-9
    assert differ > 0  # the formulas do rank differently on these models


def test_default_target_mask_keeps_the_start_token_visible() -> None:
    """Marian's start token is the pad id: tfam's default mask must not hide it (every row
    would attend to nothing at position 0), while later pad ids are still masked."""
    model = from_hf(hf_model("shared-tied"))
    src, src_mask, tgt, tgt_mask = padded_batch()
    with torch.no_grad():
        explicit = model(src, tgt, src_mask, tgt_mask)
        default = model(src, tgt)
    assert torch.isfinite(default).all()
    assert torch.equal(default[tgt_mask], explicit[tgt_mask])


def test_contract_rng_device_dtype_mode_and_copies() -> None:
    hf = hf_model("shared-tied").double().train()
    state = torch.get_rng_state()
    model = from_hf(hf)
    back = to_hf(model)
    assert torch.equal(torch.get_rng_state(), state)  # neither direction draws from the RNG
    assert model.training and back.training
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert model.src_embed.position.table.dtype == torch.float64
    assert {p.dtype for p in back.parameters()} == {torch.float64}
    with torch.no_grad():
        hf.model.shared.weight.add_(1.0)
        hf.final_logits_bias.add_(1.0)
    assert not torch.allclose(model.src_embed.tokens.weight, hf.model.shared.weight)
    assert not torch.allclose(model.logits_bias, hf.final_logits_bias[0])
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    assert not torch.allclose(back.lm_head.weight, model.lm_head.weight)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_convert_in_their_dtype(dtype: torch.dtype) -> None:
    hf = hf_model("shared-tied").to(dtype)
    model = from_hf(hf)
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert model.src_embed.position.table.dtype == dtype and model.logits_bias.dtype == dtype
    back = to_hf(model)
    assert {p.dtype for p in back.parameters()} == {dtype}
    assert torch.equal(back.final_logits_bias, hf.final_logits_bias)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (dict(activation_function="mish"), "activation_function='mish'"),
        (dict(decoder_attention_heads=2), "decoder_attention_heads=2"),
        (dict(decoder_ffn_dim=48), "decoder_ffn_dim=48"),
        (
            dict(share_encoder_decoder_embeddings=False, decoder_vocab_size=VOCAB + 3),
            "decoder_vocab_size=44",
        ),
    ],
)
def test_from_hf_refuses_what_tfam_computes_differently(values: dict, message: str) -> None:
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=message):
        from_hf(transformers.MarianMTModel(hf_config(**values)))


def test_from_hf_refuses_other_position_tables_and_other_classes() -> None:
    hf = hf_model("shared-tied")
    with torch.no_grad():
        hf.model.decoder.embed_positions.weight[3, 0] += 0.5
    with pytest.raises(ValueError, match="model.decoder.embed_positions.weight is not Marian's"):
        from_hf(hf)
    with pytest.raises(ValueError, match="hf_model=MarianModel is invalid"):
        from_hf(transformers.MarianModel(hf_config()))


def test_from_hf_warns_about_dropouts_tfam_lacks() -> None:
    with pytest.warns(UserWarning, match="activation_dropout=0.1 is dropped"):
        from_hf(transformers.MarianMTModel(hf_config(activation_dropout=0.1)))


def marian_shaped(**overrides: object) -> Transformer:
    values = dict(
        dim=12,
        depth=1,
        heads=3,
        ffn_dim=16,
        vocab_size=VOCAB,
        max_positions=16,
        norm_first=False,
        sinusoid_layout="halves",
        activation="silu",
    )
    values.update(overrides)
    return tfam.create_model("transformer", **values)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(position="learned"), "position='learned'"),
        (dict(norm_first=True), "norm_first=True"),
        (dict(final_norm=True), "final_norm=True"),
        (dict(norm="rmsnorm"), "norm='rmsnorm'"),
        (dict(norm_eps=1e-6), "norm_eps=1e-06"),
        (dict(qkv_bias=False), "qkv_bias=False"),
        (dict(activation="swiglu"), "activation='swiglu'"),
    ],
)
def test_to_hf_refuses_what_marian_cannot_express(overrides: dict, message: str) -> None:
    model = marian_shaped(**overrides)
    with pytest.raises(ValueError, match=message):
        to_hf(model)


def test_to_hf_refuses_other_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KERNELS, "some_approximation", MathKernel)
    model = marian_shaped()
    model.set_attention("some_approximation")
    with pytest.raises(ValueError, match=r"attention='some_approximation'.*set_attention"):
        to_hf(model)


def test_to_hf_warns_that_drop_path_is_dropped() -> None:
    with pytest.warns(UserWarning, match="drop_path=0.1 is dropped: MarianMT has no stochastic"):
        to_hf(marian_shaped(drop_path=0.1))


def test_tfam_convert_round_trip(tmp_path, capsys) -> None:
    """hf-to-tfam from a saved MarianMTModel directory, then tfam-to-hf back, each checked by
    the command itself; the final HF model computes the original's logits."""
    hf = hf_model("separate-tied-gelu", seed=5)
    hf.save_pretrained(tmp_path / "hf")
    code = tfam.cli.main(["convert", "hf-to-tfam", str(tmp_path / "hf"), str(tmp_path / "tfam")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tfam Transformer" in out and "decoder_depth=2" in out and "(ok," in out
    code = tfam.cli.main(["convert", "tfam-to-hf", str(tmp_path / "tfam"), str(tmp_path / "hf2")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "MarianMTModel" in out and "(ok," in out
    again = transformers.MarianMTModel.from_pretrained(
        tmp_path / "hf2", local_files_only=True
    ).eval()
    assert again.config.decoder_start_token_id == PAD and again.config.forced_eos_token_id is None
    batch = padded_batch()
    assert torch.allclose(hf_logits(again, *batch), hf_logits(hf, *batch), atol=ATOL, rtol=0)


def test_to_hf_warns_when_shared_embeddings_come_untied() -> None:
    """transformers 5.x ties MarianMT's encoder and decoder embeddings only together with
    tie_word_embeddings: shared but untied tfam embeddings become two equal HF matrices."""
    torch.manual_seed(0)
    model = randomize(marian_shaped(share_embeddings=True, tie_output=False))
    with pytest.warns(UserWarning, match="share_embeddings=True with tie_output=False"):
        hf = to_hf(model)
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(1, PAD, (2, 2, 6), generator=g)
    tgt[:, 0] = model.config.bos_token_id
    with torch.no_grad():
        ref = hf(input_ids=src, decoder_input_ids=tgt).logits
        assert torch.allclose(model(src, tgt), ref, atol=ATOL, rtol=0)


def test_tfams_interleaved_sinusoids_convert_by_reordering_features() -> None:
    """A tfam-native post-norm Transformer (interleaved table, relu, different depths, odd
    width) -> MarianMT: same logits, same greedy and beam tokens; back in tfam it has the
    halves layout and still the same logits."""
    torch.manual_seed(0)
    model = randomize(
        marian_shaped(
            dim=15,
            depth=2,
            decoder_depth=3,
            activation="relu",
            share_embeddings=False,
            sinusoid_layout="interleaved",
        )
    )
    assert model.config.sinusoid_layout == "interleaved"
    hf = to_hf(model)
    src, src_mask, tgt, tgt_mask = padded_batch()
    src[~src_mask], tgt[~tgt_mask] = 0, 0  # this model's pad id
    tgt[:, 0] = model.config.bos_token_id
    ref = hf_logits(hf, src, src_mask, tgt, tgt_mask)
    with torch.no_grad():
        ours = model(src, tgt, src_mask, tgt_mask)
    assert torch.allclose(ours, ref, atol=ATOL, rtol=0), (ours - ref).abs().max()
    eos = model.config.eos_token_id
    for num_beams in (1, 3):
        kwargs = dict(num_beams=num_beams, length_penalty=0.0, max_new_tokens=8)
        expected = hf.generate(input_ids=src, attention_mask=src_mask.long(), **kwargs)
        tokens = model.generate(src, attention_mask=src_mask, **kwargs)
        assert tokens.shape == expected.shape
        # HF's beam search fills finished rows with `pad_token_id or eos_token_id`: a pad id
        # of 0 (this model's) reads as unset and it fills with EOS. tfam fills with the pad id.
        ended = (tokens == eos).long()
        after_eos = ended.cumsum(dim=1) - ended > 0
        assert after_eos.any() or num_beams == 1  # a beam row ended early: filling compared
        assert torch.equal(tokens[~after_eos], expected[~after_eos])
        assert (tokens[after_eos] == 0).all()
        filler = eos if num_beams > 1 else 0
        assert (expected[after_eos] == filler).all()
    back = from_hf(hf)
    assert back.config == model.config.replace(sinusoid_layout="halves", logits_bias=True)
    with torch.no_grad():
        again = back(src, tgt, src_mask, tgt_mask)
    assert torch.allclose(again, ours, atol=ATOL, rtol=0)


def test_tfam_convert_takes_a_tfam_model_directory(tmp_path, capsys) -> None:
    torch.manual_seed(1)
    model = randomize(marian_shaped(depth=2, activation="relu", sinusoid_layout="interleaved"))
    model.save_pretrained(tmp_path / "run")
    code = tfam.cli.main(["convert", "tfam-to-hf", str(tmp_path / "run"), str(tmp_path / "hf")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "MarianMTModel" in out and "(ok," in out
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf", local_files_only=True)
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(3, PAD, (2, 2, 7), generator=g)
    tgt[:, 0] = model.config.bos_token_id
    with torch.no_grad():
        ref = hf.eval()(input_ids=src, decoder_input_ids=tgt).logits
        assert torch.allclose(model(src, tgt), ref, atol=ATOL, rtol=0)
