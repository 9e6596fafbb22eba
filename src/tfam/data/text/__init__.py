"""Text processing that is no dataset: tokenizers (tokenizer.py: the Tokenizer ABC, BPE,
characters and ``load_tokenizer`` for every kind; wordpiece.py: BERT's WordPiece) and what the
text datasets share (dataset.py: splits, TextDatasetInfo, the TokenDataset base). The package
face imports nothing: import a module by its full name (``tfam.data`` re-exports the public
names).
"""
