// A cell worker's first module: Node 20 cannot import .ts on its own, and a worker thread does not
// inherit the loader hooks of the thread that started it, so tsx is registered here too.
import { register } from "tsx/esm/api";

register();
await import("./worker.ts");
