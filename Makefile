# Common commands. Every target works on a fresh machine with Python 3.11 (it makes .venv itself).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
LAB ?= $(STACK)
OUT ?= results

.PHONY: venv test test-realtime test-agreement g6-agreement test-cluster cluster-up cluster-down g3-local lab-local g6-autoscale-local plan docs g6-sim g6-kv-sim g6-quant-sim g6-prefix-sim g6-saturation-sim preflight status up down cost clean

# A target's required variables, checked before anything runs (no venv, no python): one line naming
# those missing and an example.
missing = $(strip $(foreach v,$(1),$(if $($(v)),,$(v))))
COST_EXAMPLE := make cost LAB=g6 SINCE=2026-11-01 BILLING_TABLE=my-lab-project.billing.gcp_billing_export_v1_012345_6789AB_CDEF01
ifneq ($(filter cost,$(MAKECMDGOALS)),)
ifneq ($(call missing,BILLING_TABLE SINCE LAB),)
$(error make cost needs $(call missing,BILLING_TABLE SINCE LAB): e.g. $(COST_EXAMPLE))
endif
endif
# A session is one lab's: `make up` or `make down` without LAB would pick one for you.
LAB_GOALS := $(filter up down preflight lab-local,$(MAKECMDGOALS))
ifneq ($(LAB_GOALS),)
ifeq ($(LAB),)
$(error make $(firstword $(LAB_GOALS)) needs LAB: e.g. make $(firstword $(LAB_GOALS)) LAB=g6 PROJECT=my-lab-project)
endif
endif

# The operator commands' exit status is their answer (status: 0 DOWN, 1 NOT DOWN, 2 NOT PROVEN), but make
# exits 2 for any failed recipe. In question mode (-q) GNU make still runs the recipe lines marked `+`, exits
# 1 when one exits 1 and 2 on any other failure: run alone, these targets keep the command's 0, 1 or 2.
# Not under -n, which would run the `+` lines too.
EXIT_STATUS_GOALS := preflight status up down plan cost
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(EXIT_STATUS_GOALS),$(MAKECMDGOALS)),)
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
MAKEFLAGS += -q
RUN := +
endif
endif
endif

# With JSON=1 stdout is the one JSON document alone: make echoes no command (a first venv's neither).
QUIET_JSON := $(if $(JSON),@)

$(BIN)/python:
	$(RUN)$(QUIET_JSON)$(PY) -m venv $(VENV)
	$(RUN)$(QUIET_JSON)$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(RUN)$(QUIET_JSON)$(BIN)/pip install -q -r requirements.txt
	$(RUN)$(QUIET_JSON)touch $@

venv: $(VENV)/.installed ## create .venv with every pinned dependency

test: venv ## run the whole test suite (no cloud; fetches the pinned upstream files once, see README)
	$(BIN)/python -m tests.upstream fetch
	$(BIN)/python -m pytest

test-realtime: venv ## the g6 runs, interrupts and searches that take real time against the simulator or a server of known capacity (about 5 minutes)
	$(BIN)/python -m tests.upstream fetch
	$(BIN)/python -m pytest -m realtime

test-agreement: venv ## each g6 experiment on the real-time simulator against the virtual-clock oracle (a few minutes)
	$(BIN)/python -m pytest -m agreement

g6-agreement: venv ## every shipped g6 --sim example against the oracle fed its plans (each replayed on the virtual clock, about 8 minutes)
	$(BIN)/python -m benchmarks.g6.agreement examples/g6-sim examples/g6-quant-sim examples/g6-prefix-sim examples/g6-kv-sim examples/g6-saturation-sim

test-cluster: venv ## every lab through the real Pulumi engine against a local control plane (binaries built once into .cache/)
	$(BIN)/python -m tests.upstream fetch
	$(BIN)/python -m localcluster.build
	$(BIN)/python -m localcluster.images
	$(BIN)/python -m pytest -m cluster tests/cluster

cluster-up: venv ## a real control plane on 127.0.0.1, a real node (kubelet, containerd) as the GPU pool's first node and kwok nodes for the rest; prints the kubeconfig: make cluster-up LAB=g6 (default dev)
	$(BIN)/python -m localcluster up --real-node --lab $(or $(LAB),dev)

