# edgessm: every target sets itself up (system packages, virtualenv, install) and is safe to re-run.
#
#   make test    ruff + the unit tests (what CI runs)
#   make bench   the FFT-convolution contraction benchmark
#   make demo    the shipped kws35 and denoise models on the demo recordings in demos/
#
# The virtualenv lives outside the clone, keyed by the hash of the pin file (every dependency is
# pinned there), so a new clone reuses it and a change of pins builds a fresh one from nothing.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= $(shell command -v python3.11 || command -v python3)
KEY := $(shell sha256sum constraints.txt | cut -c1-16)
VENV ?= $(HOME)/.cache/edgessm/venv-$(KEY)
# Debian packages: PortAudio for the microphone path (sounddevice), libsndfile for soundfile, and
# the offline TTS engines of the synthetic speech corpus (espeak-ng, flite, festival + voices), and
# PulseAudio for the microphone test (a virtual source fed by a wav file).
SYSTEM_PACKAGES := libportaudio2 libsndfile1 espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k \
	festvox-us-slt-hts pulseaudio pulseaudio-utils libasound2-plugins
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# pip warns once per unreachable optional index a machine may configure; keep the log readable
QUIET_PIP := sed -u '/^WARNING: Location .* is ignored/d'


.PHONY: setup system venv test lint bench demo clean-venv

setup: system venv
	@# point the shared virtualenv at this checkout (fast, no downloads)
	@$(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e . >$(VENV)/project-install.log 2>&1 \
	  || { cat $(VENV)/project-install.log; exit 1; }

system:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(VENV)/.complete

$(VENV)/.complete:
	@echo "building virtualenv $(VENV) (first run only: torch is a large download)"
	rm -rf "$(VENV).tmp"
	$(PYTHON) -m venv "$(VENV).tmp"
	"$(VENV).tmp/bin/python" -m pip install --quiet --upgrade "pip>=23" "setuptools>=77" wheel 2>&1 | $(QUIET_PIP)
	"$(VENV).tmp/bin/python" -m pip install --quiet -c constraints.txt ".[dev]" 2>&1 | $(QUIET_PIP)
	"$(VENV).tmp/bin/python" -m pip uninstall --quiet -y edgessm
	rm -rf "$(VENV)" && mv "$(VENV).tmp" "$(VENV)"
	touch "$@"

lint: setup
	$(VENV)/bin/python -m ruff check .
	$(VENV)/bin/python -m ruff format --check .

test: lint
	$(VENV)/bin/python -m pytest -q

bench: setup
	$(VENV)/bin/python -m edgessm.bench fftconv

demo: setup
	$(VENV)/bin/edgessm listen --model kws35 --input demos/keywords.wav --fast
	$(VENV)/bin/edgessm denoise demos/noisy_speech.wav /tmp/edgessm-demo-denoised.wav

clean-venv:
	rm -rf "$(VENV)" "$(VENV).tmp"
