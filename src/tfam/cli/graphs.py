"""What the graph commands share (`tfam predict`, `tfam viz graph` on a graph run): the run's
graph.json (what its inputs are: molecules typed as SMILES, or one graph's nodes by index),
the molecules the user types, and the run's own graph."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfam.cli.common import eval_split, note_chance
from tfam.runs import describe_run, resolve_model


@dataclass
class GraphRun:
    """A trained graph model on its device, with its graph.json facts."""

    run_dir: Path
    model: Any
    facts: dict[str, Any]
    device: Any

    @property
    def reads_smiles(self) -> bool:
        return self.facts.get("inputs") == "smiles"


def load_graph_run(dir_arg: str, device: Any, command: str) -> GraphRun:
    """The graph run in ``dir_arg``; one line when it is not one or lacks its graph.json."""
    from tfam.data.graphs.graph import GRAPH_FILE

    source = resolve_model(dir_arg, what="DIR", kinds=("dir",))
    run_dir = Path(dir_arg)
    if getattr(source.model_class, "inputs", "") != "graph":
        family = source.family or "unknown"
        raise ValueError(
            f"{command} needs a graph run (`tfam train graph ...`), but {run_dir} holds "
            f"{describe_run(run_dir, family)}"
        )
    path = run_dir / GRAPH_FILE
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} not found: `tfam train graph` writes it beside the model; {command} reads "
            "from it what the model's inputs are"
        ) from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} cannot be read as JSON: {err}") from None
    if not isinstance(facts, dict):
        raise ValueError(f"{path} holds a JSON {type(facts).__name__}, not an object")
    return GraphRun(run_dir, source.load(device).eval(), facts, device)


def molecules(texts: Sequence[str]) -> list[Any]:
    """Each SMILES as a graph, all read before any output; an invalid one is one line naming
    it (from :func:`tfam.data.graphs.molecules.smiles_to_graph`)."""
    from tfam.data.graphs.molecules import smiles_to_graph

    return [smiles_to_graph(text) for text in texts]


def run_graph(run: GraphRun) -> tuple[Any, Any]:
    """(the run's own graph with its training labels, every label its data holds (N,), -100
    where none) for a run over one graph's nodes (karate, the user's edge list)."""
    import torch

    from tfam.data import resolve_data

    entry = resolve_data(str(run.facts.get("data")), run=run.run_dir)
    seed = data_seed(run.facts, entry)
    graph = entry.load(entry.train_split, seed=seed)[0]
    known = graph.node_labels.clone()
    for split in (entry.val_split, entry.test_split):
        if split:
            other = entry.load(split, seed=seed)[0].node_labels
            known = torch.where(other >= 0, other, known)
    return graph, known


def data_seed(facts: dict[str, Any], entry: Any) -> int:
    """The seed a run's splits were drawn with: graph.json's ``seed`` for data whose split the
    run's --seed chooses (``entry.seeded``: karate's labelled members), else 0 (fixed splits;
    a run from before graph.json kept its seed was drawn with 0 too)."""
    return int(facts.get("seed", 0)) if getattr(entry, "seeded", False) else 0


def node_indices(texts: Sequence[str], graph: Any) -> list[int]:
    """Node indices typed by the user (0-based, as in the data), checked against the graph."""
    out = []
    for text in texts:
        try:
            index = int(text)
        except ValueError:
            raise ValueError(
                f"NODE {text!r} is invalid: this run is over one graph; give node indices "
                f"0..{graph.num_nodes - 1}"
            ) from None
        if not 0 <= index < graph.num_nodes:
            raise ValueError(
                f"NODE {text!r} is invalid: the graph has {graph.num_nodes} nodes (0.."
                f"{graph.num_nodes - 1})"
            )
        out.append(index)
    return out


def forward(run: GraphRun, graphs: Sequence[Any], return_attention: bool = False) -> Any:
    """The model's output for ``graphs`` (one padded batch) [, its attention weights]."""
    import torch

    from tfam.training.tasks.graphs import collate_graphs

    batch = {k: v.to(run.device) for k, v in collate_graphs(graphs).items()}
    with torch.inference_mode():
        return run.model(
            batch["nodes"],
            batch["edge_index"],
            batch["node_mask"],
            batch["edge_types"],
            return_attention=return_attention,
        )


