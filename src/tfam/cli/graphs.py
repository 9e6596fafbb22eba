"""What the graph commands share (`tfam predict`, `tfam viz graph` on a graph run): the run's
graph.json (what its inputs are: molecules typed as SMILES, or one graph's nodes by index),
the molecules the user types, and the run's own graph."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    graph = entry.load(entry.train_split)[0]
    known = graph.node_labels.clone()
    for split in (entry.val_split, entry.test_split):
        if split:
            other = entry.load(split)[0].node_labels
            known = torch.where(other >= 0, other, known)
    return graph, known


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
