"""The simulated vLLM engine: continuous batching over a paged KV cache, stepped on the roofline clock.

`Scheduler` is the synchronous core (the same rules as vLLM's V1 scheduler, simplified): each step
gives running sequences their next tokens first, then admits waiting ones, within a token budget
(chunked prefill) and `max_num_seqs`. KV blocks of 16 tokens are allocated as sequences grow; when
a running sequence needs a block and none is free, the newest running sequence is preempted
(its blocks freed, to be recomputed from scratch later).

Prefix caching (on by default, as in vLLM's V1 engine): a request's full prompt blocks are known by a
chained hash of their tokens. Once a request's prefill is done its full prompt blocks join the cache;
a request admitted later whose prompt starts with cached blocks shares them (reference-counted, one
copy in memory) and its prefill skips them (at least the last prompt token is computed). A block no
request references stays cached but counts as free, and is evicted, oldest first, when a new block
is needed. Queried and hit tokens are counted at a request's first admission, as vLLM v0.34.0's
prefix-cache counters do (a preempted request's later lookups are counted apart there, not here).

`EngineCore` is what every driver of the scheduler shares: a request is admitted on the driver's clock
(it reaches the engine REQUEST_OVERHEAD_S after it arrived), a step lasts its cost model's duration,
and a finished step's tokens and finished requests go to its hooks (the HTTP server's: metrics and the
streams waiting for them). Two drivers: `Engine` here runs it in real time from one asyncio task
(time.monotonic, sleeping each step's duration divided by `speedup`); virtual.py runs it on an event
queue, with no sleeps. Single token times of `Engine` land on the event loop's timer grid (about 1 ms),
but back-to-back steps follow a timeline, so mean inter-token times match the simulated step times.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.serving.sizing import Sizing
from benchmarks.sim.costs import REQUEST_OVERHEAD_S, ScheduledWork, StepCost, step_cost

# Beyond this much lag behind its timeline (a stalled process), the engine restarts the timeline
# from now rather than rushing steps to catch up.
MAX_LAG_S = 0.05
# How long finished steps are kept for the GPU-activity series (metrics.WINDOW_S looks back 1 s).
STEP_HISTORY_S = 2.0
# A step is late when its tokens land later after its timeline's end than this share of its own duration:
# the host, not the simulated GPU, then set its inter-token times (sim:engine_steps_late, metrics.py).
LATE_SHARE = 0.25

FINISH_LENGTH = "length"
FINISH_STOP = "stop"
FINISH_ABORT = "abort"


@dataclass(frozen=True)
class Admission:
    """A request as the engine takes it: what the API server read from its body (admission.py)."""

    prompt_tokens: int
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    seed: int | None = None
    greedy: bool = False  # temperature 0: the output is a function of the prompt alone
    prompt_digest: str = ""  # of the prompt's tokens, stable across processes
    block_hashes: tuple[int, ...] = ()  # chained hashes of the prompt's full blocks (prefix caching on)


@dataclass(eq=False)  # one request is itself only: the scheduler's `in` and `remove` compare identity
class SimRequest:
    """One request's state in the engine and its server-side timeline (seconds on the driver's clock)."""

    request_id: str
    index: int
    prompt_tokens: int
    max_tokens: int
    target_tokens: int
    arrival_s: float
    arrival_wall_s: float
    ready_s: float
    num_computed: int = 0
    output_tokens: int = 0
    blocks: int = 0
    preemptions: int = 0
    first_scheduled_s: float | None = None
    block_hashes: tuple[int, ...] = ()  # chained hashes of the prompt's full blocks
    shared: list[int] = field(default_factory=list)  # cached blocks it references (counted in `blocks`)
    cached_tokens: int = 0  # prompt tokens the prefix cache served at its first admission
    registered: bool = False  # its full prompt blocks joined the cache
    token_times_s: list[float] = field(default_factory=list)
    finish_s: float | None = None
    finish_reason: str | None = None
    # Output-token counts as tokens appear, then None once the request has finished.
    events: asyncio.Queue[int | None] | None = None

    @property
    def remaining(self) -> int:
        """Tokens to run through the model before the next output token appears."""
        return self.prompt_tokens + self.output_tokens - self.num_computed

    def record(self) -> dict[str, object]:
        """The ground-truth entry GET /sim/requests serves for a finished request."""
        first = self.token_times_s[0] if self.token_times_s else None
        times = self.token_times_s
        return {
            "request_id": self.request_id,
            "arrival_s": self.arrival_s,
            "arrival_wall_s": self.arrival_wall_s,
            "first_scheduled_s": self.first_scheduled_s,
            "first_token_s": first,
            "token_times_s": list(times),
            "itl_s": [b - a for a, b in zip(times, times[1:])],
            "finish_s": self.finish_s,
            "ttft_s": None if first is None else first - self.arrival_s,
            "e2e_s": None if self.finish_s is None else self.finish_s - self.arrival_s,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "finish_reason": self.finish_reason,
            "preemptions": self.preemptions,
        }


@dataclass(frozen=True)
class Step:
    """What one engine step runs: (request, tokens computed) pairs and their cost."""

    work: list[tuple[SimRequest, int]]
    cost: StepCost


class Scheduler:
    """Continuous batching with a paged KV cache; no clock of its own."""

    def __init__(self, sizing: Sizing, *, seed: int, prefix_caching: bool = False) -> None:
        self.sizing = sizing
        self.seed = seed
        self.prefix_caching = prefix_caching
        self.free_blocks = sizing.num_gpu_blocks  # cached blocks no request references count as free
        self.refs: dict[int, int] = {}  # cached block hash -> requests referencing it
        self.evictable: collections.OrderedDict[int, None] = collections.OrderedDict()  # cached, unreferenced
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.waiting: collections.deque[SimRequest] = collections.deque()
        self.running: list[SimRequest] = []
        self.preemptions_total = 0
        self._arrivals: list[tuple[float, int, SimRequest]] = []
        self._counter = itertools.count()

    def new_request(self, admission: Admission, *, arrival_s: float, ready_s: float, arrival_wall_s: float = 0.0) -> SimRequest:
        index = next(self._counter)
        request = SimRequest(
            request_id=f"sim-{self.seed}-{index}",
            index=index,
            prompt_tokens=admission.prompt_tokens,
            max_tokens=admission.max_tokens,
            target_tokens=self._target(admission, index),
            arrival_s=arrival_s,
            arrival_wall_s=arrival_wall_s,
            ready_s=ready_s,
            block_hashes=admission.block_hashes,
        )
        heapq.heappush(self._arrivals, (ready_s, index, request))
        return request

    def _target(self, admission: Admission, index: int) -> int:
        """Output tokens the request runs to: max_tokens with ignore_eos, else a seeded stand-in for the
        model emitting EOS, uniform between min_tokens and max_tokens. What decides it is what decides a
        real model's output: at temperature 0 the prompt alone (greedy decoding); when sampling, the
        request's own seed with its prompt (vLLM: the same seed, the same output); else the server's
        random state. Never the order requests reached the server, at temperature 0 or with a seed."""
        if admission.ignore_eos:
            return admission.max_tokens
        if admission.greedy:
            key = f"greedy:{admission.prompt_digest}"
        elif admission.seed is not None:
            key = f"request:{admission.seed}:{admission.prompt_digest}"
        else:
            key = f"{self.seed}:{index}"
        rng = random.Random(key)
        return rng.randint(max(1, min(admission.min_tokens, admission.max_tokens)), admission.max_tokens)

    def next_arrival_s(self) -> float | None:
        return self._arrivals[0][0] if self._arrivals else None

    def admit_arrivals(self, now_s: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now_s:
            self.waiting.append(heapq.heappop(self._arrivals)[2])

    @property
    def kv_cache_usage(self) -> float:
        total = self.sizing.num_gpu_blocks
        return (total - self.free_blocks) / total

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.sizing.block_size)

    def _take(self, blocks: int) -> None:
        """Allocate `blocks` free blocks, evicting the oldest unreferenced cached blocks if empty ones run out."""
        empty = self.free_blocks - len(self.evictable)
        for _ in range(max(0, blocks - empty)):
            self.evictable.popitem(last=False)
        self.free_blocks -= blocks

    def _release(self, request: SimRequest) -> None:
        """Free a request's own blocks; its cached ones stay cached, free once no request references them."""
        self.free_blocks += request.blocks - len(request.shared)
        for h in request.shared:
            self.refs[h] -= 1
            if not self.refs[h]:
                del self.refs[h]
                self.evictable[h] = None
                self.free_blocks += 1
        request.shared = []
        request.blocks = 0

    def _lookup(self, request: SimRequest) -> list[int]:
        """The longest run of the request's prompt blocks that is cached."""
        hits = []
        if self.prefix_caching:
            for h in request.block_hashes:
                if h not in self.refs and h not in self.evictable:
                    break
                hits.append(h)
        return hits

    def _share(self, request: SimRequest, hits: list[int]) -> None:
        for h in hits:
            if h in self.evictable:
                del self.evictable[h]
                self.free_blocks -= 1
            self.refs[h] = self.refs.get(h, 0) + 1
        request.shared = list(hits)
        request.blocks = len(hits)

    def _register(self, request: SimRequest) -> None:
        """A finished prefill's full prompt blocks join the cache (blocks another request computed first stay its own)."""
        request.registered = True
        for h in request.block_hashes[len(request.shared):]:
            if h not in self.refs and h not in self.evictable:
                self.refs[h] = 1
                request.shared.append(h)

    def _preempt_newest(self) -> SimRequest:
        victim = self.running.pop()
        self._release(victim)
        victim.registered = False
        victim.num_computed = 0
        victim.preemptions += 1
        self.preemptions_total += 1
        self.waiting.appendleft(victim)
        return victim

    def schedule(self, now_s: float) -> Step | None:
        """Pick the next step's work and reserve its KV blocks; None when there is nothing to run."""
        self.admit_arrivals(now_s)
        budget = self.sizing.max_num_batched_tokens
        work: list[tuple[SimRequest, int]] = []
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            tokens = min(request.remaining, budget)
            need = self._blocks_for(request.num_computed + tokens) - request.blocks
            while need > self.free_blocks and request in self.running:
                self._preempt_newest()
                preempted = True
            if request not in self.running:
                break
            self._take(need)
            request.blocks += need
            work.append((request, tokens))
            budget -= tokens
            index += 1
        # As in vLLM, nothing new is admitted in a step that had to preempt.
        while not preempted and self.waiting and len(self.running) < self.sizing.max_num_seqs and budget > 0:
            request = self.waiting[0]
            hits = self._lookup(request)
            # vLLM computes at least the last prompt token, however much of the prompt is cached.
            cached = min(len(hits) * self.sizing.block_size, request.prompt_tokens - 1)
            tokens = min(request.prompt_tokens + request.output_tokens - cached, budget)
            need = self._blocks_for(cached + tokens) - len(hits)
            revived = sum(1 for h in hits if h in self.evictable)
            if need + revived > self.free_blocks:
                break
            self.waiting.popleft()
            self._share(request, hits)
            request.num_computed = cached
            self._take(need)
            request.blocks += need
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now_s
                request.cached_tokens = cached
                if self.prefix_caching:
                    self.prefix_queries += request.prompt_tokens
                    self.prefix_hits += cached
            self.running.append(request)
            work.append((request, tokens))
            budget -= tokens
        if not work:
            return None
        cost = step_cost(
            self.sizing, [ScheduledWork(new_tokens=t, cached_tokens=r.num_computed) for r, t in work]
        )
        return Step(work=work, cost=cost)

    def complete(self, step: Step, now_s: float) -> list[SimRequest]:
        """Apply a finished step: advance each sequence, emit tokens; returns requests that emitted."""
        emitted = []
        for request, tokens in step.work:
            if request.finish_reason is not None:
                continue  # aborted while the step ran
            request.num_computed += tokens
            if self.prefix_caching and not request.registered and request.num_computed >= request.prompt_tokens:
                self._register(request)
            if request.remaining > 0:
                continue  # a prefill chunk; no token yet
            request.output_tokens += 1
            request.token_times_s.append(now_s)
            emitted.append(request)
            if request.output_tokens >= request.target_tokens:
                reason = FINISH_LENGTH if request.output_tokens >= request.max_tokens else FINISH_STOP
                self._finish(request, now_s, reason)
        return emitted

    def in_flight(self) -> list[SimRequest]:
        """Requests not finished yet: running, waiting, or still arriving."""
        return [*self.running, *self.waiting, *(entry[2] for entry in self._arrivals)]

    def abort(self, request: SimRequest, now_s: float) -> None:
        if request.finish_reason is None:
            self._finish(request, now_s, FINISH_ABORT)

    def _finish(self, request: SimRequest, now_s: float, reason: str) -> None:
        request.finish_s = now_s
        request.finish_reason = reason
        self._release(request)
        if request in self.running:
            self.running.remove(request)
        if request in self.waiting:
            self.waiting.remove(request)
        self._arrivals = [entry for entry in self._arrivals if entry[2] is not request]
        heapq.heapify(self._arrivals)