# ---------------------------------------------------------------------------------------------
# tfam eval (a graph run)

# The task a graph run's head was trained for.
HEAD_TASKS = {
    "node": "node-classification",
    "graph": "graph-classification",
    "value": "graph-regression",
}
WRONG_SHOWN = 20  # misclassified nodes or molecules printed (all nodes, 100 molecules saved)
WORST_SHOWN = 10  # a regression's largest errors printed (and saved)
SMILES_SHOWN = 70  # characters of a SMILES printed in the worst-molecules table
EVAL_BATCH_NODES = 8192  # a batch's padded nodes at most (sorted by size, like eval batches)


def run_eval(args: Any, source: Any = None) -> int:
    """`tfam eval DIR` of a graph run on a split of its data (default: the test split, else the
    validation holdout of the user's files), by the head it was trained with:

    - node classification (karate): accuracy over the split's labelled nodes (the club's 30
      unlabelled members), per class, which nodes are wrong, a confusion matrix PNG;
    - graph classification: accuracy, per class, most confused, wrong molecules, confusion PNG;
    - graph regression: MAE, RMSE and R² in the data's units, beside predicting the training
      mean; the worst molecules (SMILES, true, predicted); a predicted-vs-true scatter PNG.

    Every number goes to DIR/eval.json."""
    from tfam.cli.common import device_from
    from tfam.data import resolve_data
    from tfam.training.results import write_json

    run = load_graph_run(args.dir, device_from(args), "eval")
    run_dir = run.run_dir
    config = run.model.config
    task = HEAD_TASKS.get(str(config.head))
    if task is None:
        raise ValueError(f"{run_dir}: the model's head {config.head!r} is not a graph task's")
    name = args.data or run.facts.get("data")
    if not name:
        raise ValueError(f"{run_dir}/graph.json names no dataset: pass --data NAME")
    entry = resolve_data(str(name), run=run_dir)
    if task not in entry.tasks:
        raise ValueError(
            f"--data {entry.name} is a {entry.task} dataset, but {run_dir} was trained for "
            f"{task} on {run.facts.get('data')}: evaluate it on {task} data"
        )
    split = eval_split(args, entry)
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} is invalid: expected an int >= 1")
    seed = data_seed(run.facts, entry)
    data = entry.load(split, root=args.root, seed=seed)
    _check_graph_data(data, config, run.facts, entry.name, run_dir)
    total = len(data)
    n = total if args.limit is None else min(args.limit, total)
    if n == 0:
        raise ValueError(f"{entry.name} {split} holds no graphs")
    graphs = [data[i] for i in range(n)]
    outputs = _outputs(run, graphs, args.batch_size or 64)
    numbers: dict[str, Any] = {
        "model_dir": str(run_dir), "dataset": entry.name, "task": task, "split": split,
        "num_graphs": n, "split_size": total,
    }  # fmt: skip
    if getattr(entry, "seeded", False):
        numbers["seed"] = seed
    shown = f"first {n} of {total}" if n < total else f"{total}"
    noun = data.item_noun if n != 1 else data.item_noun[:-1]  # "1 molecule"
    if task == "node-classification":
        train = entry.load(entry.train_split, root=args.root, seed=seed)
        numbers.update(_report_nodes(run, data, graphs, outputs, train, entry.name, split, args))
    elif task == "graph-classification":
        mean = sum(g.num_nodes for g in graphs) / n
        print(f"model {run_dir} on {entry.name} {split}: {shown} {noun}, "
              f"{mean:.1f} atoms on average")  # fmt: skip
        numbers.update(_report_graph_classes(run, data, graphs, outputs, entry.name, split, args))
    else:
        mean = sum(g.num_nodes for g in graphs) / n
        print(f"model {run_dir} on {entry.name} {split}: {shown} {noun}, "
              f"{mean:.1f} atoms on average")  # fmt: skip
        numbers.update(_report_values(run, data, graphs, outputs, entry.name, split, args))
    write_json(run_dir / "eval.json", numbers)
    print(f"numbers: {run_dir / 'eval.json'}")
    return 0


