"""`tfam generate DIR --prompt TEXT`: continue a prompt with a GPT run (or a GPT converted from
Hugging Face), through ``model.generate`` (:mod:`tfam.generation`) with the KV cache.

A run of a family whose tokens are pixels (``image_tokens``: iGPT) completes images instead:
`tfam generate DIR --images 8 --samples 4 --out grid.png` gives the model the top half of held-out
images of its dataset (palette.json beside the model) and draws the originals and completions."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

from tfam.cli.common import add_command, add_device_option, device_from
from tfam.cli.text import note_outputs
from tfam.runs import LMRun, load_lm

DEFAULT_NEW_TOKENS = 200

EPILOG = """examples:
  tfam generate runs/kjv --prompt "And God said"                 sample 200 characters
  tfam generate runs/kjv --prompt "And God said" --greedy --max-new-tokens 80
  tfam generate runs/kjv --prompt "In the beginning" --temperature 0.8 --top-p 0.9 --seed 1
  tfam generate runs/kjv --prompt "And he said" --num-samples 3 --stop "." --seed 0
  tfam generate hf/gpt2-tfam --ids 464,3290,531 --greedy     a converted model without a tokenizer
  tfam generate runs/digits-pixels --images 8 --samples 4 --seed 0 --out grid.png
                                        an iGPT run: complete test images from their top half
  tfam generate runs/digits-pixels --images 8 --mbr 64 --seed 0
                                        each completion the most typical of 64 draws

DIR is a GPT run directory of `tfam train gpt` (config.json, model.safetensors and the
tokenizer.json that training saved beside them) or a GPT converted from Hugging Face with
`tfam convert hf-to-tfam` (its tokenizer.json is copied along when the Hugging Face directory
has one; without it, give the prompt as token ids with --ids).

Sampling is the default (temperature 1, no top-k, no top-p); --greedy takes the most likely
token at every step. --top-k K keeps the K most likely tokens; --top-p P keeps the smallest set
of tokens whose probability reaches P. --seed makes sampling reproducible. Output stops at the
model's end-of-text token, at the first --stop text (included in the output), or after
--max-new-tokens tokens (default: 200). Past the model's context (max_positions), each new
token is predicted from the last max_positions tokens (the window slides); a prompt longer
than the context is read from its last max_positions tokens (a note says so).

