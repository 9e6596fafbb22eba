"""Where data comes from, one module per source: the catalog's datasets (digits and
Fashion-MNIST in images.py, King James -> Reina-Valera and copy/reverse in seq2seq.py,
sentiment.py, treebank.py, charlm.py), the file formats they are read from (idx.py, sword.py),
the user's own files (folder.py) and where what is read once is kept (cache.py). The package
face imports nothing: import a module by its full name (``tfam.data`` re-exports the public
names).
"""
