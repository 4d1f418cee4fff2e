# hotagg: `make run` and `make test` are the two commands a new user needs (as root).
# Each installs what it needs on first use (scripts/bootstrap.sh). `make help` lists the
# targets and the variables.

SHELL := /bin/bash
# The virtualenv every target uses (made by scripts/bootstrap.sh on first use).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hotagg-installed
P4NAME := hotagg
P4MAIN := p4src/$(P4NAME).p4
P4INFO := p4src/$(P4NAME).p4info.txtpb

# Experiment knobs (make run VAR=value); defaults are sized for a 2-core laptop.
TARGET ?= embedded
TOPO ?= topologies/star.json
# Empty: every worker host of TOPO (4 in star.json, N in star:N); N: the first N of them.
WORKERS ?=
ITERATIONS ?= 50
SKEW ?= 1.1
KEYS ?= 100000
HOT_SLOTS ?= 256
LOSS ?= 0
SEED ?= 1
WORKLOAD ?= zipf
# The workload's own options, as its workers take them, e.g. WORKLOAD_ARGS='--batch 32' (lr).
WORKLOAD_ARGS ?=
# The offload phase's hot set: static (the warm-up's) or dynamic (the online loop's), and the
# measured phases' drift, e.g. DRIFT=every=5,fraction=0.3 (empty: none).
HOTSET ?= static
HOTSET_SOURCE ?= ps
DRIFT ?=
# Where hot keys are aggregated: the PS's switch (ps-leaf), or every leaf of a leaf-spine with
# the partial sums flushed up to the PS's leaf (leaves; docs/design.md section 7).
AGGREGATE ?= ps-leaf
# Training jobs sharing the switch, each with its own workers and PS; WORKERS, SKEW, KEYS, SEED
# and WORKLOAD then take one value or one per job (SKEW=1.1,1.3). SPLIT: how they share
# HOT_SLOTS, savings (the most PS-link bytes saved, measured beside equal halves) or equal.
JOBS ?= 1
SPLIT ?= savings
# Each worker's compute per iteration in the measured phases, slept between its pull and its
# push: 20ms, normal:20ms,5ms, lognormal:20ms,0.5, or real:2us with REAL_BW (empty: none);
# STRAGGLERS=1:3 (worker 0 three times slower) and/or p=0.1:3 (a slow iteration with
# probability 0.1); REAL_BW=10G: the real link rate the links stand for (the time scale).
COMPUTE ?=
# How far workers may drift apart: bsp (a barrier every iteration), ssp:S (up to S iterations
# ahead of the slowest) or async (no barrier); docs/design.md section 8.
SYNC ?= bsp
STRAGGLERS ?=
REAL_BW ?=
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
# make stop RUN=<id>: that run only (its id is runs/<id>; default: this checkout's runs);
# make conservation RUN=<id>: that run's phases (default: runs/latest).
RUN ?=
# BMv2's switch binary for TARGET=bmv2, e.g. simple_switch_grpc-perf (BMv2's performance build).
BMV2_BINARY ?= simple_switch_grpc
export BMV2_BINARY
# make sweep's lists (SEEDS=1,2,3; SHARDS=1,2: PS shards per point; LEAVES=2,4 with
# HOSTS_PER_LEAF=2,4: each point on leafspine:L:H instead of a star; COMPUTE, STRAGGLERS
# and SYNC too, COMPUTE='0;20ms' and STRAGGLERS='none;1:3' by `;`); make test's pytest
# arguments (PYTEST_ARGS='-k cli -x').
SEEDS ?=
SHARDS ?=
LEAVES ?=
HOSTS_PER_LEAF ?=
PYTEST_ARGS ?=
# The machines make run spreads the topology over, and make cluster-check checks:
# SERVERS=host1,root@host2; PLACE=h3@host2,s2@host2 moves single nodes (docs/cluster.md).
SERVERS ?=
PLACE ?=
# make test's pytest processes (pytest-xdist), each given whole test files so that a module's
# switches start once; 1: the suite in one process (for --pdb). The end-to-end tests wait on
# their emulated links much of the time, so two share a 2-core machine well.
TEST_WORKERS ?= 2

.PHONY: all run sweep test test-fast build bench stop conservation clean clean-results lint format check-p4info cluster-check local-server local-server-stop help

all: help