An iGPT run (`tfam train igpt --data digits-pixels`) completes images: the first --images
images of its dataset's --split (default: test) are cut after their top --rows rows (default:
half), and --samples completions of each are sampled (--temperature, --top-k, --top-p, --seed,
--greedy apply); the grid of originals, prompts and completions goes to --out (default:
DIR/completions.png), and the share of completed pixels equal to the original's is printed.
--mbr N (minimum Bayes risk) draws N candidates for each completion and keeps the one nearest
on average to the others: the model's most typical reading of the prompt, not a rarer one
(one completion an image unless --samples says more).
"""

HELP = "continue a prompt with a GPT run (sampling, greedy, top-k, top-p)"
DESCRIPTION = "Generate text with a decoder-only language model (a GPT run directory)."

# The sampling options (flag, type, metavar, help); unset (None) means "not used".
SAMPLING_OPTIONS = (
    (
        "--temperature",
        float,
        "T",
        "divide the scores by T before sampling: < 1 sharper, > 1 flatter (default: 1)",
    ),
    ("--top-k", int, "K", "sample among the K most likely tokens"),
    (
        "--top-p",
        float,
        "P",
        "sample among the smallest set of tokens whose probability reaches P, in (0, 1]",
    ),
    ("--seed", int, "S", "random seed of the sampling"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    run_dir = "GPT run directory: config.json, model.safetensors, tokenizer.json"
    p = add_command(subparsers, "generate", HELP, DESCRIPTION, EPILOG, run_dir=run_dir)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", metavar="TEXT", default=None, help="text to continue")
    src.add_argument(
        "--ids",
        metavar="ID,ID,...",
        default=None,
        help="the prompt as token ids (comma-separated), for a model without a tokenizer.json",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        metavar="N",
        help=f"most tokens to generate (default: {DEFAULT_NEW_TOKENS}; past the model's "
        "context the window slides)",
    )
    p.add_argument(
        "--greedy", action="store_true", help="always take the most likely token (no sampling)"
    )
    for flag, kind, metavar, text in SAMPLING_OPTIONS:
        p.add_argument(flag, type=kind, default=None, metavar=metavar, help=text)
    p.add_argument(
        "--num-samples",
        "--samples",
        type=int,
        default=None,
        metavar="N",
        help="continuations of the prompt (of each image) to generate (default: 1; images: 4)",
    )
    p.add_argument(
        "--stop",
        nargs="+",
        default=None,
        metavar="TEXT",
        help="stop a continuation at the first of these texts (included in the output)",
    )
    p.add_argument(
        "--no-cache",
        dest="use_cache",
        action="store_false",
        help="recompute every position at every step (slower; the same tokens as the cache)",
    )
    g = p.add_argument_group("image completion (a run whose tokens are pixels: iGPT)")
    g.add_argument(
        "--images", type=int, default=8, metavar="N", help="images to complete (default: 8)"
    )
    g.add_argument(
        "--rows",
        type=int,
        default=None,
        metavar="R",
        help="the top rows given as the prompt (default: half the image)",
    )
    g.add_argument(
        "--split",
        default=None,
        metavar="NAME",
        help="the dataset split (default: test; val for an image folder without a test/)",
    )
    g.add_argument(
        "--mbr",
        type=int,
        default=None,
        metavar="N",
        help="minimum Bayes risk: each completion is the one of N sampled candidates nearest "
        "(L1 over the pixels' colours) on average to the others, the model's most typical "
        "completion (default: off, one draw)",
    )
    g.add_argument(
        "--out", default=None, metavar="PNG", help="the grid (default: DIR/completions.png)"
    )
    add_device_option(p)
    p.set_defaults(func=run)


# ---------------------------------------------------------------------------------------------
# Checks


def check_options(args: argparse.Namespace) -> None:
    """One-line errors for the decoding options, before any model is loaded."""
    if args.num_samples is None:
        args.num_samples = 1
    if args.prompt is None and args.ids is None:
        raise ValueError('give the prompt: --prompt "some text" (or --ids 1,2,3 for token ids)')
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens} is invalid: expected an int >= 1")
    if args.num_samples < 1:
        raise ValueError(f"--num-samples {args.num_samples} is invalid: expected an int >= 1")
    if getattr(args, "mbr", None) is not None:
        raise ValueError(
            f"--mbr {args.mbr} is invalid for a text run: it picks among sampled image "
            "completions (an iGPT run)"
        )
    if args.greedy:
        given = [
            opt
            for opt, value in (
                ("--temperature", args.temperature),
                ("--top-k", args.top_k),
                ("--top-p", args.top_p),
                ("--seed", args.seed),
            )
            if value is not None
        ]
        if given:
            raise ValueError(
                f"{given[0]} is invalid with --greedy: greedy decoding takes the most likely "
                "token and draws nothing (leave out --greedy to sample)"
            )
        if args.num_samples > 1:
            raise ValueError(
                f"--num-samples {args.num_samples} is invalid with --greedy: every greedy "
                "continuation is the same"
            )
    t = args.temperature
    if t is not None and (not math.isfinite(t) or t <= 0):
        raise ValueError(
            f"--temperature {t:g} is invalid: expected a finite number > 0 (near 0 is nearly "
            "greedy; use --greedy for the most likely token)"
        )
    if args.top_k is not None and args.top_k < 1:
        raise ValueError(f"--top-k {args.top_k} is invalid: expected an int >= 1")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p {args.top_p:g} is invalid: expected a number in (0, 1]")
    for stop in args.stop or ():
        if not stop:
            raise ValueError("--stop '' is invalid: expected a non-empty text")


def parse_ids(text: str, vocab_size: int) -> list[int]:
    """'1, 2,3' -> [1, 2, 3]; each id in [0, vocab_size)."""
    ids = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise ValueError(
                f"--ids {text!r} is invalid: {part!r} is not an int (expected comma-separated "
                "token ids, e.g. --ids 464,3290,531)"
            ) from None
        if not 0 <= value < vocab_size:
            raise ValueError(
                f"--ids {text!r} is invalid: id {value} is outside the model's vocabulary "
                f"(expected 0 <= id < vocab_size={vocab_size})"
            )
        ids.append(value)
    return ids


# ---------------------------------------------------------------------------------------------
# Loading


def prompt_ids(run: LMRun, args: argparse.Namespace) -> list[int]:
    """The prompt's ids, checked: encodable, non-empty unless the model has a bos token (then
    [bos] starts an empty prompt). A prompt longer than the context is kept whole (it is printed
    back) and the model reads its last tokens, which a note says."""
    from tfam.cli.common import check_utf8
    from tfam.cli.text import check_encodable

    c = run.model.config
    if args.ids is not None:
        ids = parse_ids(args.ids, c.vocab_size)
        name = "--ids"
    else:
        check_utf8(args.prompt, "--prompt")
        ids = list(run.tokenizer.encode(args.prompt))
        check_encodable(run.tokenizer, args.prompt, ids, "--prompt")
        name = "--prompt"
    if not ids:
        if c.bos_token_id is None:
            raise ValueError(
                f"{name} is empty and the model has no start token (bos_token_id=None): give "
                "at least one token of text to continue"
            )
        ids = [int(c.bos_token_id)]
    if len(ids) > run.context:
        from tfam.cli.text import note

        note(
            f"{name} is {len(ids)} tokens long, more than the model's context of "
            f"max_positions={run.context}: it reads the last {run.context}"
        )
    return ids


def new_token_count(requested: int | None) -> int:
    """--max-new-tokens or the default; any count fits (past the context the window slides)."""
    return DEFAULT_NEW_TOKENS if requested is None else requested


# ---------------------------------------------------------------------------------------------
# Generating


def stop_token_ids(tokenizer: Any, stops: Sequence[str]) -> list[int]:
    """Stop texts that are one token each: decoding can stop on the token itself."""
    out = []
    for stop in stops:
        ids = tokenizer.encode(stop) if tokenizer is not None else []
        if len(ids) == 1 and tokenizer.decode(ids) == stop:
            out.append(int(ids[0]))
    return out


def generate_ids(
    run: LMRun,
    prompt: Sequence[int],
    *,
    max_new_tokens: int,
    greedy: bool = False,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    num_samples: int = 1,
    stop_ids: Sequence[int] = (),
    use_cache: bool = True,
) -> list[list[int]]:
    """The new ids of each sample (the prompt not repeated), cut after the first stop id and
    before the model's end-of-text id."""
    import torch

    c = run.model.config
    eos = [] if c.eos_token_id is None else [int(c.eos_token_id)]
    stops = list(dict.fromkeys([*eos, *map(int, stop_ids)]))
    ids = torch.tensor([list(prompt)] * num_samples, dtype=torch.long, device=run.device)
    generator = None
    if seed is not None and not greedy:
        generator = torch.Generator(device=run.device).manual_seed(seed)
    with torch.inference_mode():
        out = run.model.generate(
            ids,
            max_new_tokens=max_new_tokens,
            do_sample=not greedy,
            temperature=1.0 if temperature is None else temperature,
            top_k=top_k,
            top_p=top_p,
            eos_token_id=stops or None,
            use_cache=use_cache,
            generator=generator,
        )
    results = []
    for row in out[:, len(prompt) :].tolist():
        for i, token in enumerate(row):
            if token in stops:
                row = row[: i + (token not in eos)]  # a stop text stays; end-of-text does not
                break
        results.append(row)
    return results


