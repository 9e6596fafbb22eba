"""Graphs as model input: a node is a vector, an edge a (source, target) pair with a type.

graph.py (:class:`Graph`, :class:`GraphDataset`, :class:`GraphInfo`), molecules.py (SMILES ->
a graph of one-hot atoms and typed bonds, through RDKit). The package face imports nothing:
import a module by its full name.
"""
