/**
 * The judge thread (client.ts starts one per cell worker): answers `prepare` and `judge` calls on its
 * private port with prepareCell / judgeCell, reading each cell's store through the ticket the worker
 * offered. It imports no subject module, so no subject code ever runs in this realm.
 */
import { workerData, type MessagePort } from "node:worker_threads";
import { Backend } from "../backend/backend.ts";
import { worldSize, validateLayout } from "../layout/layout.ts";
import { judgeCell, prepareCell } from "./judge.ts";
import { judgeStates } from "./states.ts";
import type { JudgeAnswer, JudgeCall } from "./client.ts";

const port = (workerData as { port: MessagePort }).port;

function answer(call: JudgeCall): JudgeAnswer {
  try {
    if (call.kind === "prepare") return { id: call.id, ok: true, value: prepareCell(call.input) };
    const world = call.kind === "states" ? call.req.ranks : worldSize(validateLayout(call.req.cell.layout));
    const backend = new Backend(call.req.backend, world, { sharedTicket: call.ticket });
    try {
      return { id: call.id, ok: true, value: call.kind === "states" ? judgeStates(call.req, backend) : judgeCell(call.req, backend) };
    } finally {
      // what the judge allocated itself (a --dump's reference tensors); the cell's gradients are the worker's to free
      backend.freeAll();
    }
  } catch (err) {
    const e = err as Error & { code?: unknown; exitCode?: unknown };
    return {
      id: call.id,
      ok: false,
      error: {
        name: e?.name ?? "Error",
        message: e?.message ?? String(err),
        code: typeof e?.code === "string" ? e.code : null,
        exitCode: typeof e?.exitCode === "number" ? e.exitCode : null,
      },
    };
  }
}

port.on("message", (call: JudgeCall) => port.postMessage(answer(call)));