def _check_graph_data(
    data: Any, config: Any, facts: dict[str, Any], name: str, run_dir: Path
) -> None:
    """The data's node features and classes must be the model's: one line if not."""
    if int(data.in_features) != int(config.in_features):
        raise ValueError(
            f"--data {name}: its nodes have {data.in_features} features, but {run_dir}'s model "
            f"takes {config.in_features}"
        )
    ours, theirs = list(facts.get("classes") or []), list(data.classes)
    if config.head != "value" and ours and theirs != ours:
        raise ValueError(
            f"--data {name} has classes {', '.join(theirs)}, but {run_dir} was trained on "
            f"{', '.join(ours)}: evaluate it on data with the run's classes"
        )


def _outputs(run: GraphRun, graphs: Sequence[Any], batch_size: int) -> list[Any]:
    """Each graph's float32 output on the CPU: (N, C) node logits cut to its nodes, (C,)
    logits or a value (); batches sorted by size and bounded by padded nodes."""
    import torch

    from tfam.training.batching import eval_index_batches

    sizes = torch.tensor([g.num_nodes for g in graphs], dtype=torch.int64)
    out: list[Any] = [None] * len(graphs)
    for idx in eval_index_batches(len(graphs), batch_size, sizes, EVAL_BATCH_NODES):
        chunk = [graphs[int(i)] for i in idx]
        y = forward(run, chunk).float().cpu()
        for row, i in enumerate(idx.tolist()):
            out[i] = y[row, : graphs[i].num_nodes] if y.ndim == 3 else y[row]
    return out


def _class_table(title: str, unit: str, classes: Sequence[str], confusion: Any) -> list[dict]:
    """Print (and return) the per-class rows of a confusion matrix (rows = true class)."""
    totals = confusion.sum(dim=1).tolist()
    width = max(5, len(title), *(len(c) for c in classes))
    print()
    print(f"{title:<{width}}  {unit:>8}  {'correct':>8}  {'accuracy':>8}")
    rows = []
    for j, c in enumerate(classes):
        count, right = int(totals[j]), int(confusion[j, j])
        acc = f"{100 * right / count:.2f}%" if count else "-"
        print(f"{c:<{width}}  {count:>8}  {right:>8}  {acc:>8}")
        rows.append({"class": c, "count": count, "correct": right,
                     "acc": right / count if count else None})  # fmt: skip
    return rows


def _confusion_png(confusion: Any, classes: Sequence[str], args: Any, what: str, title: str) -> str:
    from tfam.viz import plot_confusion

    out = Path(args.out) if args.out else Path(args.dir) / "confusion.png"
    plot_confusion(confusion, list(classes), out, title=f"Confusion matrix ({what}): {title}")
    return str(out)


