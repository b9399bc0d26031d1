import { mkdtempSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { subject } from "./_attempt.js";
export default subject("imports-dynamic-symlink", () => {
  const link = join(mkdtempSync(join(tmpdir(), "cp-link-")), "reference.ts");
  symlinkSync(fileURLToPath(new URL("../../../../harness/gradients/reference.ts", import.meta.url)), link);
  return import(pathToFileURL(link).href);
});
