# The two commands of the README: `make demo` and `make test`. Each sets up everything it needs
# on a fresh Debian machine: Graphviz's `dot` (apt), a virtual environment, the package.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.demo-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test setup system studio parser gallery bench bench-gpu bench-gpu-sweep fuzz fuzz-nightly bad-values-nightly lint docs clean

# The demo needs the package alone (networkx, rich: about 60 MB of virtual environment);
# `make setup` adds JAX, training, benchmarks and the test tools (about 1.1 GB).
demo: system $(DEMO_STAMP)
	$(VENV)/bin/lbdl build specs/resnet50.lbdl -o build/resnet50

$(DEMO_STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e .
	touch $(DEMO_STAMP)

test: lint
	$(PY) -m pytest

setup: system $(STAMP)

system:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "installing graphviz (Debian package) for diagrams"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq graphviz >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (Debian package) for the studio's browser tests"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium >/dev/null; }

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[jax,train,data,bench,dev,onnx,serve,text]'
	touch $(STAMP)

# The studio's page (lbdl serve): CodeMirror 6 from npm, bundled by esbuild into the package.
# The bundle is committed, so that installing lbdl needs no node; rerun after changing web/.
studio:
	cd web && npm ci --no-audit --no-fund && npm run build

# The parser, after a change of grammar/lbdl.lark: lark's standalone generator writes
# lbdl_dsl/compiler/_lbdl_parser.py (tests/compiler/test_parser_module.py fails until it is run).
parser: setup
	$(PY) -m lbdl_dsl.tools.parser_module

gallery: setup
	$(PY) -m lbdl_dsl.tools.gallery

# The generated references, then what every example of README.md and docs/ prints, written back
# where it differs (tests/docs; the long examples too).
docs: setup
	$(PY) -m lbdl_dsl.tools.layer_docs > docs/layers.md
	$(PY) -m lbdl_dsl.tools.error_docs > docs/errors.md
	LBDL_DOCS_UPDATE=1 $(PY) -m pytest tests/docs -n 0 -m "full or not full"

bench: setup
	$(PY) bench/run.py
	$(PY) bench/memory.py
	$(PY) bench/kernels.py
	$(PY) bench/step_profile.py
	$(PY) bench/compile_profile.py
	$(PY) bench/allocator.py --out docs/performance-allocator.json
	$(PY) bench/diagrams.py

# On a machine with a GPU (docs/performance-gpu.md): bf16, larger batches, MFU.
bench-gpu: setup
	$(PY) bench/accelerator.py
	$(PY) bench/accelerator_variants.py --out docs/performance-gpu-variants.json

# Which settings move GPT-2 medium's MFU (issue 19's 50 % target), each in a fresh process.
bench-gpu-sweep: setup
	$(PY) bench/accelerator_sweep.py --out docs/performance-gpu-sweep.json

fuzz: setup
	$(PY) bench/fuzz.py --cases 100000

# The nightly form (docs/reliability.md): 20,000 cases of a seed that changes every day, in two
# shards, the failing ones saved for reproduction. CI runs 3,000 of the same cases on each commit.
fuzz-nightly: setup
	$(PY) bench/fuzz.py --cases 20000 --jobs 2 --seed $$(date -u +%Y%m%d) --save build/fuzz-cases

# Every verb's path and number flags with bad values (docs/reliability.md): every argument with
# every value of its kind, and 1,500 drawn cases. CI runs 100 of them on each commit.
bad-values-nightly: setup
	$(PY) -m pytest -n 2 -m full tests/test_bad_values.py

# Before the tests (CI runs `make test`), failing on any finding: ruff's rules and format on the
# code, then mypy, strict on the whole of lbdl_dsl (pyproject.toml, [tool.mypy]).
lint: setup
	$(VENV)/bin/ruff check lbdl_dsl tests bench
	$(VENV)/bin/ruff format --check lbdl_dsl tests bench
	$(VENV)/bin/mypy

clean:
	rm -rf build
