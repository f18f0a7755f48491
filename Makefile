# Common commands. Every target works on a fresh machine with Python 3.11 (it makes .venv itself).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
LAB ?= $(STACK)
OUT ?= results

.PHONY: venv test test-agreement g6-agreement plan docs g6-sim g6-kv-sim g6-quant-sim g6-prefix-sim g6-saturation-sim preflight status up down cost clean

# A target's required variables, checked before anything runs (no venv, no python): one line naming
# those missing and an example.
missing = $(strip $(foreach v,$(1),$(if $($(v)),,$(v))))
COST_EXAMPLE := make cost LAB=g6 SINCE=2026-11-01 BILLING_TABLE=my-lab-project.billing.gcp_billing_export_v1_012345_6789AB_CDEF01
ifneq ($(filter cost,$(MAKECMDGOALS)),)
ifneq ($(call missing,BILLING_TABLE SINCE),)
$(error make cost needs $(call missing,BILLING_TABLE SINCE): e.g. $(COST_EXAMPLE))
endif
endif

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

venv: $(VENV)/.installed ## create .venv with every pinned dependency

test: venv ## run the whole test suite (no cloud; fetches the pinned upstream files once, see README)
	$(BIN)/python -m tests.upstream fetch
	$(BIN)/python -m pytest -m "not agreement"

test-agreement: venv ## each g6 experiment on the real-time simulator against the virtual-clock oracle (a few minutes)
	$(BIN)/python -m pytest -m agreement

g6-agreement: venv ## every shipped g6 --sim example against the oracle fed its plans (each replayed on the virtual clock, about 8 minutes)
	$(BIN)/python -m benchmarks.g6.agreement examples/g6-sim examples/g6-quant-sim examples/g6-prefix-sim examples/g6-kv-sim examples/g6-saturation-sim

plan: venv ## offline plan of a stack: make plan STACK=g6
	$(BIN)/python -m stacks.plan $(STACK)

docs: venv ## refresh the generated docs: the configuration reference and the figures quoted from examples/
	$(BIN)/python -m tests.docgen

g6-sim: venv ## the g6 sweep against the simulated L4 in real time, every point 3 times (about 17 minutes); report in $(OUT)/
	$(BIN)/python -m benchmarks g6 --sim --model Qwen/Qwen2.5-1.5B-Instruct --max-num-seqs 8,32 --concurrency 1,8,32 --out $(OUT)

g6-kv-sim: venv ## g6's KV-cache experiment against the simulated L4 in real time (about 30 minutes: 29 closed loops)
	$(BIN)/python -m benchmarks g6 --sim --experiment kv --model Qwen/Qwen2.5-1.5B-Instruct --out $(OUT)

g6-quant-sim: venv ## g6's quantization experiment on the simulated L4's virtual clock (about a minute; in real time, without --virtual, 20)
	$(BIN)/python -m benchmarks g6 --sim --virtual --experiment quant --variants bf16,fp8,awq --out $(OUT)

g6-prefix-sim: venv ## g6's shared-prefix experiment, prefix caching on and off, against the simulated L4 (about 5 minutes)
	$(BIN)/python -m benchmarks g6 --sim --experiment prefix --out $(OUT)

g6-saturation-sim: venv ## the request rate the simulated L4 holds within TTFT p99 500 ms, on its virtual clock (about 5 minutes; in real time, without --virtual, 17)
	$(BIN)/python -m benchmarks g6 --sim --virtual --experiment saturation --slo-ttft-ms 500 --out $(OUT)

preflight: venv ## before `pulumi up`: credentials, APIs, L4 quota, L4 zones: make preflight LAB=g6
	$(BIN)/python -m ops.preflight --stack $(LAB) $(if $(PROJECT),--project $(PROJECT))

status: venv ## proof that everything is down: exits 0 only when nothing billable of ours exists: make status [PROJECT=...]
	$(BIN)/python -m ops.status $(if $(PROJECT),--project $(PROJECT))

up: venv ## a session's start: preflight, then pulumi up: make up LAB=g6
	$(BIN)/python -m ops.session up --stack $(LAB) $(if $(PROJECT),--project $(PROJECT))

down: venv ## a session's end: pulumi destroy, then status for that project; fails if anything billable remains
	$(BIN)/python -m ops.session down --stack $(LAB) $(if $(PROJECT),--project $(PROJECT))

cost: venv ## actual cost from the billing export: make cost LAB=g6 SINCE=2026-11-01 BILLING_TABLE=PROJECT_ID.DATASET.TABLE
	$(BIN)/python -m ops.billing --table $(BILLING_TABLE) --lab $(LAB) --since $(SINCE) $(if $(UNTIL),--until $(UNTIL))

clean:
	rm -rf $(VENV) .pytest_cache .cache
