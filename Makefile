# Common commands. Every target works on a fresh machine with Python 3.11 (it makes .venv itself).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
LAB ?= $(STACK)
OUT ?= results

.PHONY: venv test plan g6-sim clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

venv: $(VENV)/.installed ## create .venv with every pinned dependency

test: venv ## run the whole test suite (no cloud, no network)
	$(BIN)/python -m pytest

plan: venv ## offline plan of a stack: make plan STACK=g6
	$(BIN)/python -m stacks.plan $(STACK)

g6-sim: venv ## the g6 sweep against the simulated L4; report in $(OUT)/
	$(BIN)/python -m benchmarks g6 --sim --model Qwen/Qwen2.5-1.5B-Instruct --max-num-seqs 8,32 --concurrency 1,8,32 --requests 64 --out $(OUT)

clean:
	rm -rf $(VENV) .pytest_cache
