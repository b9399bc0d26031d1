// The judge thread's first module: Node 20 cannot import .ts on its own, and a worker thread does not
// inherit the loader hooks of the thread that started it. No subject-module hooks here: the judge never
// loads a subject.
import { register } from "tsx/esm/api";

register();
await import("./judge-worker.ts");
