// The first module of the child process that runs the pool under a supervisor (supervisor.ts): Node 20
// cannot import .ts on its own, so tsx is registered here (each worker registers the subject-module hooks
// itself: worker-entry.mjs).
import { register } from "tsx/esm/api";

register();
const { serveJobs } = await import("./supervisor.ts");
serveJobs();