@dataclass(frozen=True)
class StepRecord:
    """A step as the GPU saw it, for the DCGM-like series (seconds on the driver's clock)."""

    start_s: float
    end_s: float
    dram_share: float  # bytes moved / (peak bandwidth x duration): DCGM's DRAM_ACTIVE over the step
    compute_share: float  # roofline compute time / duration: the tensor pipe's share


class EngineCore:
    """The scheduler as every driver runs it: admission on the driver's clock, steps timed by the cost
    model, their tokens and finished requests handed to the hooks. A driver owns the clock: it calls
    `submit` when a request arrives, `schedule` when the engine is free, and `finish_step` when the
    step's duration (`duration_s`) has passed."""

    def __init__(
        self,
        sizing: Sizing,
        *,
        seed: int,
        speedup: float,
        prefix_caching: bool = False,
        on_token: Callable[[SimRequest], None] = lambda request: None,
        on_finish: Callable[[SimRequest], None] = lambda request: None,
    ) -> None:
        self.scheduler = Scheduler(sizing, seed=seed, prefix_caching=prefix_caching)
        self.speedup = speedup
        self.finished: list[SimRequest] = []
        self._on_token = on_token
        self._on_finish = on_finish

    def submit(self, admission: Admission, now_s: float, wall_s: float = 0.0) -> SimRequest:
        """A request that arrived at `now_s`: the engine sees it after the API server's overhead."""
        return self.scheduler.new_request(
            admission, arrival_s=now_s, ready_s=now_s + REQUEST_OVERHEAD_S / self.speedup, arrival_wall_s=wall_s
        )

    def schedule(self, now_s: float) -> Step | None:
        return self.scheduler.schedule(now_s)

    def duration_s(self, step: Step) -> float:
        """How long `step` runs on the driver's clock."""
        return step.cost.duration_s / self.speedup

    def finish_step(self, step: Step, start_s: float, end_s: float, done_s: float) -> StepRecord:
        """Apply `step`, which ran from `start_s` to `end_s` and whose tokens appear at `done_s`."""
        for request in self.scheduler.complete(step, done_s):
            self._on_token(request)
            if request.finish_reason is not None:
                self._record_finish(request)
        cost = step.cost
        peak = self.scheduler.sizing.memory_bandwidth_bytes_per_s
        return StepRecord(start_s=start_s, end_s=end_s, dram_share=cost.bytes_moved / (peak * cost.duration_s),
                          compute_share=cost.compute_time_s / cost.duration_s)  # fmt: skip

    def abort(self, request: SimRequest, now_s: float) -> None:
        if request.finish_reason is None:
            self.scheduler.abort(request, now_s)
            self._record_finish(request)

    def _record_finish(self, request: SimRequest) -> None:
        self.finished.append(request)
        self._on_finish(request)


