# The README's commands. `make run` and `make test` each do all the set-up they need on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PORT   ?= 8501
REPLICAS ?= 2
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run serve test test-full check bench cache chromium nginx node clean

# wviz itself, editable: its dependencies are requirements.txt (pyproject.toml reads them from there). pip
# byte-compiles every module it installs (half of the install's time, and worth it: where PYTHONDONTWRITEBYTECODE is
# set, as on this machine, nothing compiled later is kept, and every process would compile what it imports again:
# BENCHMARKS.md, "The test command").
$(VENV)/.runtime: requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

# Debian's chromium drives the browser tests (Playwright) and figure export (kaleido).
chromium:
	@test -x /usr/bin/chromium || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

# Debian's nginx puts the replicas of `make serve` behind one address (deploy/serve.py runs it as this user).
nginx:
	@test -x /usr/sbin/nginx || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nginx; }

# Node.js runs the browser kernels (wviz/ui/js) on vectors made by wviz (tests/test_js_kernels.py).
node:
	@command -v node >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nodejs; }

run: $(VENV)/.runtime
	$(PY) -m streamlit run app.py --server.port $(PORT) --server.headless true

# A class: REPLICAS Streamlit processes on ports PORT+1.. behind nginx on PORT (README, "Serving a class").
serve: $(VENV)/.runtime nginx
	$(PY) deploy/serve.py --replicas $(REPLICAS) --port $(PORT)

# pytest-xdist: one worker per core and one more (at most 8), a test file's tests on one worker (its module fixtures
# built once). The extra worker runs while the browser tests wait for their pages: on 2 cores 3 workers took 17:00
# where 2 took 19:03, and a fourth did not help (BENCHMARKS.md "The test command", fourth and fifth passes).
WORKERS := $(shell n=$$(nproc); echo $$(( n < 8 ? n + 1 : 8 )))
XDIST := -n $(WORKERS) --dist loadfile

test: $(VENV)/.dev chromium nginx node
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(XDIST) -m "not full"

# make test and the repeated re-measurements it checks once (pytest.ini, marker full)
test-full: $(VENV)/.dev chromium nginx node
	$(PY) -m pytest $(XDIST)

# The edit-test loop: the library's and the views' tests and the docstring examples, no page, no browser and no
# slow re-measurement (tests/app drives pages with AppTest, tests/e2e chromium, tests marked slow re-measure the
# bundled models, train several seeds or start training processes: `make test` runs them).
check: $(VENV)/.dev node
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(XDIST) --ignore=tests/app --ignore=tests/e2e -m "not slow and not full"

bench: $(VENV)/.dev chromium nginx
	$(PY) -m bench

# The results a first visit at the defaults would compute, shipped in assets/cache (wviz.precompute): run after
# changing a bundled checkpoint, a test split, the corpus or one of their computations (tests/test_precompute.py).
cache: $(VENV)/.runtime
	$(PY) -m wviz.precompute

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .serve
