"""`tfam viz attention|windows|graph|pos|curves`: pictures of a trained model (PNG, matplotlib Agg)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tfam.cli.common import (
    add_command,
    add_device_option,
    add_image_options,
    device_from,
    image_options,
    layer_index,
)
from tfam.runs import resolve_model, run_is_seq2seq

EPILOG = """examples:
  tfam viz attention runs/digits test:0 --out attention.png    a test image of the run's dataset
  tfam viz attention runs/digits my_digit.png --layer 1 --out first_block.png
  tfam viz attention runs/kjv-rv "And God said, Let there be light." --out align.png
  tfam viz windows runs/swin test:0 --out windows.png   a Swin run's windows and attention
  tfam viz graph runs/karate --out club.png           a graph run: attention on its edges
  tfam viz graph runs/nci-tpsa "c1ccccc1O" --out phenol.png
  tfam viz pos runs/digits --out position.png
  tfam viz curves runs/digits --out curves.png
  tfam viz attention runs/spoken-digits test:0    a speech run: each head over the frames
  tfam viz frames spoken-digits test:0            an utterance's word and phoneme segments
"""

GRAPH_EPILOG = """examples:
  tfam viz graph runs/karate --out club.png            every block, heads averaged, and the mean
  tfam viz graph runs/karate 0 --out member0.png       where member 0 looks
  tfam viz graph runs/karate --layer 2 --out heads.png  block 2, one panel per head
  tfam viz graph runs/nci-tpsa "CC(=O)Nc1ccc(O)cc1" --out paracetamol.png

