import { subject } from "./_attempt.js";
export default subject("imports-dynamic-package", () => import("clip-parity/harness/gradients/reference.ts"));
