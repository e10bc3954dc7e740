# Positional Encodings in Transformers: set-up, book, tests, benchmarks.
#
#   make book   create .venv, install everything, build the book into _build/html
#   make test   create .venv and the system packages the tests need, run every test
#   make grading-setup   an instructor's machine: bubblewrap, then `course doctor`
#
# Each target does its own set-up; on a machine that is already set up the installs
# are skipped (they are keyed on pyproject.toml and constraints.txt).

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MATHJAX := _vendor/static/mathjax/es5/tex-mml-chtml.js
# axe-core, for the accessibility test of the built book (not served with the book).
AXE := _vendor/axe/axe.min.js
SYSTEM_STAMP := _vendor/.system-packages
# Debian packages the tests use: a real browser, a PostgreSQL server for the
# gradebook test, bubblewrap for the grading sandbox.
SYSTEM_PACKAGES := chromium postgresql bubblewrap
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Tools started by the project (nbgrader's alembic, jupyter, course) come from .venv.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help setup book test test-fast lint bench release notebooks lab clean

help:
	@sed -n '2,9p' Makefile

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; this course needs Python 3.11 (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[lab,book,grading,hub,test]'
	@# Optional package that costs ~6 s at every jupyter/nbgrader start-up.
	$(BIN)/python -m pip uninstall --quiet -y rfc3987-syntax || true
	touch $(STAMP)

$(MATHJAX):
	@command -v npm >/dev/null || { echo "error: npm is needed once to fetch MathJax for offline reading"; exit 1; }
	rm -rf _vendor/npm && mkdir -p _vendor/npm _vendor/static/mathjax
	npm install --silent --no-audit --no-fund --prefix _vendor/npm mathjax@3
	cp -r _vendor/npm/node_modules/mathjax/es5 _vendor/static/mathjax/
	rm -rf _vendor/npm

$(AXE):
	@command -v npm >/dev/null || { echo "error: npm is needed once to fetch axe-core for the accessibility test"; exit 1; }
	rm -rf _vendor/npm-axe && mkdir -p _vendor/npm-axe _vendor/axe
	npm install --silent --no-audit --no-fund --prefix _vendor/npm-axe axe-core@4
	cp _vendor/npm-axe/node_modules/axe-core/axe.min.js _vendor/axe/
	rm -rf _vendor/npm-axe

# configurable-http-proxy, the proxy of the JupyterHub that tests/test_hub.py starts.
CHP := _vendor/npm-chp/node_modules/.bin/configurable-http-proxy
$(CHP):
	@command -v npm >/dev/null || { echo "error: npm is needed once to fetch configurable-http-proxy for the hub test"; exit 1; }
	rm -rf _vendor/npm-chp && mkdir -p _vendor/npm-chp
	npm install --silent --no-audit --no-fund --prefix _vendor/npm-chp configurable-http-proxy@5

$(SYSTEM_STAMP):
	@mkdir -p _vendor
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
	touch $(SYSTEM_STAMP)

setup: $(STAMP) $(MATHJAX)

# An instructor's machine for grading: the course venv, bubblewrap (Debian, Ubuntu;
# elsewhere course doctor names the package), then `course doctor`, which checks
# user namespaces, Ubuntu's AppArmor restriction, a test sandbox and the packages,
# prints the one-line fix of whatever is missing and fails when grading cannot run.
.PHONY: grading-setup
grading-setup: setup
	@if command -v dpkg >/dev/null && ! dpkg -s bubblewrap >/dev/null 2>&1; then \
	  echo "installing the Debian package bubblewrap (the grading sandbox)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq bubblewrap >/dev/null; \
	fi
	$(BIN)/course doctor

book: setup
	$(BIN)/python -m course_lib.grading.editions.launch
	$(BIN)/jupyter-book build . --builder html
	@echo ""
	@echo "The book is built. Open file://$(CURDIR)/_build/html/index.html"
	@echo "or serve it: $(BIN)/python -m http.server -d _build/html 8000"

# The tests run side by side (pytest-xdist), one worker more than the machine has
# CPUs: many tests mostly wait (on kernels, subprocesses, time limits), and on 2
# cores a third worker cut a fresh-clone run from 716 s to 648 s (a fourth did not
# help: 505 s against 477 s with three, later). Each test file runs in one worker
# (its module fixtures are set up once), the files with slow tests first; the
# built book is shared, and the files that share a costly fixture (the pages the
# browser tests load, the class graded in every assignment, the student's venv) run
# in one worker (tests/conftest.py, scheduled_together). The processes the tests
# start use one thread each. PYTEST_JOBS=0 runs them all in this process.
PYTEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_PARALLEL = -n $(PYTEST_JOBS) --dist loadfile

test: setup $(SYSTEM_STAMP) $(AXE) $(CHP)
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)

test-fast: setup
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not slow"

lint: setup
	$(BIN)/ruff check course_lib tests benchmarks

bench: setup
	$(BIN)/python -m benchmarks

# Student releases (notebooks/) from solutions/, each with the set-up cell; then the
# chapter notebooks that the book's launch buttons open (book/notebooks/).
release: setup
	$(BIN)/course release all
	$(BIN)/python -m course_lib.grading.editions.launch

notebooks: setup
	$(BIN)/python -m course_lib.grading.editions.launch

lab: setup
	$(BIN)/course lab

clean:
	rm -rf _build .pytest_cache .ruff_cache
