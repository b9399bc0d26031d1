import { subject } from "./_attempt.js";
export default subject("imports-native-module", () => import("clip-parity/harness/backend/native.ts"));