help:
	@echo "Targets (as root: run, sweep, stop, and test for its network tests):"
	@echo "  make run            the Mininet experiment: offloaded vs server-only; runs/<id>/"
	@echo "  make sweep          a grid of runs (WORKERS=4,8,16 SKEW=1.1,1.3 SEEDS=1,2 ...); sweeps/<id>/"
	@echo "  make stop           stop this checkout's runs (RUN=<id>: that run) and clean up after them"
	@echo "  make conservation   check that each phase of runs/latest (RUN=<id>: that run) applied every pushed update once"
	@echo "  make test           install on first use, lint, run the test suite (PYTEST_ARGS=...)"
	@echo "  make test-fast      the same without the BMv2 variants and the slow tests (PYTEST_ARGS=...)"
	@echo "  make lint           ruff check, ruff format --check, mypy"
	@echo "  make format         ruff format and ruff check --fix"
	@echo "  make build          compile p4src/ with p4c-bm2-ss into build/ (if p4c is installed)"
	@echo "  make check-p4info   build, then diff the committed P4Info against p4c's"
	@echo "  make bench          switch benchmarks, JSON into bench/results/"
	@echo "  make clean          remove build/, bench/results/ and caches (keeps runs/ and sweeps/)"
	@echo "  make clean-results  say what it deletes, then delete runs/ and sweeps/"
	@echo "  make cluster-check  check the servers of SERVERS=host1,host2 (ssh, sudo, checkout, links; docs/cluster.md)"
	@echo "  make local-server   a second server on this machine (sshd in a netns), to try SERVERS= without one"
	@echo "  make local-server-stop  remove it"
	@echo "  make help           this list"
	@echo "make run variables (their values now; VAR=value to set one):"
	@echo "  TARGET=$(TARGET) (or bmv2)  BMV2_BINARY=$(BMV2_BINARY)  TOPO=$(TOPO)"
	@echo "    (TOPO: a topology.json, star:N, star:N:S with S PS shards, leafspine:L:H)"
	@echo "  WORKERS=$(WORKERS) (empty: every worker host of TOPO)  PS=$(PS) (PS host(s) of a file)"
	@echo "  ITERATIONS=$(ITERATIONS)  SKEW=$(SKEW)  KEYS=$(KEYS)  HOT_SLOTS=$(HOT_SLOTS)  LOSS=$(LOSS)  SEED=$(SEED)"
	@echo "  WORKLOAD=$(WORKLOAD) (zipf, lr, trace)  TRACE=$(TRACE) (a trace CSV, for WORKLOAD=trace)"
	@echo "  WORKLOAD_ARGS=$(WORKLOAD_ARGS) (the workload's own options, e.g. '--batch 32' for lr)"
	@echo "  BW=$(BW) (Mbit/s; auto: calibrated; empty: the topology's own)"
	@echo "  HOTSET=$(HOTSET) (or dynamic)  HOTSET_SOURCE=$(HOTSET_SOURCE) (or switch)"
	@echo "  AGGREGATE=$(AGGREGATE) (or leaves: every leaf of a leaf-spine aggregates)"
	@echo "  JOBS=$(JOBS) (jobs sharing the switch; then SKEW=1.1,1.3: a value per job)  SPLIT=$(SPLIT) (or equal)"
	@echo "  DRIFT=$(DRIFT) (every=K,fraction=F[,head=H]; empty: none)"
	@echo "  COMPUTE=$(COMPUTE) (20ms, normal:20ms,5ms, lognormal:20ms,0.5, real:2us; empty: none)"
	@echo "    STRAGGLERS=$(STRAGGLERS) (1:3, p=0.1:3)  REAL_BW=$(REAL_BW) (10G: the real rate the links stand for)"
	@echo "  SYNC=$(SYNC) (bsp, ssp:S: up to S iterations ahead of the slowest, async: no barrier)"
	@echo "  GRPC_PORT=$(GRPC_PORT) (empty: free ports)  PREFIX=$(PREFIX) (empty: an unused interface prefix)"
	@echo "  SWITCH_RESTARTS=$(SWITCH_RESTARTS) (restarts of a dead switch)  KEEP=$(KEEP) (1: keep the network up)"
	@echo "  SERVERS=$(SERVERS) (spread the run over [user@]host,...; this machine is the coordinator)"
	@echo "    PLACE=$(PLACE) (node@server,...: move single nodes; default one rack per server; docs/cluster.md)"
	@echo "make sweep: the grid's lists WORKERS=4,8,16 SKEW=1.1,1.3 HOT_SLOTS=256 LOSS=0 BW=2 SEEDS=1,2"
	@echo "  SHARDS=1 (its defaults); LEAVES=2,4 HOSTS_PER_LEAF=2,4: leafspine:L:H points (every worker"
	@echo "  host, no WORKERS), AGGREGATE=ps-leaf,leaves (leaves: with LEAVES only), JOBS=1,2 (J jobs"
	@echo "  of WORKERS each, a row per job), SYNC=bsp (e.g. bsp,ssp:2,async), and ;-separated since"
	@echo "  their values hold commas: COMPUTE=none (e.g. '0;20ms;normal:60ms,10ms'), STRAGGLERS=none"
	@echo "  (e.g. 'none;1:3'; a point without compute runs without); for every run"
	@echo "  ITERATIONS=30, TARGET, KEYS, WORKLOAD, TRACE, WORKLOAD_ARGS, HOTSET, HOTSET_SOURCE, DRIFT, SPLIT,"
	@echo "  REAL_BW, SWITCH_RESTARTS, GRPC_PORT, PREFIX, BMV2_BINARY; it refuses SEED (use SEEDS), TOPO, PS,"
	@echo "  KEEP, SERVERS and PLACE (make run's)"
	@echo "Other variables: RUN=<id> (make stop, make conservation)  PYTEST_ARGS=$(PYTEST_ARGS) (make test)  VENV=$(VENV)"
	@echo "  TEST_WORKERS=$(TEST_WORKERS) (make test's pytest processes; 1: one)"

