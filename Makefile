# hotagg: `make test` and `make run` are the two commands a new user needs (as root).
# Each installs what it needs on first use (scripts/bootstrap.sh).

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hotagg-installed
P4NAME := hotagg
P4MAIN := p4src/$(P4NAME).p4
P4INFO := p4src/$(P4NAME).p4info.txtpb

# Experiment knobs (make run VAR=value); defaults are sized for a 2-core laptop.
TARGET ?= embedded
TOPO ?= topologies/star.json
WORKERS ?= 4
ITERATIONS ?= 50
SKEW ?= 1.1
KEYS ?= 100000
HOT_SLOTS ?= 256
LOSS ?= 0
SEED ?= 1
WORKLOAD ?= zipf
# The offload phase's hot set: static (the warm-up's) or dynamic (the online loop's), and the
# measured phases' drift, e.g. DRIFT=every=5,fraction=0.3 (empty: none).
HOTSET ?= static
HOTSET_SOURCE ?= ps
DRIFT ?=
# Link rate: `auto` calibrates after the warm-up, so that the PS's link sets the pace (the regime
# hotagg emulates) on whatever machine this is; a number sets every link's Mbit/s; `BW=` (empty)
# keeps the topology's own rates.
BW ?= auto
PS ?=
TRACE ?=
KEEP ?=
# Runs can share a machine: each picks free P4Runtime ports and an interface prefix of its
# own unless given (GRPC_PORT=50051: the first switch's port, the others count up).
GRPC_PORT ?=
PREFIX ?=
# Restart a switch that dies during a phase and run the phase again, up to this many times.
SWITCH_RESTARTS ?=
# make stop RUN=<id>: that run only (its id is runs/<id>; default: this checkout's runs).
RUN ?=
# BMv2's switch binary for TARGET=bmv2, e.g. simple_switch_grpc-perf (BMv2's performance build).
BMV2_BINARY ?= simple_switch_grpc
export BMV2_BINARY

.PHONY: all run sweep test build bench stop clean lint format check-p4info help

all: help

help:
	@echo "make test    install on first use, lint, run the test suite (root runs the network tests)"
	@echo "make run     the Mininet experiment: offloaded vs server-only (as root)"
	@echo "make sweep   a grid of runs (WORKERS=4,8,16 SKEW=1.1,1.3 SEEDS=1,2 ...), plots, report"
	@echo "make build   compile p4src/ with p4c-bm2-ss into build/ (if p4c is installed)"
	@echo "make bench   switch benchmarks, JSON into bench/results/"
	@echo "make stop    stop this checkout's runs (RUN=id: that run) and clean up after them"
	@echo "make clean   remove build/, runs/ and caches"

$(STAMP): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -ra $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

build:
	@if ! command -v p4c-bm2-ss >/dev/null 2>&1; then \
	    echo "make build: p4c-bm2-ss is not installed (not packaged for Debian or PyPI)."; \
	    echo "  The committed $(P4INFO) is what the embedded target serves;"; \
	    echo "  install p4c (github.com/p4lang/p4c) to compile $(P4MAIN) for BMv2."; \
	    exit 0; \
	fi; \
	mkdir -p build && \
	p4c-bm2-ss --p4v 16 --p4runtime-files build/$(P4NAME).p4info.txtpb \
	    -o build/$(P4NAME).json $(P4MAIN) && \
	echo "built build/$(P4NAME).json and build/$(P4NAME).p4info.txtpb"

check-p4info: build
	@if [ -f build/$(P4NAME).p4info.txtpb ]; then \
	    diff -u $(P4INFO) build/$(P4NAME).p4info.txtpb && echo "P4Info matches p4c's output"; \
	fi

# GNU make exits 2 whenever a recipe fails, whatever the code: the last line names the
# experiment's own exit code (README, "Exit codes"); `python -m experiment run` returns it.
run: $(STAMP)
	@$(PY) -m experiment run --target '$(TARGET)' --topo '$(TOPO)' --workers '$(WORKERS)' \
	    --iterations '$(ITERATIONS)' --skew '$(SKEW)' --keys '$(KEYS)' \
	    --hot-slots '$(HOT_SLOTS)' --loss '$(LOSS)' --seed '$(SEED)' --workload '$(WORKLOAD)' \
	    --hotset '$(HOTSET)' --hotset-source '$(HOTSET_SOURCE)' $(if $(DRIFT),--drift '$(DRIFT)') \
	    $(if $(BW),--bw '$(BW)') $(if $(PS),--ps '$(PS)') \
	    $(if $(TRACE),--workload trace --trace '$(TRACE)') \
	    $(if $(GRPC_PORT),--grpc-base-port '$(GRPC_PORT)') $(if $(PREFIX),--intf-prefix '$(PREFIX)') \
	    $(if $(SWITCH_RESTARTS),--switch-restarts '$(SWITCH_RESTARTS)') \
	    $(if $(filter-out 0 no false,$(KEEP)),--keep); \
	rc=$$?; [ $$rc -eq 0 ] || echo "make run: the experiment exited with code $$rc" >&2; exit $$rc

# The grid's lists, e.g. make sweep WORKERS=4,8 SKEW=1.1 SEEDS=1,2,3: only variables given on
# the command line are passed (the sweep's own defaults otherwise, not make run's).
given = $(filter command line,$(origin $(1)))
sweep: $(STAMP)
	$(PY) -m experiment sweep --target $(TARGET) \
	    $(if $(call given,WORKERS),--workers $(WORKERS)) $(if $(call given,SKEW),--skew $(SKEW)) \
	    $(if $(call given,HOT_SLOTS),--hot-slots $(HOT_SLOTS)) \
	    $(if $(call given,LOSS),--loss $(LOSS)) $(if $(call given,BW),--bw $(BW)) \
	    $(if $(call given,SEEDS),--seeds $(SEEDS)) $(if $(call given,SHARDS),--shards $(SHARDS)) \
	    $(if $(call given,ITERATIONS),--iterations $(ITERATIONS))

bench: $(STAMP)
	$(PY) -m bench

# Stops the runs of this checkout (or RUN=id): their experiment process, switch processes,
# host processes, Mininet nodes and links, as their state files record them.
stop: $(STAMP)
	$(PY) -m experiment stop $(if $(RUN),--run '$(RUN)')

clean:
	rm -rf build runs sweeps .pytest_cache .ruff_cache bench/results
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