def _report_nodes(
    run: GraphRun, data: Any, graphs: Sequence[Any], outputs: list[Any], train: Any,
    name: str, split: str, args: Any,
) -> dict[str, Any]:  # fmt: skip
    """Node classification: accuracy over the split's labelled nodes, per class, the wrong
    ones (with the class they were given and its probability), confusion PNG."""
    import torch
    import torch.nn.functional as F

    classes = list(data.classes)
    k = len(classes)
    noun = getattr(data.info, "node_noun", "nodes")
    one = noun.rstrip("s")
    confusion = torch.zeros(k, k, dtype=torch.long)
    loss, wrong = 0.0, []
    for gi, (g, logits) in enumerate(zip(graphs, outputs, strict=True)):
        labels = g.node_labels
        keep = labels >= 0
        if not bool(keep.any()):
            continue
        target, scores = labels[keep], logits[keep]
        loss += float(F.cross_entropy(scores, target, reduction="sum"))
        probs = scores.softmax(dim=-1)
        guess = probs.argmax(dim=-1)
        confusion += torch.bincount(target * k + guess, minlength=k * k).reshape(k, k)
        nodes = keep.nonzero().flatten().tolist()
        for j, node in enumerate(nodes):
            if int(guess[j]) != int(target[j]):
                wrong.append({
                    **({"graph": gi} if len(graphs) > 1 else {}), "node": node,
                    "true": classes[int(target[j])], "predicted": classes[int(guess[j])],
                    "p": float(probs[j, guess[j]]),
                })  # fmt: skip
    counted = int(confusion.sum())
    correct = int(confusion.trace())
    acc = correct / counted if counted else math.nan
    trained = (
        [int(i) for i in (train[0].node_labels >= 0).nonzero().flatten()] if len(train) else []
    )
    seed = data.facts.get("seed")
    labelled = (
        f" (trained on {noun} {', '.join(map(str, trained))}"
        + (f", drawn by --seed {seed}" if seed is not None else "")
        + ")"
        if 0 < len(trained) <= 12
        else f" (trained on {len(trained)} labelled {noun})"
    )
    graphs_text = f"{len(graphs)} graph{'s' if len(graphs) != 1 else ''}"
    print(f"model {run.run_dir} on {name} {split}: {counted} labelled {noun} of "
          f"{graphs_text}{labelled}")  # fmt: skip
    print(f"accuracy: {100 * acc:.2f}% ({correct}/{counted} {noun})")
    print(f"loss: {loss / max(counted, 1):.4f}")
    per_class = _class_table("class", noun, classes, confusion)
    print()
    if wrong:
        print(f"wrong: {len(wrong)} of {counted} {noun} (true -> predicted, its probability)")
        for w in wrong[:WRONG_SHOWN]:
            where = f" of graph {w['graph']}" if "graph" in w else ""
            print(f"  {one} {w['node']}{where}: {w['true']} -> {w['predicted']} ({w['p']:.2f})")
        if len(wrong) > WRONG_SHOWN:
            print(f"  ... {len(wrong) - WRONG_SHOWN} more in eval.json")
    else:
        print(f"wrong: none of the {counted} {noun}")
    title = f"{run.run_dir.name}, {name} {split}"
    png = _confusion_png(confusion, classes, args, noun, title)
    sys.stdout.flush()
    note_chance(acc, confusion.sum(dim=1).tolist(), split)
    print(f"confusion matrix: {png}")
    return {
        "acc": acc, "loss": loss / max(counted, 1), "counted": counted, "correct": correct,
        "unit": noun, "trained_on": trained, "per_class": per_class, "wrong": wrong,
        "confusion": confusion.tolist(), "confusion_png": png,
    }  # fmt: skip