$(STAMP): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh

# ruff for style and mistakes, mypy for the types of the library packages (pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: lint
	$(PY) -m pytest -ra $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# The fast lane: units, P4Runtime and the packet tests on the embedded target. The markers
# are pyproject.toml's; tests/conftest.py says which tests are slow.
test-fast: lint
	$(PY) -m pytest -ra -m 'not slow and not bmv2' $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# p4c writes into a folder of its own and both files then move into build/: a run or a test
# that reads build/ meanwhile (tests run in parallel) never sees half a file.
build:
	@if ! command -v p4c-bm2-ss >/dev/null 2>&1; then \
	    echo "make build: p4c-bm2-ss is not installed (not packaged for Debian or PyPI)."; \
	    echo "  The committed $(P4INFO) is what the embedded target serves;"; \
	    echo "  install p4c (github.com/p4lang/p4c) to compile $(P4MAIN) for BMv2."; \
	    exit 0; \
	fi; \
	mkdir -p build && \
	out=$$(mktemp -d build/.p4c.XXXXXX) && trap 'rm -rf "$$out"' EXIT && \
	p4c-bm2-ss --p4v 16 --p4runtime-files $$out/$(P4NAME).p4info.txtpb \
	    -o $$out/$(P4NAME).json $(P4MAIN) && \
	mv -f $$out/$(P4NAME).p4info.txtpb $$out/$(P4NAME).json build/ && \
	echo "built build/$(P4NAME).json and build/$(P4NAME).p4info.txtpb"

check-p4info: build
	@if [ -f build/$(P4NAME).p4info.txtpb ]; then \
	    diff -u $(P4INFO) build/$(P4NAME).p4info.txtpb && echo "P4Info matches p4c's output"; \
	fi