A graph run. The graph is laid out by networkx (Kamada-Kawai); each edge is drawn with width
and opacity by the attention it carries (node i's weight on neighbour j, the mean of both
directions, scaled to the panel's largest edge), each node's disc by the weight it gives
itself. Panels: each block with its heads averaged, then the mean over blocks; with --layer,
that block's heads and their mean. Molecules show element symbols; the club colours each
member by its predicted faction. A NODE (a run over one graph) keeps only that node's
attention on its edges.
"""

WINDOWS_EPILOG = """examples:
  tfam viz windows runs/swin test:0 --out windows.png
  tfam viz windows runs/swin my_shirt.png --stage 1 --block 2 --head 1

A windowed run (Swin). Panels: the input; stage --stage's regular windows and its shifted
windows (tokens of one colour share a window; a window the cyclic shift wrapped around the
image's edges is split, and its pieces attend only within themselves: Swin's mask); the
attention of one window's centre token over that window, laid over the image, in block
--block of the stage (block 2 is the shifted one), one head (--head) or the mean over heads;
and the window's Ws^2 x Ws^2 attention matrix.
"""

ATTENTION_EPILOG = """examples:
  tfam viz attention runs/digits test:0 --out attention.png
  tfam viz attention runs/digits my_digit.png --layer 1 --out first_block.png
  tfam viz attention runs/digits test:0 --device cuda
  tfam viz attention runs/kjv-rv "And God said, Let there be light." --out align.png
  tfam viz attention runs/copy "a b c d e" --layer 1 --out copy_align.png
  tfam viz attention minilm_l6 "The animal didn't cross the street because it was too tired."
  tfam viz attention minilm_l6 "The animal didn't cross the street because it was too tired." \
      --word it --out it.png                  where "it" looks, every block and head
  tfam viz attention runs/kjv "And God said" --layer 1     a GPT run: causal self-attention

Image runs. Panels: the input, then where the [CLS] token looks in block --layer, one map per head, then the
attention rollout through all blocks (Abnar & Zuidema 2020: average the heads, add the
identity for the residual path, renormalise rows, multiply through the blocks; the [CLS] row
over the patches). Models without a [CLS] token (pool='mean') show the mean attention each
patch receives instead. Heat maps are upsampled to the image size and laid over it.

Seq2seq runs (an encoder–decoder with tokenizer.json): the sentence is translated (greedy),
then the cross-attention of decoder block --layer is drawn as a target x source alignment, the
tokens as tick labels: one panel per head and their mean. Row t is where the decoder looked
while writing target token t.

Text runs (BERT, GPT) and the preset with pretrained weights (minilm_l6): the sentence's
self-attention in block --layer, query x key tokens, one panel per head and their mean (a
GPT's is causal: nothing above the diagonal). With --word WORD, the row of that token (its
first occurrence) in every block and head instead: one panel per block, heads down, tokens
across.
"""

POS_EPILOG = """examples:
  tfam viz pos runs/digits --out position.png
  tfam viz pos runs/kjv                        a GPT: one map over its positions

A ViT: for each patch position (i, j), a small map of the cosine similarity of its position
embedding to those of all patches (ViT paper, figure 7): the learned table, or the fixed
2-D sine-cosine one for models with position='sincos2d'. A GPT: one L x L map, the cosine
similarity of the position table's rows (learned or sinusoidal; RoPE and ALiBi add no table).
"""

CURVES_EPILOG = """example:
  tfam viz curves runs/digits --out curves.png

Loss and accuracy per epoch (train and test) and the learning rate, from DIR/metrics.csv.
"""


def _add_picture(
    sub: argparse._SubParsersAction, name: str, texts: tuple[str, str, str], out_help: str
) -> argparse.ArgumentParser:
    """The parser of one picture: its (help, description, epilog) ``texts``, the run directory
    DIR it draws from and --out PNG, where it goes."""
    p = add_command(sub, name, *texts, run_dir="run directory written by `tfam train`")
    p.add_argument("--out", metavar="PNG", default=None, help=out_help)
    return p


def register(subparsers: argparse._SubParsersAction) -> None:
    viz = add_command(
        subparsers,
        "viz",
        "attention maps, position-embedding similarity, training curves (PNG)",
        "Draw pictures of a trained model as PNG files.",
        EPILOG,
    )
    viz.set_defaults(func=lambda args: _usage(viz))
    sub = viz.add_subparsers(title="pictures", metavar="WHAT")

    attention = (
        "per-head [CLS] attention and rollout over an image, or a seq2seq run's cross-attention "
        "alignment for a sentence",
        "Per-head attention of the [CLS] token and attention rollout over an image; for a "
        "seq2seq run, the cross-attention alignment (target x source tokens) of a sentence.",
        ATTENTION_EPILOG,
    )
    p = _add_picture(
        sub, "attention", attention, "default: DIR/attention.png (seq2seq runs: DIR/alignment.png)"
    )
    p.add_argument(
        "image",
        metavar="INPUT",
        help="image file, or SPLIT:INDEX (e.g. test:0) for a sample of the run's dataset; for a "
        "text run (seq2seq, BERT, GPT) or minilm_l6, a sentence",
    )
    p.add_argument(
        "--word",
        default=None,
        help="text runs (BERT, GPT, minilm_l6): draw where this token looks in every block and "
        "head (its first occurrence in the sentence's tokens)",
    )
    p.add_argument(
        "--layer",
        type=int,
        default=-1,
        help="block whose heads to show: 1..depth, or negative from the end (default: -1, last)",
    )
    p.add_argument(
        "--discard-ratio",
        type=float,
        default=0.0,
        help="rollout: drop this fraction of the smallest weights per row (default: 0)",
    )
    p.add_argument("--root", metavar="DIR", default=None, help="where to look for dataset files")
    p.add_argument(
        "--truncate",
        action="store_true",
        help="seq2seq runs: cut a sentence longer than the model's positions instead of failing",
    )
    add_image_options(p)
    add_device_option(p)
    p.set_defaults(func=run_attention)

    windows = (
        "a windowed model's (Swin) regular and shifted windows over an image, and the "
        "attention inside one window",
        "The regular and the shifted window partition of a stage over an image, and the "
        "attention inside one window of one block.",
        WINDOWS_EPILOG,
    )
    p = _add_picture(sub, "windows", windows, "default: DIR/windows.png")
    p.add_argument(
        "image", metavar="IMAGE", help="image file, or SPLIT:INDEX (e.g. test:0) of the run's data"
    )
    p.add_argument("--stage", type=int, default=1, help="stage 1..S (default: 1)")
    p.add_argument(
        "--block", type=int, default=1, help="block of the stage whose attention to show "
        "(default: 1, regular windows; 2 is shifted)",
    )  # fmt: skip
    p.add_argument(
        "--window", type=int, default=None,
        help="window index in that block's partition (default: the one at the grid's centre)",
    )  # fmt: skip
    p.add_argument(
        "--head", type=int, default=None, help="head 1..H (default: the mean over heads)"
    )
    p.add_argument("--root", metavar="DIR", default=None, help="where to look for dataset files")
    add_image_options(p)
    add_device_option(p)
    p.set_defaults(func=run_windows)

    graph = (
        "a graph run's learned attention on its edges (the club, a molecule)",
        "The attention of a graph model drawn on the graph's edges: per block (heads "
        "averaged) and the mean over blocks, or one block's heads.",
        GRAPH_EPILOG,
    )
    p = _add_picture(sub, "graph", graph, "default: DIR/graph_attention.png")
    p.add_argument(
        "input",
        metavar="SMILES_OR_NODE",
        nargs="?",
        default=None,
        help="a molecule (SMILES) for a run on molecules; for a run over one graph, a node "
        "index whose attention alone to draw (default: the whole graph)",
    )
    p.add_argument(
        "--layer",
        type=int,
        default=None,
        help="block whose heads to show: 1..depth, or negative from the end (default: every "
        "block, heads averaged)",
    )
    add_device_option(p)
    p.set_defaults(func=run_graph)

    pos = (
        "cosine similarity of position embeddings (ViT paper, figure 7)",
        "Cosine similarity of the position embeddings, patch by patch (ViT) or position by "
        "position (GPT).",
        POS_EPILOG,
    )
    p = _add_picture(sub, "pos", pos, "default: DIR/position.png")
    add_device_option(p)
    p.set_defaults(func=run_pos)

    curves = (
        "loss and accuracy curves from DIR/metrics.csv",
        "Loss, accuracy and learning rate per epoch from DIR/metrics.csv.",
        CURVES_EPILOG,
    )
    _add_picture(sub, "curves", curves, "default: DIR/curves.png").set_defaults(func=run_curves)

    from tfam.cli.speech import register_frames

    register_frames(sub)  # tfam viz frames: speech recordings and their labels


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _run_dir(args: argparse.Namespace) -> Path:
    run_dir = Path(args.dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} not found")
    return run_dir


def _model(args: argparse.Namespace):  # noqa: ANN202  (a tfam model)
    """The run's model on --device (the one resolver of model directories)."""
    return resolve_model(args.dir, what="DIR", kinds=("dir",)).load(device_from(args))


def _seq2seq_source(args: argparse.Namespace) -> bool:
    """Whether DIR holds an encoder–decoder (judged from config.json; anything unreadable is
    left to the image path, whose errors are unchanged)."""
    try:
        source = resolve_model(args.dir, what="DIR", kinds=("dir",))
    except (ValueError, FileNotFoundError):
        return False
    return run_is_seq2seq(source)


def _text_source(args: argparse.Namespace) -> bool:
    """Whether DIR is a preset with pretrained weights or a run of a family that reads tokens
    and is no encoder–decoder (BERT, GPT), judged without loading weights."""
    from tfam.models import PRESETS
    from tfam.models.registry import has_pretrained

    if args.dir in PRESETS and not Path(args.dir).is_dir():
        return has_pretrained(args.dir)
    try:
        source = resolve_model(args.dir, what="DIR", kinds=("dir",))
    except (ValueError, FileNotFoundError):
        return False
    return getattr(source.model_class, "inputs", "") == "tokens"


def run_text_attention(args: argparse.Namespace) -> int:
    """A BERT's, a GPT's or minilm_l6's self-attention over a sentence: one block's heads, or
    one token's row in every block and head (--word)."""
    import torch

    from tfam.cli.common import check_not_empty
    from tfam.cli.text import token_labels
    from tfam.runs import load_encoder, load_lm, resolve_model
    from tfam.viz.text import plot_self_attention, plot_token_attention, self_attention

    check_not_empty([args.image], ["the sentence"], "a sentence")
    device = device_from(args)
    is_preset = not Path(args.dir).is_dir()
    family = None if is_preset else resolve_model(args.dir, what="DIR", kinds=("dir",)).family
    if is_preset or getattr(resolve_model(args.dir).model_class, "embeds", False):
        model, tokenizer, name = load_encoder(args.dir)
        model = model.to(device)
        ids = tokenizer.encode(args.image)
        labels = [str(tokenizer.id_to_token(i)) for i in ids]  # [CLS] and [SEP] as BERT's
    else:
        run = load_lm(args.dir, device, need_tokenizer=True)
        model, tokenizer, name = run.model, run.tokenizer, args.dir
        ids = tokenizer.encode(args.image)
        labels = token_labels(tokenizer, ids)
    limit = int(model.config.max_positions)
    if len(ids) > limit:
        raise ValueError(
            f"the sentence is {len(ids)} tokens; {name} has {limit} positions: shorten it"
        )
    blocks = self_attention(model, torch.tensor(ids, device=device))
    default = Path(args.dir) / "attention.png" if not is_preset else Path("attention.png")
    out = Path(args.out) if args.out else default
    what = f"{name} ({family or 'bert'})"
    if args.word is not None:
        wanted = args.word.strip().lower()
        found = [t for t, lab in enumerate(labels) if lab.strip().lower().lstrip("ġ#") == wanted]
        if not found:
            raise ValueError(
                f"--word {args.word!r} is not one of the sentence's tokens: {' '.join(labels)}"
            )
        plot_token_attention(
            blocks, labels, found[0], out, title=f"{what}: where {labels[found[0]]!r} looks"
        )
        print(f"attention of {labels[found[0]]!r} in every block and head: {out}")
        return 0
    layer = layer_index(args.layer, len(blocks))
    plot_self_attention(
        blocks[layer],
        labels,
        out,
        title=f"{what}: self-attention",
        layer_name=f"block {layer % len(blocks) + 1}/{len(blocks)}",
    )
    print(f"self-attention: {out}")
    return 0


def run_alignment(args: argparse.Namespace) -> int:
    """Translate the sentence greedily and draw the cross-attention of one decoder block."""
    import torch

    from tfam.cli.common import check_not_empty
    from tfam.cli.text import decode, encode_texts, note, token_labels, translate_ids
    from tfam.runs import load_seq2seq
    from tfam.viz import cross_attention, plot_alignment

    run_dir = _run_dir(args)
    check_not_empty([args.image], ["the sentence"], "a sentence to translate")
    run = load_seq2seq(args.dir, device_from(args), "viz attention")
    depth = run.model.config.decoder_depth or run.model.config.depth
    layer = layer_index(args.layer, depth)
    (src,) = encode_texts(
        [args.image],
        ["the sentence"],
        run.tokenizer,
        run.max_positions,
        truncate=args.truncate,
        warn=note,
    )
    (gen,) = translate_ids(run, [src], beam=1)
    eos, bos = run.tokenizer.eos_id, run.tokenizer.bos_id
    # Keep <eos> as the last predicted row unless decoding ran out of positions first.
    predicted = gen + [eos] if len(gen) + 1 < run.max_positions else gen
    tgt_in = [bos] + predicted[:-1]
    device = run.device
    weights = cross_attention(
        run.model,
        torch.tensor(src, device=device),
        torch.tensor(tgt_in, device=device),
        layer=layer,
    )
    out = Path(args.out) if args.out else run_dir / "alignment.png"
    translation = decode(run, gen)
    plot_alignment(
        weights,
        token_labels(run.tokenizer, src),
        token_labels(run.tokenizer, predicted),
        out,
        title=f"Cross-attention: {_shorten(args.image)} -> {_shorten(translation)}",
        layer_name=f"decoder block {layer % depth + 1}/{depth}",
    )
    print(translation)
    print(f"cross-attention alignment: {out}")
    return 0


def _shorten(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def run_attention(args: argparse.Namespace) -> int:
    import tfam
    from tfam.data.vision.preprocess import load_input, load_preprocess
    from tfam.viz import plot_attention

    if _text_source(args):
        return run_text_attention(args)
    if _seq2seq_source(args):
        return run_alignment(args)
    from tfam.cli.speech import is_speech_run, run_viz_attention

    if is_speech_run(args.dir):
        return run_viz_attention(args)
    run_dir = _run_dir(args)
    pre = load_preprocess(run_dir)
    item = load_input(args.image, pre, root=args.root, **image_options(args))
    model = tfam.from_pretrained(run_dir)
    pre.check_model(model)
    layer = layer_index(args.layer, model.config.depth)
    out = Path(args.out) if args.out else run_dir / "attention.png"
    plot_attention(
        model,
        item.tensor.to(next(model.parameters()).device),
        out,
        pixels=item.pixels,
        layer=layer,
        discard_ratio=args.discard_ratio,
        classes=pre.classes,
        label=item.label,
    )
    print(f"attention of {item.name}: {out}")
    return 0


def run_windows(args: argparse.Namespace) -> int:
    from tfam.data.vision.preprocess import load_input, load_preprocess
    from tfam.viz.windows import plot_windows

    run_dir = _run_dir(args)
    pre = load_preprocess(run_dir)
    item = load_input(args.image, pre, root=args.root, **image_options(args))
    model = _model(args)
    pre.check_model(model)
    if args.head is not None and args.head < 1:
        raise ValueError(f"--head {args.head} is invalid: heads count from 1")
    out = Path(args.out) if args.out else run_dir / "windows.png"
    plot_windows(
        model,
        item.tensor.to(next(model.parameters()).device),
        out,
        pixels=item.pixels,
        stage=args.stage,
        block=args.block,
        window=args.window,
        head=None if args.head is None else args.head - 1,
        classes=pre.classes,
        label=item.label,
    )
    print(f"windows of {item.name}: {out}")
    return 0


def run_pos(args: argparse.Namespace) -> int:
    from tfam.viz import plot_position_similarity

    run_dir = _run_dir(args)
    model = _model(args)
    out = Path(args.out) if args.out else run_dir / "position.png"
    plot_position_similarity(model, out)
    print(f"position embedding similarity: {out}")
    return 0


def run_graph(args: argparse.Namespace) -> int:
    """Draw a graph run's attention on its graph's edges (a molecule, or its own graph)."""
    import torch

    from tfam.cli.graphs import forward, load_graph_run, molecules, node_indices, run_graph
    from tfam.viz import plot_graph_attention

    run_dir = _run_dir(args)
    run = load_graph_run(args.dir, device_from(args), "viz graph")
    config = run.model.config
    labels = colors = None
    if run.reads_smiles:
        if args.input is None:
            raise ValueError("SMILES is missing: this run is on molecules; give one to draw")
        (graph,) = molecules([args.input])
        from tfam.data.graphs.molecules import ELEMENTS

        element = graph.nodes[:, : len(ELEMENTS) + 1].argmax(dim=1).tolist()
        labels = {i: (ELEMENTS[e] if e < len(ELEMENTS) else "*") for i, e in enumerate(element)}
        palette = {"C": "#d9d9d9", "N": "#9ecae1", "O": "#fc9272", "S": "#fee391"}
        colors = [palette.get(labels[i], "#c7e9c0") for i in range(graph.num_nodes)]
        focus = None
        what = f"{args.input}"
    else:
        graph, _ = run_graph(run)
        focus = node_indices([args.input], graph)[0] if args.input is not None else None
        what = str(run.facts.get("data"))
    out, weights = forward(run, [graph], return_attention=True)
    if not run.reads_smiles and config.head == "node":
        classes = list(run.facts.get("classes") or [])
        predicted = out[0].argmax(dim=-1).tolist()
        tab = [("#9ecae1", "blue"), ("#fdae6b", "orange"), ("#a1d99b", "green"),
               ("#bcbddc", "purple"), ("#fc9272", "red")]  # fmt: skip
        colors = [tab[c % len(tab)][0] for c in predicted]
        what += (
            " (predicted: "
            + ", ".join(f"{name} {tab[k % len(tab)][1]}" for k, name in enumerate(classes))
            + ")"
        )
    blocks = [w[0].float().cpu() for w in weights]  # (H, N', N') per block
    if args.layer is not None:
        layer = layer_index(args.layer, len(blocks))
        heads = list(blocks[layer])
        maps = [*heads, blocks[layer].mean(0)]
        titles = [f"block {layer % len(blocks) + 1}, head {h + 1}" for h in range(len(heads))]
        titles.append(f"block {layer % len(blocks) + 1}, mean of heads")
    else:
        maps = [b.mean(0) for b in blocks]
        titles = [f"block {i + 1} (heads averaged)" for i in range(len(blocks))]
        if len(blocks) > 1:
            maps.append(torch.stack(maps).mean(0))
            titles.append("mean over blocks")
    prefix = config.prefix
    if focus is not None:
        # Only the node's own row: its weights on its neighbours, drawn on both directions.
        row = focus + prefix
        kept = []
        for w in maps:
            only = torch.zeros_like(w)
            only[row], only[:, row] = w[row], w[row]
            kept.append(only)
        maps = kept
        what += f", node {focus}'s attention"
    out_path = Path(args.out) if args.out else run_dir / "graph_attention.png"
    plot_graph_attention(
        graph, maps, titles, prefix=prefix, node_labels=labels, node_colors=colors,
        suptitle=what, out=out_path,
    )  # fmt: skip
    print(f"graph attention: {out_path}")
    return 0


def run_curves(args: argparse.Namespace) -> int:
    from tfam.viz import plot_curves

    run_dir = _run_dir(args)
    out = Path(args.out) if args.out else run_dir / "curves.png"
    plot_curves(run_dir / "metrics.csv", out)
    print(f"training curves: {out}")
    return 0
