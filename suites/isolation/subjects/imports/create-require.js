import { createRequire } from "node:module";
import { subject } from "./_attempt.js";
export default subject("imports-require", async () => createRequire(import.meta.url)("../../../../harness/gradients/reference.ts"));
