"""Triton's dynamic batcher as its code runs it: payloads staged ahead of a busy instance.

Triton's documentation describes the batcher as a rule a free instance applies to the queue
(:mod:`predictor.capacity.batch_rule`). Its code (triton-inference-server/core,
``src/dynamic_batch_scheduler.cc``, ``src/rate_limiter.cc``, ``src/instance_queue.cc``; the same
logic from release r23.x to main) does something else while every instance is busy, and measured
Triton showed it: with preferred sizes and a queue delay, requests waited up to a whole batch
longer than the rule gives (``benchmarks/results/simulator_vs_triton_h100.txt``). This module
walks the code's state machine, with every thread taking no time:

- **One batcher thread per model** keeps a current *payload* (the batch being formed). It forms
  batches even while the instances are busy, as long as fewer than ``2 * instances`` payloads wait
  for an instance (``RateLimiter::PayloadSlotAvailable``); otherwise it blocks until one is taken.
- **Forming** (``GetDynamicBatch``) scans the queue from its front, with the payload's size ``P``:
  a request that would take ``P + pending`` past the largest preferred size, before any preferred
  size was reached in the scan, marks the payload saturated; past ``max_batch`` it ends the scan;
  a preferred size reached is remembered. Then: a preferred size (and the delay not yet run out)
  is sent at once; a full or saturated batch is sent; with the delay run out, or no delay,
  everything scanned is sent; a payload already queued and not at a preferred size takes the scan
  at once; otherwise the batcher sleeps until the oldest request's delay runs out. Without
  preferred sizes Triton uses ``{max_batch}`` (``model_config_utils.cc``).
- **A payload that is queued but not yet running grows**: the batcher keeps adding to it until an
  instance takes it. But the batcher only wakes for an arrival when a payload slot is free and
  ``queued >= next_preferred_batch_size_`` (or the payload is saturated or running), and that
  threshold is left at the next preferred size whenever the payload went out after a delay wait.
  So a payload sent after waiting out the delay stays frozen while the instance is busy: later
  arrivals wait in the queue for the batch after it. This is the behaviour the documented rule
  misses.
- **An instance** takes the front payload when free; with a queue delay it merges the payloads
  behind it whose oldest request has waited longer than the delay, up to ``max_batch``
  (``InstanceQueue::Dequeue``). Taking a payload wakes the batcher (the payload's callback).
  Dequeue marks the payload behind EXECUTING (when its oldest request has waited longer than
  the delay) *before* it checks that the two fit in ``max_batch``: one that does not fit stays in
  the queue, unmerged, and the batcher, which takes an EXECUTING payload for stale
  (``IsStaleState``), starts a new one behind it. So under a backlog with a delay, the payload
  waiting behind a batch stops growing the moment that batch starts, once its oldest request has
  waited out the delay: measured Triton ran a full batch, then the small one frozen behind it, in
  turn.
- The batcher also wakes every 500 ms when idle, as Triton's does.

Not modelled: request timeouts, priorities and queue policies (Triton then stops prefetching:
``support_prefetching`` is false and the batcher forms a batch only for an idle instance, the
documented rule), ragged or mismatched inputs, custom batching, the threads' own time.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.capacity.instance_sharing import InstanceSharing
from predictor.capacity.single_instance import GiveUp, Served, ServiceFn, slack_s

#: Triton's batcher sleeps this long when its queue is empty (``default_wait_microseconds``).
IDLE_WAKE_S = 0.5
#: A threshold no queue reaches: Triton's ``size_t`` subtraction that wraps below zero.
NEVER = math.inf


@dataclass
class Payload:
    """A batch being formed or waiting for an instance: the index of its first request and its size
    (requests join in arrival order, so a payload is a run of consecutive requests)."""

    first: int = -1
    size: int = 0
    running: bool = False  # EXECUTING: an instance took it (Triton's "stale" state for the batcher)

    def add(self, first: int, count: int) -> None:
        if self.size == 0:
            self.first = first
        self.size += count


@dataclass
class _Batcher:
    """The batcher thread's state (``DynamicBatchScheduler``'s members of the same names)."""

    payload: Payload = field(default_factory=Payload)
    saturated: bool = False  # payload_saturated_
    next_preferred: float = 0  # next_preferred_batch_size_
    blocked: bool = False  # in WaitForPayloadSlotAvailable


def forms_the_rules_batches(max_batch: int, preferred: Sequence[int], delay_s: float) -> bool:
    """Whether Triton's code forms the documented rule's batches: without a queue delay or preferred
    sizes (other than ``max_batch``, Triton's default) a queued payload grows until an instance
    takes it, which is the rule (``tests/predictor/test_capacity_triton_scheduler.py`` holds them
    to the same numbers), and the rule's faster loops may run it."""
    return delay_s == 0 and tuple(preferred) in ((), (max_batch,))


def serve_like_triton(arrival_s: np.ndarray, max_batch: int, preferred: Sequence[int], delay_s: float,
                      instances: int, service_s: ServiceFn, give_up: GiveUp | None = None,
                      sharing: InstanceSharing | None = None) -> Served:
    """Serve ``arrival_s`` (sorted seconds, one sample per request) the way Triton's code batches,
    or stop once ``give_up`` is met (a batch's finish is known when it starts, so the count of
    requests over the bound is known batch by batch, whatever the number of instances).

    ``preferred`` are the preferred batch sizes (empty: Triton's default, ``max_batch`` alone);
    ``service_s(size, start)`` is asked once per batch, in the order the batches start; with
    ``sharing`` (several instances on one GPU), a batch that starts beside running ones is asked as
    ``service_s(their summed size, start, sharing factor, its own size)``
    (:mod:`predictor.capacity.instance_sharing`).
    """
    server = _TritonServer(arrival_s, max_batch, preferred, delay_s, instances, service_s, give_up, sharing)
    try:
        return server.run()
    except _GaveUp:
        return Served.given_up(server.tail)


class _GaveUp(Exception):
    """Enough measured requests took longer than the bound for the p99 to be above it."""


class _TritonServer:
    def __init__(self, arrival_s: np.ndarray, max_batch: int, preferred: Sequence[int], delay_s: float,
                 instances: int, service_s: ServiceFn, give_up: GiveUp | None = None,
                 sharing: InstanceSharing | None = None) -> None:
        self.arrivals: list[float] = arrival_s.tolist()
        self.sharing = sharing
        self.give_up = give_up
        self.late = 0
        self.max_batch = max_batch
        self.preferred = sorted(set(preferred)) or [max_batch]
        self.max_preferred = self.preferred[-1]
        self.preferred_set = frozenset(self.preferred)
        self.scans: dict[tuple[int, int], tuple[int, int, bool, bool]] = {}
        self.delay_s = delay_s
        self.slots = 2 * instances
        #: walk the stretches where the instance idles batch by batch (``_serve_from_empty``)
        self.skip_idle = instances == 1 and delay_s > 0 and self.preferred == [max_batch]
        self.service_s = service_s
        self.head = 0  # first request still in the batcher's queue
        self.tail = 0  # requests arrived so far
        self.batcher = _Batcher()
        self.instance_queue: deque[Payload] = deque()
        self.idle = instances
        self.done: list[tuple[float, int]] = []  # (finish s, batch index): the running batches
        self.wake_at = math.inf  # when the sleeping batcher's wait runs out (inf: blocked, or running)
        self.now = 0.0
        self.in_batcher = False
        self.finished = 0
        self.batches: list[tuple[float, float, int, int]] = []  # (start s, service s, size, first request)

    # -- the event loop ------------------------------------------------------------------------

    def run(self) -> Served:
        """Events in time order: batches finishing (a heap), the batcher's one timer, arrivals; at
        one instant a finish goes first, then the timer, then the arrival."""
        self._sleep(IDLE_WAKE_S)
        n = len(self.arrivals)
        arrivals = self.arrivals
        done = self.done
        while self.finished < n:
            if self.skip_idle and self.idle and self.tail == self.head and self.tail < n and not self.instance_queue:
                self._serve_from_empty()
                continue
            next_arrival = arrivals[self.tail] if self.tail < n else math.inf
            if done and done[0][0] <= next_arrival and done[0][0] <= self.wake_at:
                self.now, batch = heapq.heappop(done)
                self._finish(batch)
            elif self.wake_at <= next_arrival:
                self.now = self.wake_at
                self.wake_at = math.inf
                self._run_batcher()
            else:
                self.now = next_arrival
                self.tail += 1
                self._on_enqueue()
        batches = np.asarray(self.batches, dtype=float).reshape(-1, 4)
        sizes = batches[:, 2].astype(int)  # batches start in request order: payloads leave FIFO
        start = np.repeat(batches[:, 0], sizes)
        return Served(start, start + np.repeat(batches[:, 1], sizes), batches, requests=n, complete=True)

    def _serve_from_empty(self) -> None:
        """From an empty server (one instance, no preferred size but ``max_batch``, a delay), serve
        batch by batch while each ends before the next request arrives, then hand back to the
        event loop with the last batch running and the queue empty.

        While the instance is idle Triton's code forms the documented rule's batch: the first arrival
        finds a fresh payload and sets the next preferred size to ``max_batch``, so the batch goes
        when ``max_batch`` requests are queued (that arrival wakes the batcher) or the oldest's delay
        runs out (its timer, which goes before an arrival at the same instant), and the idle instance
        takes it. Only a request arriving while a batch runs makes the two differ. This walks the
        light-load stretches, where most of a plan's runs are, without an event per step."""
        arrivals, n = self.arrivals, len(self.arrivals)
        while self.tail < n:
            head = self.tail
            full = head + self.max_batch - 1
            send = arrivals[head] + self.delay_s
            if full < n and arrivals[full] < send:
                send, end = arrivals[full], full + 1
            else:
                end = bisect_left(arrivals, send, head + 1, min(full + 1, n))
            self.now = send
            self.tail = self.head = end
            finish = self._start(head, end - head)
            if end < n and arrivals[end] < finish:  # a request arrives while the batch runs
                self._occupy(finish)
                self.batcher = _Batcher()
                self._sleep(IDLE_WAKE_S)
                return  # the event loop takes over
            self.finished += end - head
            self.now = finish

    def _sleep(self, seconds: float) -> None:
        """``cv_.wait_for``: until ``seconds`` pass or a notification comes (the one timer)."""
        self.wake_at = self.now + seconds

    def _notify(self) -> None:
        """``cv_.notify_one`` from another thread: wakes a sleeping batcher, or a blocked one if a
        payload slot is free (its wait's predicate); lost while the batcher is running."""
        b = self.batcher
        if self.in_batcher or (b.blocked and not self._slot_available()):
            return
        b.blocked = False
        self._run_batcher()

    # -- the request side (DynamicBatchScheduler::Enqueue) -------------------------------------

    def _on_enqueue(self) -> None:
        b = self.batcher
        queued = self.tail - self.head
        wake = self._slot_available() and (b.saturated or b.payload.running or queued >= b.next_preferred)
        if wake:
            self._notify()

    def _slot_available(self) -> bool:
        return len(self.instance_queue) < self.slots

    # -- the batcher thread (DynamicBatchScheduler::BatcherThread) -----------------------------

    def _run_batcher(self) -> None:
        b = self.batcher
        self.in_batcher = True
        try:
            while True:
                if b.saturated or b.payload.running:
                    b.payload = Payload()
                    b.saturated = False
                    b.next_preferred = 0
                if self.tail == self.head:
                    self._sleep(IDLE_WAKE_S)
                    return
                if not self._slot_available():
                    b.blocked = True  # until an instance takes a payload
                    self.wake_at = math.inf
                    return
                wait_s, pending = self._dynamic_batch()
                newly_formed = False
                if wait_s == 0 and pending > 0:
                    newly_formed = b.payload.size == 0  # a queued payload has requests already
                    b.payload.add(self.head, pending)
                    self.head += pending
                if newly_formed:  # READY: handed to the rate limiter, which queues it for an instance
                    self.instance_queue.append(b.payload)
                    self._dispatch_idle()
                if wait_s > 0:
                    self._sleep(wait_s)
                    return
        finally:
            self.in_batcher = False

    def _dynamic_batch(self) -> tuple[float, int]:
        """``GetDynamicBatch``: (seconds to wait, 0 to send now; requests to move into the payload)."""
        b = self.batcher
        size = b.payload.size
        # the scan sees at most max_batch - size + 1 requests: a longer queue scans alike
        key = (size, min(self.tail - self.head, self.max_batch - size + 1))
        scan = self.scans.get(key)
        if scan is None:
            scan = self.scans[key] = self._scan(*key)
        pending, best, send_now, crossed = scan
        if crossed:
            b.saturated = True
        age = self.now - self.arrivals[self.head]
        slack = slack_s(self.now)
        exceeded = self.delay_s > 0 and age + slack >= self.delay_s
        if best != 0 and not exceeded:
            if self.delay_s == 0:
                b.saturated = True
            return 0.0, best
        if pending == 0:
            return 0.0, 0
        if send_now or size + pending >= self.max_preferred:
            b.saturated = True
            return 0.0, pending
        if exceeded or self.delay_s == 0:
            return 0.0, pending
        above = bisect_right(self.preferred, size + pending)
        target = self.preferred[above] if above < len(self.preferred) else self.preferred[0]
        b.next_preferred = target - size if target >= size else NEVER
        if not b.saturated and size != 0 and size not in self.preferred:
            return 0.0, pending
        return max(self.delay_s - age, slack), pending

    def _scan(self, size: int, queued: int) -> tuple[int, int, bool, bool]:
        """``GetDynamicBatch``'s walk over ``queued`` requests with a payload of ``size``: (requests
        scanned, the best batch marked, whether the walk hit max_batch, whether it crossed the
        largest preferred size, which saturates the payload)."""
        pending = best = 0
        send_now = crossed = False
        for _ in range(queued):
            if size + pending > 0:
                if size + pending + 1 > self.max_preferred and best == 0:
                    best = pending
                    crossed = True
                if size + pending + 1 > self.max_batch:
                    send_now = True
                    break
            pending += 1
            if size + pending in self.preferred_set:
                best = pending
        return pending, best, send_now, crossed

    # -- the instances (RateLimiter::DequeuePayload, InstanceQueue::Dequeue) --------------------

    def _dispatch_idle(self) -> None:
        taken = False
        while self.idle and self.instance_queue:
            self._take()
            taken = True
        if taken:
            self._notify()  # the payload's callback

    def _take(self) -> None:
        payload = self.instance_queue.popleft()
        payload.running = True
        while (self.instance_queue and self.delay_s > 0 and self.max_batch > 1
               and self.now - self.arrivals[self.instance_queue[0].first] > self.delay_s):
            front = self.instance_queue[0]
            # Triton marks it EXECUTING before it checks the fit: one that does not fit stays
            # queued, and the batcher, finding its payload stale, grows it no more
            front.running = True
            if payload.size + front.size > self.max_batch:
                break
            self.instance_queue.popleft()
            payload.size += front.size  # the next payload's requests follow this one's
        self._occupy(self._start(payload.first, payload.size))

    def _start(self, lo: int, size: int) -> float:
        """The batch of requests ``lo..lo + size`` starts now: its service is drawn and it is
        recorded; returns when it ends (the caller runs it on an instance, or is done with it)."""
        if self.sharing is None or not self.done:
            service = self.service_s(size, self.now)
        else:  # the instances share the GPU with the batches running
            # (a batch ending at this very instant is over, as SimPy's loop has it, though its turn is to come)
            running = [self.batches[i][2] for finish, i in self.done if finish > self.now]
            summed, factor = self.sharing.batch_time_terms(size, running)
            service = self.service_s(summed, self.now, factor, size)
        finish = self.now + service
        self.batches.append((self.now, service, size, lo))
        if self.give_up is not None:
            self.late += self.give_up.late_in(self.arrivals, lo, lo + size, finish)
            if self.late >= self.give_up.count:
                raise _GaveUp
        return finish

    def _occupy(self, finish: float) -> None:
        """An instance runs the batch recorded last until ``finish``."""
        self.idle -= 1
        heapq.heappush(self.done, (finish, len(self.batches) - 1))

    def _finish(self, batch: int) -> None:
        self.finished += self.batches[batch][2]
        self.idle += 1
        self._dispatch_idle()


__all__: Sequence[str] = ["serve_like_triton"]