class Engine:
    """Runs an engine core in real time (durations divided by its `speedup`) from one asyncio task; its
    hooks hand tokens on to whoever waits for them (the HTTP handlers' per-request queues)."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.steps: collections.deque[StepRecord] = collections.deque()
        self._wake = asyncio.Event()
        # Steps run, and those the host made late (LATE_SHARE) or that restarted the timeline (MAX_LAG_S).
        self.steps_total = 0
        self.steps_late = 0

    @property
    def scheduler(self) -> Scheduler:
        return self.core.scheduler

    @property
    def finished(self) -> list[SimRequest]:
        return self.core.finished

    def submit(self, admission: Admission) -> SimRequest:
        request = self.core.submit(admission, time.monotonic(), time.time())
        request.events = asyncio.Queue()
        self._wake.set()
        return request

    def abort(self, request: SimRequest) -> None:
        self.core.abort(request, time.monotonic())

    async def run(self) -> None:
        try:
            await self._loop()
        except Exception:
            # Never leave an HTTP handler waiting on a dead engine: end every open request.
            for request in self.scheduler.in_flight():
                self.abort(request)
            raise

    async def _loop(self) -> None:
        # Back-to-back steps follow a timeline of their simulated durations, so a late wake-up
        # (event-loop or timer overshoot) shortens the next sleep instead of stretching every step.
        timeline: float | None = None
        while True:
            now = time.monotonic()
            step = self.core.schedule(now)
            if step is None:
                timeline = None
                await self._idle(now)
                continue
            behind = timeline is not None and now - timeline > MAX_LAG_S
            start = now if timeline is None or behind else timeline
            end = start + self.core.duration_s(step)
            await asyncio.sleep(max(0.0, end - time.monotonic()))
            timeline = end
            done = time.monotonic()
            self.steps_total += 1
            self.steps_late += behind or done - end > LATE_SHARE * (end - start)
            while self.steps and self.steps[0].end_s < done - STEP_HISTORY_S:
                self.steps.popleft()
            self.steps.append(self.core.finish_step(step, start, end, done))

    async def _idle(self, now: float) -> None:
        self._wake.clear()
        next_arrival = self.scheduler.next_arrival_s()
        timeout = None if next_arrival is None else max(0.0, next_arrival - now)
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            pass
