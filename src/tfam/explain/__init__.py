"""Step-by-step table of a model: input shape, output shape, parameters and FLOPs per step.

``tfam.explain("vit_base_patch16_224")`` walks the model in the order of the source
documents' ViT description: patching -> linear projection -> + [CLS] -> + position -> per block
(LN, MHSA with its sub-steps, residual, LN, MLP, residual) -> final LN -> pooling ->
pre-logits -> head. ``explain_stack(stack, seq_len=..., memory_len=...)`` explains a bare
TransformerStack, a decoder's cross-attention (scores Lt x Ls) included.

Each brick reports its own rows (``bricks``: norm, attention, MLP, residual; ``blocks``: encoder
and decoder blocks, the stack); a family supplies only its embedding and head rows, in one
module of ``families/`` registered by family name (``families/vit.py``).

Shapes are not re-derived from formulas: the model runs once on the meta device (tensors
with shapes but no storage, so even ViT-L costs no memory) with forward hooks on its modules,
attention kernels included; every shape in the table is one that the code produced. Each row
also carries the shape in the source documents' symbols ("(N+1) x D"), and the two are checked
against each other, so the table cannot drift from the code silently. A model too large for a
tensor to describe is a ValueError naming the size.

Parameters are exact: every parameter of the model is claimed by exactly one row, and the
total is checked against the model's parameter count.

FLOPs are analytic per module type, from the traced shapes, for the whole batch:

- a multiply-add counts as 2 FLOPs: a matmul (m x k) @ (k x n) is 2*m*k*n;
- a bias, residual or position add is 1 FLOP per output element;
- attention: scores Q K^T (2*Lq*Lk*Dh per head), scaling by 1/sqrt(Dh) (1 per score), softmax,
  weighted sum alpha V (2*Lq*Lk*Dh per head), all included; masked scores are counted, as the
  kernels compute them;
- element-wise functions cost ``FLOPS_PER_ELEMENT`` FLOPs per element (approximate: an exp or
  erf is counted as one FLOP); reshapes, concatenation, [CLS] pooling and dropout cost 0.

Shape symbols: B batch, L tokens (Lt target, Ls source in a decoder), D width, H heads,
Dh = D / H head width, F = ffn_dim; each family adds its own (ViT: C, H_img, W_img, P_h, P_w,
N, R, K).
"""

from tfam.explain import families  # noqa: F401  (registers every family's rows)
from tfam.explain.api import FAMILIES, FamilyExplainer, explain, explain_stack, register_family
from tfam.explain.table import FLOPS_PER_ELEMENT, ExplainRow, ExplainTable

__all__ = [
    "FAMILIES",
    "FLOPS_PER_ELEMENT",
    "ExplainRow",
    "ExplainTable",
    "FamilyExplainer",
    "explain",
    "explain_stack",
    "register_family",
]
