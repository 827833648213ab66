# edgessm: every target sets itself up (system packages, virtualenvs, install) and is safe to re-run.
#
#   make setup   system packages, the dependencies and this checkout's environment .venv/
#   make test    ruff + the unit tests (what CI runs)
#   make bench   the FFT-convolution contraction benchmark
#   make demo    the shipped kws35 and denoise models on the demo recordings in demos/
#   make music / make ambience   recorded music / everyday noise for training (Debian game packages)
#
# Two environments:
# - DEPS, the pinned dependencies (torch & co., several GB), lives outside the clone, keyed by the hash
#   of the pin file: new clones reuse it, a change of pins builds a fresh one. edgessm is never
#   installed into it, so clones at different commits cannot run each other's code.
# - .venv/ in this checkout: a small virtualenv that sees DEPS (site.addsitedir in a .pth file) and
#   holds this checkout, installed editable, with its `edgessm` command. `source .venv/bin/activate`
#   puts `edgessm` on PATH (or call .venv/bin/edgessm).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= $(shell command -v python3.11 || command -v python3)
KEY := $(shell sha256sum constraints.txt | cut -c1-16)
DEPS ?= $(HOME)/.cache/edgessm/venv-$(KEY)
VENV := .venv
# Debian packages: PortAudio for the microphone path (sounddevice), libsndfile for soundfile, and
# the offline TTS engines of the synthetic speech corpus (espeak-ng, flite, festival + voices), and
# PulseAudio for the microphone test (a virtual source fed by a wav file).
SYSTEM_PACKAGES := libportaudio2 libsndfile1 espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k \
	festvox-us-slt-hts pulseaudio pulseaudio-utils libasound2-plugins \
	wordnet-base sword-text-web dict-gcide
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# pip warns once per unreachable optional index a machine may configure; keep the log readable
QUIET_PIP := sed -u '/^WARNING: Location .* is ignored/d'


.PHONY: ambience music setup system venv test lint bench demo clean-venv

setup: system venv $(VENV)/.deps-$(KEY)

# this checkout's environment: rebuilt when the pins (hence DEPS) change; seconds, no downloads
$(VENV)/.deps-$(KEY): $(DEPS)/.complete pyproject.toml
	rm -rf "$(VENV)"
	"$(DEPS)/bin/python" -m venv --without-pip "$(VENV)"
	site=$$("$(VENV)/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	deps=$$("$(DEPS)/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	echo "import site; site.addsitedir('$$deps')" > "$$site/_edgessm_deps.pth"
	@# an older Makefile installed a checkout into DEPS itself: take it out so only this one is seen
	"$(DEPS)/bin/python" -m pip uninstall --quiet -y edgessm >/dev/null 2>&1 || true
	"$(VENV)/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e . >"$(VENV)/install.log" 2>&1 \
	  || { cat "$(VENV)/install.log"; exit 1; }
	echo "$(DEPS)" > "$(VENV)/deps-path"
	touch "$@"

system:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# real music for training (edgessm.data.music; 585 MB, not needed by the tests or the runtime)
MUSIC_PACKAGES := warzone2100-music ufoai-music wesnoth-1.16-music nexuiz-music singularity-music
music:
	$(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(MUSIC_PACKAGES)

# real everyday noise for training (edgessm.data.ambience: ambient loops and foley of game sound packages;
# 760 MB, not needed by the tests or the runtime)
AMBIENCE_PACKAGES := ufoai-sound megaglest-data lincity-ng-data widelands-data searchandrescue-data minetest-data \
	simutrans-pak64
ambience:
	$(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(AMBIENCE_PACKAGES)

venv: $(DEPS)/.complete

# built in place under a temporary name would leave its scripts' #! lines pointing at that name, so it
# is built at its final path and marked complete last (an interrupted build starts again from nothing)
$(DEPS)/.complete:
	@echo "building the dependencies' virtualenv $(DEPS) (first run only: torch is a large download)"
	rm -rf "$(DEPS)"
	$(PYTHON) -m venv "$(DEPS)"
	"$(DEPS)/bin/python" -m pip install --quiet --upgrade "pip>=23" "setuptools>=77" wheel 2>&1 | $(QUIET_PIP)
	"$(DEPS)/bin/python" -m pip install --quiet -c constraints.txt ".[dev]" 2>&1 | $(QUIET_PIP)
	"$(DEPS)/bin/python" -m pip uninstall --quiet -y edgessm
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
	rm -rf "$(VENV)" "$(DEPS)"