def _report_graph_classes(
    run: GraphRun, data: Any, graphs: Sequence[Any], outputs: list[Any], name: str, split: str,
    args: Any,
) -> dict[str, Any]:  # fmt: skip
    """Graph classification: accuracy, per class, most confused, wrong molecules, confusion."""
    import torch
    import torch.nn.functional as F

    classes = list(data.classes)
    k = len(classes)
    logits = torch.stack(list(outputs))
    target = torch.tensor([int(g.target) for g in graphs], dtype=torch.long)
    probs = logits.softmax(dim=-1)
    guess = probs.argmax(dim=-1)
    loss = float(F.cross_entropy(logits, target))
    confusion = torch.bincount(target * k + guess, minlength=k * k).reshape(k, k)
    counted, correct = len(graphs), int(confusion.trace())
    acc = correct / counted
    noun = data.item_noun
    print(f"accuracy: {100 * acc:.2f}% ({correct}/{counted} {noun})")
    print(f"loss: {loss:.4f}")
    per_class = _class_table("class", noun, classes, confusion)
    off = confusion.clone()
    off.fill_diagonal_(0)
    top = off.flatten().topk(min(3, k * k))
    confused = [(classes[int(j) // k], classes[int(j) % k], int(v))
                for v, j in zip(*top) if int(v) > 0]  # fmt: skip
    if confused:
        print()
        print("most confused (true -> predicted): "
              + ", ".join(f"{t} -> {p} ({v})" for t, p, v in confused))  # fmt: skip
    wrong = [
        {"name": g.name, "true": classes[int(target[i])], "predicted": classes[int(guess[i])],
         "p": float(probs[i, guess[i]])}
        for i, g in enumerate(graphs) if int(guess[i]) != int(target[i])
    ]  # fmt: skip
    if wrong:
        print()
        print(f"wrong ({len(wrong)} of {counted}; the first {min(len(wrong), WRONG_SHOWN)}):")
        width = max(len(w["name"]) for w in wrong[:WRONG_SHOWN])
        for w in wrong[:WRONG_SHOWN]:
            print(f"  {w['name']:<{width}}  {w['true']} -> {w['predicted']} ({w['p']:.2f})")
    print()
    png = _confusion_png(confusion, classes, args, noun, f"{run.run_dir.name}, {name} {split}")
    sys.stdout.flush()
    note_chance(acc, confusion.sum(dim=1).tolist(), split)
    print(f"confusion matrix: {png}")
    return {
        "acc": acc, "loss": loss, "counted": counted, "correct": correct, "unit": noun,
        "per_class": per_class,
        "most_confused": [{"true": t, "predicted": p, "count": v} for t, p, v in confused],
        "wrong": wrong[:100], "confusion": confusion.tolist(), "confusion_png": png,
    }  # fmt: skip


def _report_values(
    run: GraphRun, data: Any, graphs: Sequence[Any], outputs: list[Any], name: str, split: str,
    args: Any,
) -> dict[str, Any]:  # fmt: skip
    """Graph regression: MAE, RMSE and R² in the data's units beside predicting the training
    mean (the value head's shift); the worst molecules; a predicted-vs-true scatter PNG."""
    import torch

    from tfam.viz import plot_regression

    unit = str(run.facts.get("unit") or data.unit or "")
    suffix = f" {unit}" if unit else ""
    y = torch.tensor([float(g.target) for g in graphs], dtype=torch.float64)
    p = torch.stack([o.reshape(()) for o in outputs]).double()

    def scores(pred: torch.Tensor) -> dict[str, float]:
        e = pred - y
        sst = float((y - y.mean()).square().sum())
        return {
            "mae": float(e.abs().mean()),
            "rmse": float(e.square().mean().sqrt()),
            # R² = 1 - SSE/SST over the evaluated graphs (as the training task's metric)
            "r2": 1.0 - float(e.square().sum()) / sst if sst > 0 else math.nan,
        }

    ours = scores(p)
    mean = float(run.model.config.target_shift)  # the training targets' mean
    baseline = scores(torch.full_like(y, mean))

    def r2(value: float) -> str:
        return "undefined (the true values do not vary)" if math.isnan(value) else f"{value:.4f}"

    print(f"MAE: {ours['mae']:.3f}{suffix}   RMSE: {ours['rmse']:.3f}{suffix}   "
          f"R²: {r2(ours['r2'])}")  # fmt: skip
    print(f"predicting the training mean ({mean:.2f}{suffix}) instead: MAE "
          f"{baseline['mae']:.3f}{suffix}, RMSE {baseline['rmse']:.3f}{suffix}, "
          f"R² {r2(baseline['r2'])}")  # fmt: skip
    for d in (ours, baseline):  # eval.json is strict JSON: no NaN
        d["r2"] = None if math.isnan(d["r2"]) else d["r2"]
    error = p - y
    order = error.abs().argsort(descending=True)[:WORST_SHOWN].tolist()
    worst = [{"smiles": graphs[i].name, "true": float(y[i]), "predicted": float(p[i]),
              "error": float(error[i])} for i in order]  # fmt: skip
    print()
    print(f"worst {len(worst)} (largest |error|{', in ' + unit if unit else ''}):")
    print(f"  {'true':>9}  {'predicted':>9}  {'error':>9}  SMILES")
    for w in worst:
        text = w["smiles"]  # a long one is cut here, whole in eval.json
        text = text if len(text) <= SMILES_SHOWN else text[: SMILES_SHOWN - 3] + "..."
        print(f"  {w['true']:>9.2f}  {w['predicted']:>9.2f}  {w['error']:>+9.2f}  {text}")
    out = Path(args.out) if args.out else run.run_dir / "predicted_vs_true.png"
    plot_regression(y, p, out, title=f"{run.run_dir.name}: {name} {split}", unit=unit)
    print()
    print(f"predicted vs true: {out}")
    return {
        **ours, "unit": unit, "counted": len(graphs), "target_mean": mean,
        "mean_baseline": baseline, "worst": worst, "scatter_png": str(out),
    }  # fmt: skip
