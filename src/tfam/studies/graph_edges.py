"""Study ``graph-edges``: ``001_*`` says that on a graph a node is a vector and self-attention
is computed only between nodes joined by an edge. tfam's graph Transformer
(:mod:`tfam.models.graph`) trained by its catalog recipes (:func:`tfam.training.recipes.
train_recipe`, as ``tfam train graph --data ...``) three ways:

- ``mask``: the graph mask (node i attends to j only along an edge j -> i, and to itself) and
  the learned edge-type bias: the model as shipped;
- ``bias``: no mask (every node attends to every node), the edge-type bias kept, so the scores
  of bonded pairs can still be told apart;
- ``none``: no mask, no bias: the nodes are a set, the graph is gone.

On Zachary's karate club (node classification from 4 labelled members, accuracy on the other
30) and on the NCI molecules' polar surface areas (graph regression, MAE and R² on the held-out
fifth, beside predicting the training mean). The share of node pairs the mask lets attend
says what the mask saves.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine
from tfam.studies.stats import compare, summarize

__all__ = ["CONDITIONS", "GraphEdgesStudy", "attended_share", "nci_data"]

CONDITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "mask": ("graph mask + edge-type bias (as shipped)", {}),
    "bias": ("no mask, edge-type bias kept", {"graph_mask": False}),
    "none": ("no mask, no bias (a set of nodes)", {"graph_mask": False, "edge_bias": False}),
}


def attended_share(graphs: Any) -> float:
    """Mean over ``graphs`` of the share of the N² (query, key) pairs the graph mask lets
    attend: (directed edges + N self-loops) / N²."""
    shares = [(g.num_edges + g.num_nodes) / g.num_nodes**2 for g in graphs if g.num_nodes]
    return sum(shares) / len(shares)


def nci_data(molecules: int | None) -> tuple[Any, Any, Any, Any] | str:
    """(entry, fit, val, test) of nci-tpsa; with ``molecules``, the first that many readable
    rows of the file instead (3/4 fit, the rest test, no val; target statistics of that fit):
    a check in seconds. A string says why there is no data (rdkit missing)."""
    from tfam.data import get_dataset

    try:
        from tfam.data.sources.nci import load_nci_tpsa, read_nci_tpsa
    except ImportError as err:  # pragma: no cover - rdkit is a dependency of the graph data
        return str(err)
    entry = get_dataset("nci-tpsa")
    try:
        if molecules is None:
            fit, val, test = (load_nci_tpsa(s) for s in ("fit", "val", "test"))
            return entry, fit, val, test
        from tfam.data.graphs.graph import GraphDataset, GraphInfo, target_stats
        from tfam.data.graphs.molecules import smiles_to_graph

        graphs = []
        for smiles, value in read_nci_tpsa():
            try:
                graphs.append(smiles_to_graph(smiles, target=value))
            except ValueError:
                continue
            if len(graphs) == molecules:
                break
    except (ImportError, FileNotFoundError) as err:
        return str(err).splitlines()[0]
    cut = 3 * len(graphs) // 4
    base = entry.info
    info = GraphInfo(base.name, base.in_features, base.edge_types, base.classes, base.head,
                     f"the first {len(graphs)} NCI molecules", unit=base.unit,
                     facts={**target_stats([float(g.target) for g in graphs[:cut]]),
                            "train_size": cut, "test_size": len(graphs) - cut})  # fmt: skip
    entry = dataclasses.replace(entry, info=info)
    return entry, GraphDataset(graphs[:cut], info, "fit"), None, GraphDataset(graphs[cut:], info,
                                                                               "test")  # fmt: skip


def _karate(cond: str, seed: int, s: dict[str, Any]) -> dict[str, float]:
    from tfam.data import get_dataset
    from tfam.data.sources.karate import load_karate
    from tfam.training.recipes import train_recipe

    train_set, test_set = load_karate("train", seed=seed), load_karate("test", seed=seed)
    run = train_recipe(get_dataset("karate"), train_set, test_set, seed=seed,
                       overrides=CONDITIONS[cond][1], train={"epochs": s["karate_epochs"], "num_workers": 0})  # fmt: skip
    m = run.metrics(test_set)
    return {"accuracy": m["acc"], "train_accuracy": run.metrics(train_set)["acc"],
            "steps": run.steps, "seconds": run.seconds, "cpu_seconds": run.cpu_seconds}  # fmt: skip


def _nci(cond: str, seed: int, s: dict[str, Any], data: tuple[Any, ...]) -> dict[str, float]:
    from tfam.training.recipes import train_recipe

    entry, fit, val, test = data
    train = {"max_steps": s["nci_steps"], "max_minutes": None, "epochs": 1000,
             "warmup_epochs": 0.0, "warmup_steps": max(1, s["nci_steps"] // 20), "num_workers": 0}  # fmt: skip
    run = train_recipe(entry, fit, test, seed=seed, overrides=CONDITIONS[cond][1], train=train,
                       val_set=val)  # fmt: skip
    m = run.metrics(test)
    return {"mae": m["mae"], "r2": m["r2"], "steps": run.steps, "seconds": run.seconds,
            "cpu_seconds": run.cpu_seconds}  # fmt: skip


def _mean_baseline(data: tuple[Any, ...]) -> dict[str, float]:
    """Predicting the fit split's mean for every test molecule: MAE and R²."""
    entry, _, _, test = data
    values = torch.tensor([float(g.target) for g in test], dtype=torch.float64)
    shift = entry.info.target_shift
    sst = float(((values - values.mean()) ** 2).sum())
    return {"mae": float((values - shift).abs().mean()),
            "r2": 1 - float(((values - shift) ** 2).sum()) / sst}  # fmt: skip