def continuation_text(tokenizer: Any, prompt: Sequence[int], new: Sequence[int]) -> str:
    """The decoded new tokens, decoded together with the prompt (so a tokenizer that joins
    pieces across the boundary, such as byte-level BPE, spells them right)."""
    whole = tokenizer.decode([*prompt, *new])
    head = tokenizer.decode(list(prompt))
    return whole[len(head) :] if whole.startswith(head) else tokenizer.decode(list(new))


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to and including the earliest of ``stops``."""
    ends = [text.find(s) + len(s) for s in stops if s in text]
    return text[: min(ends)] if ends else text


def run(args: argparse.Namespace) -> int:
    if _image_run(args.dir):
        return run_images(args)
    check_options(args)
    device = device_from(args)
    loaded = load_lm(args.dir, device, need_tokenizer=args.prompt is not None)
    prompt = prompt_ids(loaded, args)
    n = new_token_count(args.max_new_tokens)
    stops = list(args.stop or ())
    samples = generate_ids(
        loaded,
        prompt,
        max_new_tokens=n,
        greedy=args.greedy,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        num_samples=args.num_samples,
        stop_ids=stop_token_ids(loaded.tokenizer, stops),
        use_cache=args.use_cache,
    )
    for i, new in enumerate(samples):
        if args.num_samples > 1:
            print(f"--- sample {i + 1} of {args.num_samples} ---")
        if loaded.tokenizer is None:
            print(",".join(str(t) for t in [*prompt, *new]))
            continue
        tok = loaded.tokenizer
        head = tok.decode(prompt) if args.ids is not None else args.prompt
        print(head + cut_at_stop(continuation_text(tok, prompt, new), stops))
    sys.stdout.flush()
    note_outputs(samples, None, "generated text", loaded.tokenizer)
    return 0


# ---------------------------------------------------------------------------------------------
# Images (a family whose tokens are pixels: iGPT)


def _image_run(dir_arg: str) -> bool:
    """Whether DIR holds a model whose tokens are pixels (its class's ``image_tokens``)."""
    from pathlib import Path

    from tfam.runs import family_class, read_config

    if not (Path(dir_arg) / "config.json").is_file():
        return False  # load_lm says what is missing
    cls = family_class(read_config(Path(dir_arg)).family)
    return bool(getattr(cls, "image_tokens", False))


def check_image_options(args: argparse.Namespace) -> None:
    """One-line errors for image completion, before any model is loaded."""
    for flag, value in (("--prompt", args.prompt), ("--ids", args.ids), ("--stop", args.stop)):
        if value is not None:
            raise ValueError(
                f"{flag} is invalid for an image run: it completes the top rows of held-out "
                "images (--images, --rows, --split)"
            )
    if args.max_new_tokens is not None:
        raise ValueError(
            "--max-new-tokens is invalid for an image run: the rest of the image is generated "
            "(--rows sets the prompt)"
        )
    if args.num_samples is None:
        args.num_samples = 1 if args.greedy or args.mbr else 4
    check_options(argparse.Namespace(**{**vars(args), "prompt": "", "stop": None, "mbr": None}))
    if args.images < 1:
        raise ValueError(f"--images {args.images} is invalid: expected an int >= 1")
    if args.mbr is not None and args.mbr < 1:
        raise ValueError(f"--mbr {args.mbr} is invalid: expected an int >= 1 (candidates)")
    if args.mbr is not None and args.greedy:
        raise ValueError(
            f"--mbr {args.mbr} is invalid with --greedy: greedy candidates are all the same"
        )


def run_images(args: argparse.Namespace) -> int:
    """Complete held-out images from their top rows and draw the grid."""
    from pathlib import Path

    import torch

    from tfam.data import resolve_data
    from tfam.data.vision.palette import load_palette
    from tfam.models.igpt import complete
    from tfam.runs import resolve_model, train_args
    from tfam.viz import completion_grid

    check_image_options(args)
    run_dir = Path(args.dir)
    palette, facts = load_palette(run_dir)
    data_name = train_args(run_dir).get("data") or facts.get("dataset")
    if not data_name:
        raise ValueError(
            f"{run_dir} names no dataset (train_args.json, palette.json): the held-out images "
            "to complete come from the run's dataset"
        )
    entry = resolve_data(str(data_name), run=run_dir)  # a folder: as the run read it
    if args.split is None:
        args.split = entry.test_split or entry.val_split or "test"
    if args.split not in entry.splits:
        raise ValueError(
            f"--split {args.split!r} is invalid: expected one of {', '.join(entry.splits)}"
        )
    dataset = entry.load(args.split)
    c, h, w = (int(v) for v in facts["image_shape"])
    rows = h // 2 if args.rows is None else args.rows
    if not 1 <= rows < h:
        raise ValueError(f"--rows {rows} is invalid: expected an int in [1, {h - 1}]")
    device = device_from(args)
    model = resolve_model(str(run_dir), what="DIR", kinds=("dir",)).load(device).eval()
    if model.config.head != "lm":
        raise ValueError(
            f"{run_dir} holds an iGPT with head={model.config.head!r} (a classifier): "
            "completing images needs a next-pixel run (`tfam train igpt --data digits-pixels`)"
        )
    n = min(args.images, len(dataset))
    ids = dataset.ids[:n].to(device)
    prompt = ids[:, : 1 + rows * w]
    generator = None
    if args.seed is not None and not args.greedy:
        generator = torch.Generator(device=device).manual_seed(args.seed)
    pixels = complete(
        model,
        prompt,
        h * w,
        samples=args.num_samples,
        temperature=1.0 if args.temperature is None else args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        generator=generator,
        greedy=args.greedy,
        mbr=args.mbr or 1,
        colours=palette.colours(),
    ).cpu()
    shape = (c, h, w)
    originals = palette.decode(ids[:, 1:].cpu(), shape)
    completions = palette.decode(pixels.flatten(0, 1), shape).view(n, args.num_samples, *shape)
    out = Path(args.out) if args.out else run_dir / "completions.png"
    classes = getattr(dataset, "classes", None)
    labels = [classes[int(y)] for y in dataset.labels[:n]] if classes else None
    completion_grid(
        originals,
        completions,
        rows,
        out,
        scale=palette.scale,
        labels=labels,
        title=f"{run_dir.name}: {n} {args.split} images from their top {rows} of {h} rows",
    )
    rest = pixels[:, :, rows * w :]
    truth = ids[:, 1 + rows * w :].cpu().unsqueeze(1)
    same = float((rest == truth).double().mean())
    print(
        f"completed {n} {args.split} images of {data_name} from their top {rows} of {h} rows, "
        f"{args.num_samples} sample{'s' if args.num_samples != 1 else ''} each"
        + (f" (each the least-risk of {args.mbr} candidates)" if (args.mbr or 1) > 1 else "")
        + f" -> {out}"
    )
    print(f"completed pixels equal to the original's: {100 * same:.1f}%")
    sys.stdout.flush()
    return 0
