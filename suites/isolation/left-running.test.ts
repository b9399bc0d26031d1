/**
 * The worker's count of what a subject left running (harness/sandbox/left-running.ts): an immediate queued behind
 * the worker's own in the same batch is not a leftover (it runs within the job; counted inside the batch it was
 * the false "left 1 Immediate running" seen once in the cpu matrix), while a chain of immediates that keeps
 * rescheduling itself, and a timer, are.
 */
import { describe, expect, it } from "vitest";
import { handles, leftRunning } from "../../harness/sandbox/left-running.ts";

const active = () => process.getActiveResourcesInfo();

describe("left running after a job", () => {
  it("does not count an immediate queued behind the worker's own in the same batch", async () => {
    const before = handles(active);
    queueMicrotask(() => setImmediate(() => {})); // queued after the worker's first hop, in its batch
    expect(await leftRunning(before, setImmediate, active)).toEqual([]);
  });

  it("counts a chain of immediates that keeps running, and a timer", async () => {
    const before = handles(active);
    let stop = false;
    const chain = () => {
      if (!stop) setImmediate(chain);
    };
    setImmediate(chain);
    const timer = setTimeout(() => {}, 60_000);
    try {
      expect(await leftRunning(before, setImmediate, active)).toEqual(expect.arrayContaining(["1 Immediate", "1 Timeout"]));
    } finally {
      stop = true;
      clearTimeout(timer);
    }
  });
});
