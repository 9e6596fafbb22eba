"""Studies: the source documents' claims and questions, answered by experiments anyone can
rerun (``tfam study NAME --profile tiny|quick|full --out DIR``).

Each study registers itself (:func:`~tfam.studies.base.register_study`); importing this package
registers them all. A study calls what tfam already measures (``tfam.bench``, the
length-extrapolation machinery, the bricks) and adds only what is new.
"""

from tfam.studies.base import PROFILES, STUDIES, Profile, Progress, Study, get_study
from tfam.studies.stats import compare, summarize

# Registration: one import per study module.
import tfam.studies.attention_text  # noqa: E402,F401  isort: skip
import tfam.studies.bert_vs_gpt  # noqa: E402,F401  isort: skip
import tfam.studies.block_mixing  # noqa: E402,F401  isort: skip
import tfam.studies.cnn_attention  # noqa: E402,F401  isort: skip
import tfam.studies.embeddings  # noqa: E402,F401  isort: skip
import tfam.studies.fc_vs_attention  # noqa: E402,F401  isort: skip
import tfam.studies.ffn_sharing  # noqa: E402,F401  isort: skip
import tfam.studies.flash  # noqa: E402,F401  isort: skip
import tfam.studies.graph_edges  # noqa: E402,F401  isort: skip
import tfam.studies.heads  # noqa: E402,F401  isort: skip
import tfam.studies.ln_vs_bn  # noqa: E402,F401  isort: skip
import tfam.studies.long_sequences  # noqa: E402,F401  isort: skip
import tfam.studies.no_positions  # noqa: E402,F401  isort: skip
import tfam.studies.positions  # noqa: E402,F401  isort: skip
import tfam.studies.recurrence  # noqa: E402,F401  isort: skip
import tfam.studies.speech_truncated  # noqa: E402,F401  isort: skip
import tfam.studies.vision  # noqa: E402,F401  isort: skip

__all__ = ["PROFILES", "STUDIES", "Profile", "Progress", "Study", "compare", "get_study",
           "summarize"]  # fmt: skip