@register_study
class GraphEdgesStudy(Study):
    name = "graph-edges"
    parallel = True  # independent training runs: tfam study --jobs N
    title = "Graphs: attention along the edges, or over every node"
    claim = (
        "001_* says that on a graph each node is a vector and the edges serve the attention "
        "scores: an edge means two nodes are related, so scores need computing only between "
        "nodes joined by an edge."
    )
    questions = ("001_*: self-attention on graphs (attention only along edges)",
                 "study 14 graph-edges")  # fmt: skip
    profiles = {
        "tiny": Profile(
            dict(karate_epochs=2, nci_molecules=24, nci_steps=1),
            expected="~3 s",
        ),
        "quick": Profile(
            dict(karate_epochs=200, nci_molecules=None, nci_steps=200),
            expected="~8 min (3 seeds; estimated from measured CPU per step, ~0.2 s for nci)",
        ),
        "full": Profile(
            dict(karate_epochs=200, nci_molecules=None, nci_steps=4500),
            expected="~2.5 h (3 seeds; the nci recipe's 40 epochs each; estimated, not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        nci = ("all of nci-tpsa (fit / val / the held-out fifth as test)" if s["nci_molecules"]
               is None else f"the first {s['nci_molecules']} NCI molecules (3/4 fit, 1/4 test)")  # fmt: skip
        return (
            "The graph Transformer trained by the catalog recipes (tfam.training.recipes."
            "train_recipe, as `tfam train graph --data karate|nci-tpsa`) under three "
            "conditions: " + "; ".join(f"`{k}` = {v[0]}" for k, v in CONDITIONS.items()) + ". "
            f"karate: preset graph_karate (D=32, 2 blocks, 2 heads, one-hot member identities), "
            f"{s['karate_epochs']} full-graph steps from 4 labelled members (0, 33 and one more "
            "of each faction, drawn by the seed), accuracy on the other 30. nci-tpsa: preset "
            f"graph_nci_tpsa (D=64, 4 blocks, 4 heads, sum readout), {s['nci_steps']} AdamW "
            f"steps of 32 molecules on {nci}; MAE (Å²) and R² on the test molecules. Machine: "
            f"{machine()}; the 2 cores were shared with other work."
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        from tfam.data.sources.karate import load_karate

        ctx.once("share/karate", lambda: attended_share(load_karate("train")))
        data = nci_data(s["nci_molecules"])
        if isinstance(data, str):
            ctx.store.put("nci_missing", data)
        else:
            ctx.once("share/nci", lambda: attended_share(data[3]))
            ctx.once("nci/mean-baseline", lambda: _mean_baseline(data))
        jobs = [("karate", c, seed) for seed in ctx.seeds for c in CONDITIONS]
        if not isinstance(data, str):
            jobs += [("nci", c, seed) for seed in ctx.seeds for c in CONDITIONS]
        with ctx.progress.bar(len(jobs), "graph-edges: train") as step:
            for what, cond, seed in jobs:
                if what == "karate":
                    fn = lambda c=cond, sd=seed: _karate(c, sd, s)  # noqa: E731
                else:
                    fn = lambda c=cond, sd=seed: _nci(c, sd, s, data)  # noqa: E731
                ctx.once(f"{what}/{cond}/seed{seed}", fn)
                step(f"{what} {cond} seed {seed}")

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        sections, conclusions = [], []
        rec = lambda what, c, key: [ctx.store.get(f"{what}/{c}/seed{sd}")[key]  # noqa: E731
                                    for sd in ctx.seeds]  # fmt: skip
        karate = {c: rec("karate", c, "accuracy") for c in CONDITIONS}
        has_nci = ctx.store.get("nci_missing") is None
        nci = {c: (rec("nci", c, "mae"), rec("nci", c, "r2")) for c in CONDITIONS} if has_nci \
            else {}  # fmt: skip
        rows = []
        for c, (what, _) in CONDITIONS.items():
            row = [f"`{c}`", what, summarize(karate[c]).format(1, 100),
                   summarize(rec("karate", c, "train_accuracy")).format(0, 100)]  # fmt: skip
            if has_nci:
                row += [summarize(nci[c][0]).format(2), summarize(nci[c][1]).format(3)]
            rows.append(row)
        header = ["condition", "attention", "karate: accuracy on 30 (%)", "on the 4 labelled (%)"]
        if has_nci:
            base = ctx.store.get("nci/mean-baseline")
            rows.append(["-", "predict the fit mean", "50.0 (chance, 2 factions)", "-",
                         f"{base['mae']:.2f}", f"{base['r2']:.3f}"])  # fmt: skip
            header += ["nci: MAE (Å²)", "nci: R²"]
        png = ctx.figure("graph_edges.png")
        _plot(karate, nci, png)
        share_k = ctx.store.get("share/karate")
        share_text = f"karate {100 * share_k:.1f}%"
        if has_nci:
            share_text += f", nci molecules {100 * ctx.store.get('share/nci'):.1f}% on average"
        sections.append(Section(
            "Accuracy and error by condition",
            md_table(header, rows)
            + f"\n\nPairs (query, key) the graph mask lets attend, of all N²: {share_text}."
            + f"\n\n![karate accuracy and nci MAE by condition]({png.name})",
        ))  # fmt: skip
        cost = [[f"`{c}`"] + [f"{summarize(rec(w, c, 'cpu_seconds')).mean:.1f}"
                              for w in (("karate", "nci") if has_nci else ("karate",))]
                for c in CONDITIONS]  # fmt: skip
        sections.append(Section(
            "Training time (CPU seconds per run, mean over seeds)",
            md_table(["condition", "karate", *(["nci"] if has_nci else [])], cost),
        ))  # fmt: skip
        for other in ("bias", "none"):
            c = compare(karate["mask"], karate[other])
            conclusions.append(
                f"karate, graph mask against `{other}` ({CONDITIONS[other][0]}): "
                + c.describe("mask", other, digits=1, scale=100, unit="points") + "."
            )  # fmt: skip
        if has_nci:
            for other in ("bias", "none"):
                c = compare(nci[other][0], nci["mask"][0])
                conclusions.append(
                    f"nci-tpsa MAE, `{other}` against the graph mask (lower is better): "
                    + c.describe(other, "mask", digits=2, unit="Å²") + "."
                )  # fmt: skip
        else:
            conclusions.append(f"nci-tpsa was not measured: {ctx.store.get('nci_missing')}.")
        k_mask_wins = all(compare(karate["mask"], karate[o]).counts
                          and compare(karate["mask"], karate[o]).diff > 0
                          for o in ("bias", "none"))  # fmt: skip
        conclusions.append(
            "On the club the edges are the only information besides the 4 labels (every "
            "member's feature is just its identity): "
            + ("with the graph mask the model labels the other members and without it does "
               "measurably worse, as the documents' claim implies." if k_mask_wins else
               "the graph mask did not measurably beat both unmasked variants here.")
        )  # fmt: skip
        return sections, conclusions


def _plot(karate: dict[str, list[float]], nci: dict[str, Any], png: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    panels = 2 if nci else 1
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.4), squeeze=False)
    names = list(CONDITIONS)
    for ax, (label, values) in zip(axes[0], [
        ("karate: accuracy on 30 members (%)", {c: [100 * v for v in karate[c]] for c in names}),
        ("nci-tpsa: test MAE (Å²)", {c: nci[c][0] for c in names} if nci else {}),
    ], strict=False):  # fmt: skip
        stats = [summarize(values[c]) for c in names]
        ax.bar(names, [m.mean for m in stats], yerr=[m.std for m in stats], capsize=3,
               color=["tab:blue", "tab:orange", "tab:gray"])  # fmt: skip
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("condition")
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
