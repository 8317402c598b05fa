/* A deterministic re-run of trio-batcher's admission windows on recorded arrival times.
 *
 * The rules are those of trio_batcher/batching.py:
 *  - at most one window is open; an arrival joins it or opens a new one;
 *  - a window flushes when its `size`-th request joins (reason "size"), or `waitMs` after
 *    its FIRST request joined (reason "time"), whichever comes first; an arrival at exactly
 *    the deadline finds the window already flushed;
 *  - flushed requests take upstream slots from one limiter of `cap` slots shared by all
 *    windows, first come first served in arrival order; a slot is freed when its call ends;
 *  - with batching off every request goes upstream the moment it arrives, with no cap
 *    (the plain proxy of the recording).
 * Call k (in start order) lasts services[k % services.length] ms: the recorded calls'
 * own durations, so the upstream behaves as it did in the recording.
 * Not modelled: the proxy's own CPU time (accepting, parsing, translating) and HTTP.
 * Exposes the global `WindowSim`.
 */
(function () {
  "use strict";

  /** Python's round(): halves go to the even neighbour (so ranks match /metrics). */
  function roundHalfEven(x) {
    const f = Math.floor(x);
    const diff = x - f;
    if (diff > 0.5) return f + 1;
    if (diff < 0.5) return f;
    return f % 2 === 0 ? f : f + 1;
  }

  /** Nearest-rank percentile, the method of /metrics and the bench: rank round(p/100·(n−1)). */
  function percentile(values, p) {
    if (!values.length) return null;
    const sorted = [...values].sort((a, b) => a - b);
    const rank = Math.min(sorted.length - 1, Math.max(0, roundHalfEven((p / 100) * (sorted.length - 1))));
    return sorted[rank];
  }

  /** [start, end] intervals → the in-flight step function [[t, n], ...] (as the bench's _steps). */
  function steps(intervals) {
    const events = [];
    for (const [s, e] of intervals) {
      events.push([s, 1]);
      events.push([e, -1]);
    }
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let level = 0;
    const points = [[0, 0]];
    for (const [t, change] of events) {
      level += change;
      if (points[points.length - 1][0] === t) points[points.length - 1][1] = level;
      else points.push([t, level]);
    }
    return points;
  }

  /** A min-heap of numbers (slot free times). */
  function heap() {
    const a = [];
    return {
      size: () => a.length,
      push(v) {
        a.push(v);
        let i = a.length - 1;
        while (i > 0) {
          const p = (i - 1) >> 1;
          if (a[p] <= a[i]) break;
          [a[p], a[i]] = [a[i], a[p]];
          i = p;
        }
      },
      pop() {
        const top = a[0];
        const last = a.pop();
        if (a.length) {
          a[0] = last;
          let i = 0;
          for (;;) {
            const l = 2 * i + 1;
            const r = l + 1;
            let m = i;
            if (l < a.length && a[l] < a[m]) m = l;
            if (r < a.length && a[r] < a[m]) m = r;
            if (m === i) break;
            [a[m], a[i]] = [a[i], a[m]];
            i = m;
          }
        }
        return top;
      },
    };
  }

  /**
   * arrivals: ms, any order. services: ms per call. opts: {size, waitMs, cap, batching}.
   * cap may be Infinity. Returns windows, per-request timings and the in-flight wave.
   */
  function simulate(arrivals, services, opts) {
    const size = Math.max(1, Math.floor(opts.size));
    const wait = Math.max(0, opts.waitMs);
    const batching = opts.batching !== false;
    const cap = batching ? opts.cap : Infinity;
    const order = [...arrivals].sort((a, b) => a - b);
    const windows = [];
    const flushedAt = new Array(order.length);
    if (batching) {
      let open = null;
      const flush = (w, at, reason) => {
        w.flushed = at;
        w.reason = reason;
        for (const i of w.members) flushedAt[i] = at;
        windows.push(w);
      };
      order.forEach((t, i) => {
        if (open && t >= open.opened + wait) {
          flush(open, open.opened + wait, "time");
          open = null;
        }
        if (!open) open = { opened: t, members: [] };
        open.members.push(i);
        if (open.members.length >= size) {
          flush(open, t, "size");
          open = null;
        }
      });
      if (open) flush(open, open.opened + wait, "time");
    } else {
      order.forEach((t, i) => (flushedAt[i] = t));
    }
    // Slots: FIFO in arrival order (flush times never decrease along `order`).
    const free = heap();
    const slots = Number.isFinite(cap) ? Math.max(1, Math.floor(cap)) : order.length;
    for (let k = 0; k < slots; k++) free.push(-Infinity);
    const requests = [];
    let prevStart = -Infinity;
    order.forEach((t, k) => {
      const start = Math.max(flushedAt[k], free.pop(), prevStart);
      const service = services.length ? services[k % services.length] : 0;
      const end = start + service;
      free.push(end);
      prevStart = start;
      requests.push({ arrival: t, flushed: flushedAt[k], start, end });
    });
    const inflight = steps(requests.map((r) => [r.start, r.end]));
    const byReason = { size: 0, time: 0 };
    for (const w of windows) byReason[w.reason] += 1;
    const latency = requests.map((r) => r.end - r.arrival);
    const queue = requests.map((r) => r.start - r.arrival);
    const inWindow = requests.map((r) => r.flushed - r.arrival);
    const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
    return {
      windows,
      requests,
      inflight,
      byReason,
      flushed: windows.length,
      meanWindowSize: windows.length ? order.length / windows.length : null,
      maxInFlight: Math.max(0, ...inflight.map((p) => p[1])),
      firstStart: requests.length ? Math.min(...requests.map((r) => r.start)) : null,
      lastEnd: requests.length ? Math.max(...requests.map((r) => r.end)) : null,
      latencyP50: percentile(latency, 50),
      latencyP99: percentile(latency, 99),
      queueP50: percentile(queue, 50),
      queueP99: percentile(queue, 99),
      meanInWindow: mean(inWindow),
    };
  }

  /** State at time t (ms): requests in the open window, waiting for a slot, in flight, done. */
  function stateAt(result, t) {
    let open = 0;
    let waiting = 0;
    let running = 0;
    let done = 0;
    for (const r of result.requests) {
      if (r.arrival > t) continue;
      if (t < r.flushed) open += 1;
      else if (t < r.start) waiting += 1;
      else if (t < r.end) running += 1;
      else done += 1;
    }
    return { open, waiting, running, done };
  }

  window.WindowSim = { simulate, stateAt, percentile, steps, roundHalfEven };
})();
