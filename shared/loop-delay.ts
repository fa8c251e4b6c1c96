import { monitorEventLoopDelay } from "node:perf_hooks";

/**
 * This process's event-loop delay over successive windows: `take()` answers the p99 of
 * the delays measured since the last `take()` (ms) and starts a new window. How long a
 * callback (a WebSocket frame, a JetStream message) waits before it runs: the first
 * sign that a process is short of CPU, well before its queues are seconds behind.
 */
export interface LoopDelayWindow {
  take(): number;
  stop(): void;
}

export function loopDelayWindow(resolutionMs = 10): LoopDelayWindow {
  const h = monitorEventLoopDelay({ resolution: resolutionMs });
  h.enable();
  return {
    take() {
      // the histogram is in ns and includes the sampling resolution itself
      const p99 = h.count > 0 ? Math.max(0, h.percentile(99) / 1e6 - resolutionMs) : 0;
      h.reset();
      return p99;
    },
    stop: () => h.disable(),
  };
}