# GNU make exits 2 whenever a recipe fails, whatever the code: the last line names the
# experiment's own exit code (README, "Exit codes"); `python -m experiment run` returns it.
run: $(STAMP)
	@$(PY) -m experiment run --target '$(TARGET)' --topo '$(TOPO)' $(if $(WORKERS),--workers '$(WORKERS)') \
	    --iterations '$(ITERATIONS)' --skew '$(SKEW)' --keys '$(KEYS)' \
	    --hot-slots '$(HOT_SLOTS)' --loss '$(LOSS)' --seed '$(SEED)' --workload '$(WORKLOAD)' \
	    --hotset '$(HOTSET)' --hotset-source '$(HOTSET_SOURCE)' $(if $(DRIFT),--drift '$(DRIFT)') \
	    --aggregate '$(AGGREGATE)' $(if $(BW),--bw '$(BW)') $(if $(PS),--ps '$(PS)') \
	    --jobs '$(JOBS)' --split '$(SPLIT)' --sync '$(SYNC)' \
	    $(if $(COMPUTE),--compute '$(COMPUTE)') $(if $(STRAGGLERS),--stragglers '$(STRAGGLERS)') \
	    $(if $(REAL_BW),--real-bw '$(REAL_BW)') \
	    $(if $(TRACE),--workload trace --trace '$(TRACE)') \
	    $(if $(WORKLOAD_ARGS),--workload-args='$(WORKLOAD_ARGS)') \
	    $(if $(GRPC_PORT),--grpc-base-port '$(GRPC_PORT)') $(if $(PREFIX),--intf-prefix '$(PREFIX)') \
	    $(if $(SWITCH_RESTARTS),--switch-restarts '$(SWITCH_RESTARTS)') \
	    $(if $(SERVERS),--servers '$(SERVERS)') $(if $(PLACE),--place '$(PLACE)') \
	    $(if $(filter-out 0 no false,$(KEEP)),--keep); \
	rc=$$?; [ $$rc -eq 0 ] || echo "make run: the experiment exited with code $$rc" >&2; exit $$rc

# The grid's lists, e.g. make sweep WORKERS=4,8 SKEW=1.1 SEEDS=1,2,3 SYNC=bsp,async
# COMPUTE='0;20ms' (COMPUTE's and STRAGGLERS' values hold commas, so `;` separates them,
# quoted for the shell), and make run's variables
# that every run of the grid takes as they are: only variables given on the command line are
# passed (the sweep's own defaults otherwise, not make run's). BMV2_BINARY reaches the runs
# through the environment. A make run variable the sweep cannot honour is refused, before
# anything is installed or run, rather than ignored.
given = $(filter command line,$(origin $(1)))
refused.SEED = use SEEDS=1,2,... (a list: one run per seed)
refused.TOPO = each point runs on a generated star:N (star:N:S with SHARDS, leafspine:L:H with LEAVES and HOSTS_PER_LEAF); use make run for a topology file
refused.PS = the generated stars have their PS; use make run TOPO=<file> PS=<host>
refused.KEEP = the points run one after another; use make run KEEP=1 to keep one network up
refused.SERVERS = a sweep runs on this machine; use make run SERVERS=... for a run over several
refused.PLACE = $(refused.SERVERS)
# (KEEP=0, as make run reads it, asks for what a sweep does anyway)
SWEEP_REFUSED = $(strip $(foreach var,SEED TOPO PS SERVERS PLACE,$(if $(call given,$(var)),$(var))) \
    $(if $(call given,KEEP),$(if $(filter-out 0 no false,$(KEEP)),KEEP)))
