/**
 * The harness-adapter protocol (harness/external/torch/protocol.ts): one version number on both sides, jobs
 * validated before they are written, results validated when read, and an adapter that refuses a job of
 * another version with an error saying so.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ADAPTER, DEFAULT_TORCH_OPTIONS, torchOptionsFromEnv } from "../../harness/external/torch/options.ts";
import { checkJob, PROTOCOL_VERSION, readProtocolFile, resultSchema, type Job } from "../../harness/external/torch/protocol.ts";
import { closeTorchSessions, groupsOutOfStep, liveSessionCount, sessionFor } from "../../harness/external/torch/session.ts";
import { plainConvention } from "../../harness/external/torch/frameworks.ts";
import { judgedScratch, OS_SCRATCH_SLACK_BYTES, torchReach } from "../../harness/external/torch/subject.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();

afterAll(async () => {
  await closeTorchSessions();
});

const job = (): Job => ({
  protocol: PROTOCOL_VERSION,
  kind: "clip",
  subject: "torch:torch.nn.utils:clip_grad_norm_",
  rank: 0,
  world: 1,
  layout: { pp: 1, dp_replicate: 1, dp_shard: 1, cp: 1, tp: 1, ep: 1 },
  dtype: "f32",
  maxNorm: 1,
  normType: 2,
  errorIfNonfinite: false,
  foreach: null,
  collectiveTimeoutS: 10,
  convention: plainConvention("torch.nn.utils:clip_grad_norm_"),
  grads: "/x/in-0.safetensors",
  result: "/x/result-0.json",
  params: [],
});

describe("protocol", () => {
  it("adapter.py speaks the version protocol.ts defines", () => {
    const m = /^PROTOCOL_VERSION = (\d+)$/m.exec(readFileSync(ADAPTER, "utf8"));
    expect(m, "adapter.py defines PROTOCOL_VERSION").not.toBeNull();
    expect(Number(m![1])).toBe(PROTOCOL_VERSION);
  });

  it("a job that does not follow the schema is a harness bug, caught before it is written", () => {
    expect(checkJob(job())).toMatchObject({ kind: "clip" });
    expect(() => checkJob({ ...job(), maxNorm: -1 } as Job)).toThrow(/maxNorm/);
    expect(() => checkJob({ ...job(), layout: { pp: 1 } } as unknown as Job)).toThrow(/layout/);
    expect(() => checkJob({ ...job(), protocol: PROTOCOL_VERSION + 1 } as unknown as Job)).toThrow(/protocol/);
  });

  it("a result of another version, or malformed, is refused with the file and what differs", () => {
    const dir = process.env.TMPDIR ?? "/tmp";
    const path = join(dir, `clip-parity-protocol-test-${process.pid}.json`);
    writeFileSync(path, JSON.stringify({ protocol: PROTOCOL_VERSION + 1, rank: 0 }));
    expect(() => readProtocolFile(resultSchema, path)).toThrow(new RegExp(`speaks protocol ${PROTOCOL_VERSION + 1}, this harness ${PROTOCOL_VERSION}: .*different versions`));
    writeFileSync(path, JSON.stringify({ protocol: PROTOCOL_VERSION, rank: 0, norm: "big", error: null, path: null }));
    expect(() => readProtocolFile(resultSchema, path)).toThrow(new RegExp(`${path.replace(/[.]/g, "\\.")} does not follow protocol ${PROTOCOL_VERSION}: norm`));
  });
});

describe("groups in step after a cell", () => {
  const res = (rank: number, groupCalls: Record<string, number> | undefined, adapterError = false) =>
    ({ protocol: PROTOCOL_VERSION, rank, norm: 1, error: null, path: "p", groupCalls, ...(adapterError ? { adapterError } : {}) }) as const;

  it("are in step when every member of every group issued as many collectives", () => {
    expect(groupsOutOfStep([res(0, { "0,1": 2, "0,2": 1 }), res(1, { "0,1": 2 }), res(2, { "0,2": 1 })])).toBeNull();
    expect(groupsOutOfStep([res(0, {}), res(1, {})])).toBeNull();
  });

  it("are not when a member issued fewer, a group has no name, a rank failed in the adapter or wrote nothing", () => {
    expect(groupsOutOfStep([res(0, { "0,1": 2 }), res(1, { "0,1": 1 })])).toBe("group [0,1]: its ranks issued 2, 1 collectives");
    expect(groupsOutOfStep([res(0, { "0,1": 1 }), res(1, {})])).toBe("group [0,1]: its ranks issued 1, 0 collectives");
    expect(groupsOutOfStep([res(0, { "?": 1 }), res(1, { "?": 1 })])).toMatch(/could not name/);
    expect(groupsOutOfStep([res(0, {}), res(1, {}, true)])).toBe("rank 1 failed in the adapter");
    expect(groupsOutOfStep([res(0, {}), undefined])).toBe("a rank wrote no result");
  });
});

describe("what a torch cell's results tell the checks", () => {
  const res = (rank: number, groupCalls: Record<string, number>, barriers: string[] = []) =>
    ({
      protocol: PROTOCOL_VERSION,
      rank,
      norm: 1,
      error: null,
      path: "p",
      groupCalls,
      comm: { calls: 0, bytes: 0, byKind: {}, byGroup: {}, ops: barriers.map((group) => ({ op: "barrier", kind: "barrier", group, bytes: 0 })) },
    }) as const;

  it("comm.reach: ranks joined through groups that carried data, directly or through others; a barrier joins no one; an unnamed group joins all", () => {
    // 0-1 carry data, 1-2 carry data: 0 reaches 2 through 1; 3 only met the others at a barrier
    const r = torchReach([res(0, { "0,1": 1 }), res(1, { "0,1": 1, "1,2": 1 }), res(2, { "1,2": 1 }), res(3, { "0,3": 1 }, ["0,3"])], 4);
    expect(r).toEqual([[0, 1, 2], [0, 1, 2], [0, 1, 2], [3]]);
    expect(torchReach([res(0, {}), res(1, {})], 2)).toEqual([[0], [1]]);
    expect(torchReach([res(0, { "?": 1 }), undefined], 2)).toEqual([[0, 1], [0, 1]]);
    // a group that ran only barriers on one rank still carried data if another op ran on it
    expect(torchReach([res(0, { "0,1": 2 }, ["0,1"]), res(1, { "0,1": 2 }, ["0,1"])], 2)).toEqual([[0, 1], [0, 1]]);
  });

  it("memory.peak: the allocator's peak, or the operating system's count less its slack where that is larger", () => {
    expect(judgedScratch({ scratchPeakBytes: 100 })).toBe(100);
    expect(judgedScratch({ scratchPeakBytes: 100, osScratchBytes: OS_SCRATCH_SLACK_BYTES })).toBe(100);
    expect(judgedScratch({ scratchPeakBytes: 100, osScratchBytes: OS_SCRATCH_SLACK_BYTES + 5000 })).toBe(5000);
  });
});

describe(`the adapter's side of the protocol${torch.skipNote}`, () => {
  it.runIf(torch.run)("refuses a job of another version with an error naming both versions, and keeps serving", async () => {
    const options = { ...torchOptionsFromEnv(), cellTimeoutS: 60 };
    const session = await sessionFor({ world: 1, python: options.python, device: "cpu", isolation: "protocol-test" }, options);
    expect(session.info?.protocol).toBe(PROTOCOL_VERSION);
    const files = session.newJob();
    const result = files.result(0);
    // Written by hand: runJob validates its jobs and would refuse this one before the adapter sees it.
    writeFileSync(files.job(0), JSON.stringify({ ...job(), protocol: 1, result }));
    const deadline = Date.now() + 60_000;
    while (!existsSync(result) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const r = readProtocolFile(resultSchema, result);
    expect(r.adapterError).toBe(true);
    expect(r.error?.message).toMatch(new RegExp(`the job speaks protocol 1, this adapter ${PROTOCOL_VERSION}: adapters/torch/adapter\\.py and harness/external/torch/protocol\\.ts come from different versions`));
    expect(session.alive).toBe(true);
    // It still reads the next job: the quit that close() sends ends it cleanly, not a kill.
    await session.close();
    expect(session.describeExit()).toBe("exit code 0");
    expect(liveSessionCount()).toBe(0);
  }, 300_000);

  it("DEFAULT_TORCH_OPTIONS point at the project's .venv", () => {
    expect(DEFAULT_TORCH_OPTIONS.python).toMatch(/\.venv\/bin\/python$/);
  });
});