cluster-down: venv ## stop the local control plane: every process it started, every port it held
	$(BIN)/python -m localcluster down

g3-local: venv ## g3's benchmark against a local cluster (real scheduler, Kueue, JobSet; kwok's nodes and pods): make g3-local OUT=results
	$(BIN)/python -m tests.upstream fetch
	$(BIN)/python -m localcluster bench --lab g3 --out $(OUT) --job-seconds 20 -- --work-seconds 20

lab-local: venv ## a lab's benchmark, unchanged, against a local cluster shaped like its pools, the GPU pool's first node a real one (g6's load from this host through its Service; g8's bucket in fake-gcs-server, its preemption the node's power-off): make lab-local LAB=g4 OUT=results
	$(BIN)/python -m tests.upstream fetch
	$(BIN)/python -m localcluster bench --lab $(LAB) --real-node --out $(OUT)

# g6 with autoscaling on, on the real node: the fleet of vLLM stand-ins (each its own simulated L4, at most
# 2), KEDA built from its module (minutes, once) and Prometheus beside them; the load from this host through
# the vLLM Service. Small batches (max-num-seqs 8) so a queue forms at a rate 2 cores can drive.
AUTOSCALE_LOCAL := --set gpu_max_nodes=2 --set autoscaling.enabled=true --set autoscaling.max_replicas=2 \
	--set autoscaling.scale_down_stabilization_s=60 --set vllm.cpu=0.5 --set vllm.max_num_seqs=8
g6-autoscale-local: venv ## g6's autoscale experiment on the local cluster's real node: KEDA scaling vLLM stand-ins on their queue (about 15 minutes; CONNECTIONS=per-request for a connection per request); report in $(OUT)/
	$(BIN)/python -m tests.upstream fetch
	$(BIN)/python -m localcluster bench --lab g6 --real-node --whole-gpu-pool --client-on-host vllm $(AUTOSCALE_LOCAL) \
		--out $(OUT) -- --experiment autoscale --base-rate 1 --peak-rate 12 --lead-seconds 30 --burst-seconds 240 \
		--output-len 64 --slo-ttft-ms 2000 --settle-timeout 600 --connections $(or $(CONNECTIONS),reuse)

plan: venv ## offline plan of a lab, no cloud: make plan LAB=g6 (default dev)
	$(RUN)$(BIN)/python -m stacks.plan $(or $(LAB),dev)

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

g6-saturation-sim: venv ## the request rate the simulated L4 holds within TTFT p99 500 ms, on its virtual clock (about 18 minutes; in real time, without --virtual, 75)
	$(BIN)/python -m benchmarks g6 --sim --virtual --experiment saturation --slo-ttft-ms 500 --out $(OUT)

preflight: venv ## before `pulumi up`: Pulumi, credentials, billing, APIs, GPU quotas, L4 zones: make preflight LAB=g6 [JSON=1]
	$(RUN)$(QUIET_JSON)$(BIN)/python -m ops.preflight --stack $(LAB) $(if $(PROJECT),--project $(PROJECT)) $(if $(JSON),--json)

status: venv ## proof that everything is down: 0 DOWN, 1 NOT DOWN, 2 NOT PROVEN: make status [PROJECT=...] [JSON=1]
	$(RUN)$(QUIET_JSON)$(BIN)/python -m ops.status $(if $(PROJECT),--project $(PROJECT)) $(if $(JSON),--json)

up: venv ## a session's start: preflight, then pulumi up: make up LAB=g6
	$(RUN)$(BIN)/python -m ops.session up --stack $(LAB) $(if $(PROJECT),--project $(PROJECT))

down: venv ## a session's end: pulumi destroy, then status for that project; fails if anything billable remains
	$(RUN)$(BIN)/python -m ops.session down --stack $(LAB) $(if $(PROJECT),--project $(PROJECT))

cost: venv ## actual cost from the billing export: make cost LAB=g6 SINCE=2026-11-01 BILLING_TABLE=PROJECT_ID.DATASET.TABLE
	$(RUN)$(BIN)/python -m ops.billing --table $(BILLING_TABLE) --lab $(LAB) --since $(SINCE) $(if $(UNTIL),--until $(UNTIL))

clean:
	rm -rf $(VENV) .pytest_cache .cache