ifneq ($(filter sweep,$(MAKECMDGOALS)),)
ifneq ($(SWEEP_REFUSED),)
refused := $(firstword $(SWEEP_REFUSED))
also := $(if $(word 2,$(SWEEP_REFUSED)), (also refused: $(wordlist 2,9,$(SWEEP_REFUSED))))
$(error make sweep: $(refused)=$($(refused)) is make run's: $(refused.$(refused))$(also))
endif
endif
# ... and make run refuses the sweep's lists the same way.
refused.SEEDS = make run takes one SEED=N; use make sweep SEEDS=1,2,... for several
refused.SHARDS = make run takes TOPO=star:N:S for S PS shards; use make sweep SHARDS=1,2 for several
refused.LEAVES = use make run TOPO=leafspine:L:H (make sweep LEAVES=2,4 HOSTS_PER_LEAF=2,4 for several)
refused.HOSTS_PER_LEAF = $(refused.LEAVES)
RUN_REFUSED = $(strip $(foreach var,SEEDS SHARDS LEAVES HOSTS_PER_LEAF,$(if $(call given,$(var)),$(var))))
ifneq ($(filter run,$(MAKECMDGOALS)),)
ifneq ($(RUN_REFUSED),)
refused := $(firstword $(RUN_REFUSED))
$(error make run: $(refused)=$($(refused)) is make sweep's: $(refused.$(refused)))
endif
endif
sweep: $(STAMP)
	@$(PY) -m experiment sweep --target '$(TARGET)' \
	    $(if $(call given,WORKERS),--workers '$(WORKERS)') $(if $(call given,SKEW),--skew '$(SKEW)') \
	    $(if $(call given,HOT_SLOTS),--hot-slots '$(HOT_SLOTS)') \
	    $(if $(call given,LOSS),--loss '$(LOSS)') $(if $(call given,BW),--bw '$(BW)') \
	    $(if $(call given,SEEDS),--seeds '$(SEEDS)') $(if $(call given,SHARDS),--shards '$(SHARDS)') \
	    $(if $(call given,LEAVES),--leaves '$(LEAVES)') \
	    $(if $(call given,HOSTS_PER_LEAF),--hosts-per-leaf '$(HOSTS_PER_LEAF)') \
	    $(if $(call given,AGGREGATE),--aggregate '$(AGGREGATE)') \
	    $(if $(call given,JOBS),--jobs '$(JOBS)') $(if $(call given,SPLIT),--split '$(SPLIT)') \
	    $(if $(call given,ITERATIONS),--iterations '$(ITERATIONS)') \
	    $(if $(call given,KEYS),--keys '$(KEYS)') $(if $(call given,WORKLOAD),--workload '$(WORKLOAD)') \
	    $(if $(call given,TRACE),--workload trace --trace '$(TRACE)') \
	    $(if $(call given,WORKLOAD_ARGS),--workload-args='$(WORKLOAD_ARGS)') \
	    $(if $(call given,HOTSET),--hotset '$(HOTSET)') \
	    $(if $(call given,HOTSET_SOURCE),--hotset-source '$(HOTSET_SOURCE)') \
	    $(if $(call given,DRIFT),--drift '$(DRIFT)') \
	    $(if $(call given,COMPUTE),--compute '$(COMPUTE)') $(if $(call given,SYNC),--sync '$(SYNC)') \
	    $(if $(call given,STRAGGLERS),--stragglers '$(STRAGGLERS)') \
	    $(if $(call given,REAL_BW),--real-bw '$(REAL_BW)') \
	    $(if $(call given,SWITCH_RESTARTS),--switch-restarts '$(SWITCH_RESTARTS)') \
	    $(if $(call given,GRPC_PORT),--grpc-base-port '$(GRPC_PORT)') \
	    $(if $(call given,PREFIX),--intf-prefix '$(PREFIX)'); \
	rc=$$?; [ $$rc -eq 0 ] || echo "make sweep: the sweep exited with code $$rc" >&2; exit $$rc

bench: $(STAMP)
	$(PY) -m bench

# Stops the runs of this checkout (or RUN=id): their experiment process, switch processes,
# host processes, Mininet nodes and links, as their state files record them.
stop: $(STAMP)
	$(PY) -m experiment stop $(if $(RUN),--run '$(RUN)')

# A second "server" on this machine: an sshd in a network namespace (topologies/netns_server.py).
# It shares this machine's cores: it shows the remote code paths, not a bigger cluster.
local-server: $(STAMP)
	$(PY) -m topologies.netns_server start

local-server-stop: $(STAMP)
	$(PY) -m topologies.netns_server stop

# Each server of SERVERS, one line per check (ssh by key, sudo, mnexec, the same checkout and
# venv, SSH tunnels or vxlan, BMv2 for TARGET=bmv2); exits 1 if one is missing.
cluster-check: $(STAMP)
	@if [ -z '$(SERVERS)' ]; then echo "make cluster-check: give SERVERS=host1,host2 ([user@]host, comma-separated)" >&2; exit 2; fi
	@$(PY) -m topologies.cluster check --target '$(TARGET)' '$(SERVERS)'

# Each phase's final parameters recomputed from its workers' raw pushes (experiment/conservation.py).
conservation: $(STAMP)
	$(PY) -m experiment.conservation 'runs/$(or $(RUN),latest)'

# Results (runs/, sweeps/) stay: make clean-results removes them, after saying what it removes.
clean:
	rm -rf build .pytest_cache .ruff_cache bench/results
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

clean-results:
	@for dir in runs sweeps; do \
	    if [ -e "$$dir" ]; then \
	        echo "make clean-results: deleting $$dir/ ($$(du -sh "$$dir" | cut -f1); entries:" \
	            "$$(find "$$dir" -mindepth 1 -maxdepth 1 ! -name latest | wc -l))"; \
	    else echo "make clean-results: no $$dir/"; fi; \
	done
	@rm -rf runs sweeps
