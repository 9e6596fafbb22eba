"""tfam's GPT vs Hugging Face GPT-2 on the same weights, in the same run: greedy generation
speed with the KV cache, the cache's own gain, and the forward pass.

The models: Hugging Face ``GPT2LMHeadModel(GPT2Config())`` (GPT-2 small, 124M, random weights,
seeded) and the tfam model converted from it with ``tfam.interop.from_hf``, so both hold the
same weights (tfam's shape is the ``gpt2`` preset). Both run under ``torch.inference_mode()``
with the same number of threads.

Rows (each row interleaves its calls, one of each per round, and reports medians, so machine
noise hits both alike; "ratio" is the median over rounds of reference time / tfam time, > 1
means tfam is faster):
- greedy, cached: ``model.generate(prompt, max_new_tokens=N, use_cache=True)`` vs Hugging
  Face ``generate(max_new_tokens=N, do_sample=False, use_cache=True)``, end-of-text disabled on
  both so every run makes exactly N tokens; the tokens are checked identical;
- greedy, tfam cached vs tfam uncached (every step re-reads the whole sequence);
- forward over the prompt plus N tokens: tfam vs Hugging Face, with the max |logit diff|;
- the weight-read floor: N rounds of one single-row product with every weight matrix the
  decoder multiplies by (the 48 of the blocks and the tied LM head), in the (in, out) layout
  tfam decodes with (torch.mm), and nothing else: what tfam's decoder would take with no cost
  besides its matrix products, so Hugging Face's time over this one bounds tfam's ratio (a
  faster float32 matrix-vector routine than torch's would move that bound).

    python benchmarks/bench_gpt.py [--threads 2] [--rounds 5] [--prompt 8] [--tokens 128]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from timing import interleaved  # noqa: E402

from tfam.interop import from_hf  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=8, help="prompt length in tokens")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per generation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    model = from_hf(hf).eval()
    c = model.config
    n = args.tokens
    prompt = torch.randint(0, c.vocab_size, (1, args.prompt))
    # End-of-text off on both sides, so every call generates exactly n tokens (random weights
    # could otherwise stop early on one side and make the rates incomparable).
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = c.vocab_size - 1

    def tfam_cached() -> torch.Tensor:
        return model.generate(prompt, max_new_tokens=n, eos_token_id=[], use_cache=True)

    def tfam_uncached() -> torch.Tensor:
        return model.generate(prompt, max_new_tokens=n, eos_token_id=[], use_cache=False)

    def hf_cached() -> torch.Tensor:
        return hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=n,
            do_sample=False,
            use_cache=True,
        )

    # The very matrices tfam decodes with (GPT.decoding_context: stored (in, out), seen as
    # (out, in); the tied embedding listed once), as (in, out) for x @ W.
    matrices = [w.t() for w in model._decoding_copies().values()]
    rows_in = {w.shape[0]: torch.randn(1, w.shape[0]) for w in matrices}

    def weight_reads() -> None:
        for _ in range(n):
            for w in matrices:
                torch.mm(rows_in[w.shape[0]], w)

    full = torch.randint(0, c.vocab_size, (1, args.prompt + n))
    with torch.inference_mode():
        ours, theirs = tfam_cached(), hf_cached()
        same = ours.shape == theirs.shape and torch.equal(ours, theirs)
        same_uncached = torch.equal(tfam_uncached(), ours)
        diff = (model(full) - hf(full).logits).abs().max().item()
        rows = []
        (t_ours, t_hf, t_unc, t_floor), (_, r_hf, r_unc, r_floor) = interleaved(
            [tfam_cached, hf_cached, tfam_uncached, weight_reads], args.rounds
        )
        rows.append((f"greedy {n} tokens, cached", n / t_ours, "HF generate", n / t_hf, r_hf))
        rows.append((f"greedy {n} tokens, cached", n / t_ours, "tfam uncached", n / t_unc, r_unc))
        rows.append(
            (f"greedy {n} tokens, cached", n / t_ours, "weight reads", n / t_floor, r_floor)
        )
        ceiling = t_hf / t_floor  # tfam's ratio to HF if decoding cost only its products
        (t_ours, t_hf), (_, r_fwd) = interleaved(
            [lambda: model(full), lambda: hf(full)], args.rounds
        )
        length = full.shape[1]
        rows.append((f"forward L={length}", length / t_ours, "HF forward", length / t_hf, r_fwd))

    print(
        f"GPT-2 small (124M, random weights), batch 1, prompt {args.prompt} tokens, "
        f"torch {torch.__version__}, transformers {transformers.__version__} "
        f"(attn_implementation={hf.config._attn_implementation}), {args.threads} threads, "
        f"median of {args.rounds} interleaved rounds"
    )
    print(
        f"greedy tokens identical to HF: {same}; cached == uncached: {same_uncached}; "
        f"max |logit diff| vs HF forward: {diff:.1e}"
    )
    print(f"{'what':<28} {'tfam tok/s':>10}  {'reference':<14} {'ref tok/s':>10}  {'ratio':>7}")
    for what, ours_rate, ref_name, ref_rate, ratio in rows:
        print(f"{what:<28} {ours_rate:>10.1f}  {ref_name:<14} {ref_rate:>10.1f}  {ratio:>6.2f}x")
    print(
        f"\ncached greedy: tfam at {rows[0][4]:.2f}x Hugging Face generate (target >= 1.50x); "
        f"its matrix products alone (torch.mm, one read of every weight per token) are at "
        f"{ceiling:.2f}x"
    )


if __name__ == "__main__":
    main()
