"""Zachary's karate club (Zachary 1977), as networkx ships it: 34 members, 78 friendships,
and the faction each member joined when the club split ("Mr. Hi" or "Officer").

Node classification with few labels: the model sees the whole graph but is told the faction
of 4 members only, the two leaders (member 0, Mr. Hi, and member 33, the officer) and one more
member of each faction drawn by ``seed``; it is scored on the other 30. ``tfam train graph
--data karate --seed S`` draws them with the run's seed S (the catalog entry is ``seeded``),
prints them, and keeps the seed and the members in the run's graph.json, from which
``--resume``, ``tfam eval``, ``tfam predict`` and ``tfam viz graph`` load the same split.

Node features are one-hot identities (F = 34): the members have no attributes of their own,
and identity lets each member learn its own vector, so what the model learns of a member
comes from whom it is joined to (degree features would make members of equal degree the same
and say nothing of which side they are on).
"""

from __future__ import annotations

import torch

from tfam.data.graphs.graph import UNLABELLED, Graph, GraphDataset, GraphInfo

__all__ = ["KARATE_CLASSES", "KARATE_INFO", "karate_graph", "labelled_members", "load_karate"]

KARATE_CLASSES = ("Mr. Hi", "Officer")
LEADERS = (0, 33)
KARATE_SPLITS = ("train", "test")

KARATE_INFO = GraphInfo(
    name="karate",
    in_features=34,
    edge_types=1,
    classes=KARATE_CLASSES,
    head="node",
    description=(
        "Zachary's karate club (networkx): 34 members, 78 friendships, two factions; one-hot "
        "identities; trained on 4 labelled members (0, 33 and one more per faction, drawn by "
        "the run's --seed), scored on the other 30"
    ),
    facts={"train_size": 1, "test_size": 1},
    inputs="nodes",
    node_noun="members",
)


def _networkx():  # noqa: ANN202
    try:
        import networkx as nx
    except ImportError:
        raise ImportError(
            "the karate club needs the networkx package, which is not installed: "
            "pip install networkx"
        ) from None
    return nx


def karate_graph() -> tuple[Graph, torch.Tensor]:
    """(the club as a :class:`Graph` without labels, the faction of every member (34,))."""
    g = _networkx().karate_club_graph()
    n = g.number_of_nodes()
    factions = torch.tensor(
        [KARATE_CLASSES.index(g.nodes[i]["club"]) for i in range(n)], dtype=torch.int64
    )
    pairs = [(int(a), int(b)) for a, b in g.edges()]
    sources = [a for a, b in pairs] + [b for a, b in pairs]
    targets = [b for a, b in pairs] + [a for a, b in pairs]
    graph = Graph(
        nodes=torch.eye(n),
        edge_index=torch.tensor([sources, targets], dtype=torch.int64),
        edge_types=torch.zeros(2 * len(pairs), dtype=torch.int64),
        name="karate",
    )
    return graph, factions


def labelled_members(factions: torch.Tensor, seed: int = 0) -> list[int]:
    """The 4 members whose faction training sees: 0 and 33, and one more member of each
    faction drawn with ``seed``."""
    g = torch.Generator().manual_seed(int(seed))
    chosen = list(LEADERS)
    for faction in range(len(KARATE_CLASSES)):
        pool = [i for i in range(len(factions)) if factions[i] == faction and i not in LEADERS]
        chosen.append(pool[int(torch.randint(len(pool), (1,), generator=g))])
    return sorted(chosen)


def load_karate(split: str = "train", *, seed: int = 0) -> GraphDataset:
    """The club for ``split``: "train", labels on the 4 members of :func:`labelled_members`;
    "test", labels on the other 30 (-100 elsewhere). The same graph and features in both."""
    if split not in KARATE_SPLITS:
        raise ValueError(f"split={split!r} is invalid: expected one of {', '.join(KARATE_SPLITS)}")
    graph, factions = karate_graph()
    members = labelled_members(factions, seed)
    known = torch.zeros(len(factions), dtype=torch.bool)
    known[members] = True
    shown = known if split == "train" else ~known
    graph.node_labels = torch.where(shown, factions, torch.full_like(factions, UNLABELLED))
    sides = ", ".join(f"{i} ({KARATE_CLASSES[int(factions[i])]})" for i in members)
    note = (
        f"karate: labelled members {sides}, drawn by --seed {int(seed)}; scored on the other "
        f"{len(factions) - len(members)}"
    )
    facts = {"seed": int(seed), "labelled": members}
    return GraphDataset([graph], KARATE_INFO, split, facts=facts, note=note)
