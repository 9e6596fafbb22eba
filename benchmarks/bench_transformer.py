"""The encoder–decoder Transformer against torch.nn.Transformer with the same weights, and
cached against uncached greedy decoding.

Rows (interleaved rounds in a rotating order, benchmarks/timing.py; times are medians, and the
ratio is the median over rounds of reference time / tfam time, > 1 means tfam is faster):
- forward (teacher forcing): tfam's model vs torch.nn.Transformer + the same embeddings and
  output projection;
- greedy decoding of 100 tokens: tfam with its KV cache vs the usual torch.nn.Transformer loop
  (encoder once, the decoder re-run over the whole prefix at every step);
- greedy decoding of 100 tokens: tfam cached vs tfam uncached (the cache's own gain).

    python benchmarks/bench_transformer.py [--threads 2] [--rounds 5] [--preset transformer_base]
"""

from __future__ import annotations

import argparse

import torch
from timing import interleaved
from torch import nn

import tfam


def copy_into_torch(model: torch.nn.Module, ref: nn.Transformer) -> None:
    """tfam's encoder-decoder weights into torch.nn.Transformer (same layout, post- or pre-norm)."""
    with torch.no_grad():
        for side, layers in (("encoder", ref.encoder.layers), ("decoder", ref.decoder.layers)):
            stack = getattr(model, side)
            for block, layer in zip(stack.blocks, layers):
                layer.self_attn.in_proj_weight.copy_(block.mhsa.qkv.weight)
                layer.self_attn.in_proj_bias.copy_(block.mhsa.qkv.bias)
                layer.self_attn.out_proj.load_state_dict(block.mhsa.out_proj.state_dict())
                layer.linear1.load_state_dict(block.mlp.fc1.state_dict())
                layer.linear2.load_state_dict(block.mlp.fc2.state_dict())
                layer.norm1.load_state_dict(block.norm1.state_dict())
                if side == "encoder":
                    layer.norm2.load_state_dict(block.norm2.state_dict())
                else:
                    layer.multihead_attn.in_proj_weight.copy_(block.cross_attn.qkv.weight)
                    layer.multihead_attn.in_proj_bias.copy_(block.cross_attn.qkv.bias)
                    layer.multihead_attn.out_proj.load_state_dict(
                        block.cross_attn.out_proj.state_dict()
                    )
                    layer.norm2.load_state_dict(block.norm_cross.state_dict())
                    layer.norm3.load_state_dict(block.norm2.state_dict())
        # tfam's post-norm model has no final norms (as the paper); make torch's identities.
        for side in ("encoder", "decoder"):
            ours = getattr(model, f"{side}_norm")
            if isinstance(ours, nn.Identity):
                getattr(ref, side).norm = None
            else:
                getattr(ref, side).norm.load_state_dict(ours.state_dict())


def torch_forward(model, ref: nn.Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    pad = model.config.pad_token_id
    mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    out = ref(
        model.src_embed(src), model.tgt_embed(tgt), tgt_mask=mask, tgt_is_causal=True,
        src_key_padding_mask=src == pad, memory_key_padding_mask=src == pad,
    )  # fmt: skip
    return model.lm_head(out)


def torch_greedy(model, ref: nn.Transformer, src: torch.Tensor, steps: int) -> torch.Tensor:
    """The loop users write around torch.nn.Transformer: no cache, the prefix re-decoded."""
    pad = model.config.pad_token_id
    memory = ref.encoder(model.src_embed(src), src_key_padding_mask=src == pad)
    ys = torch.full((src.shape[0], 1), model.config.bos_token_id, dtype=torch.long)
    for _ in range(steps):
        mask = nn.Transformer.generate_square_subsequent_mask(ys.shape[1])
        out = ref.decoder(
            model.tgt_embed(ys), memory, tgt_mask=mask, tgt_is_causal=True,
            memory_key_padding_mask=src == pad,
        )  # fmt: skip
        token = model.lm_head(out[:, -1]).argmax(-1, keepdim=True)
        ys = torch.cat([ys, token], dim=1)
    return ys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="transformer_base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=100, help="greedy decoding length")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = tfam.create_model(args.preset, vocab_size=8000, dropout=0.0).eval()
    c = model.config
    ref = nn.Transformer(
        d_model=c.dim, nhead=c.heads, num_encoder_layers=c.depth,
        num_decoder_layers=c.decoder_depth, dim_feedforward=c.ffn_dim, dropout=0.0,
        activation=c.activation, layer_norm_eps=c.norm_eps, batch_first=True,
        norm_first=c.norm_first,
    ).eval()  # fmt: skip
    copy_into_torch(model, ref)
    src = torch.randint(4, c.vocab_size, (args.batch, args.src_len))
    tgt = torch.randint(4, c.vocab_size, (args.batch, args.src_len))
    tgt[:, 0] = c.bos_token_id
    steps = args.tokens
    with torch.no_grad():
        diff = (model(src, tgt) - torch_forward(model, ref, src, tgt)).abs().max().item()
        same = torch.equal(
            model.generate(src, max_new_tokens=steps, eos_token_id=[]),
            torch_greedy(model, ref, src, steps),
        )
        rows = []
        (t_ours, t_ref), (_, r_ref) = interleaved(
            [lambda: model(src, tgt), lambda: torch_forward(model, ref, src, tgt)], args.rounds
        )
        rows.append((f"forward B={args.batch} L={args.src_len}", t_ours, "torch.nn.Transformer", t_ref, r_ref))  # fmt: skip
        (t_ours, t_loop, t_unc), (_, r_loop, r_unc) = interleaved(
            [
                lambda: model.generate(src, max_new_tokens=steps, eos_token_id=[]),
                lambda: torch_greedy(model, ref, src, steps),
                lambda: model.generate(src, max_new_tokens=steps, eos_token_id=[], use_cache=False),
            ],
            args.rounds,
        )
        rows.append((f"greedy {steps} tokens", t_ours, "torch.nn.Transformer loop", t_loop, r_loop))  # fmt: skip
        rows.append((f"greedy {steps} tokens", t_ours, "tfam uncached", t_unc, r_unc))  # fmt: skip
    print(
        f"{args.preset} (vocab 8000), torch {torch.__version__}, {args.threads} threads, "
        f"median of {args.rounds} interleaved rounds; max |logit diff| vs torch {diff:.1e}; "
        f"greedy tokens identical: {same}"
    )
    print(f"{'what':<28} {'tfam s':>8}  {'reference':<26} {'ref s':>8}  {'ref/tfam':>8}")
    for what, ours, ref_name, theirs, ratio in rows:
        print(f"{what:<28} {ours:>8.3f}  {ref_name:<26} {theirs:>8.3f}  {ratio:>7.2f}x")


if __name__ == "__main__":
    main()
