// A cell worker's first module: Node 20 cannot import .ts on its own, and a worker thread does not
// inherit the loader hooks of the thread that started it, so tsx and the subject-module hooks
// (harness/subject/loader-hooks.mjs) are registered here too.
import { register } from "tsx/esm/api";
import { register as registerHooks } from "node:module";

register();
registerHooks("../subject/loader-hooks.mjs", import.meta.url);
await import("./worker.ts");
