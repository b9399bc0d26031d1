/**
 * Issue 57: a write through a dangling symlink (harness/util/fs.ts). The rule writeTarget states: "a symlink is
 * followed to its end (a dangling one to the file it names), so that the link stays a link and its target is
 * replaced atomically". suites/cli.test.ts writes through a link whose target exists; no test wrote through one
 * whose target does not. Here: the link stays a link, the file it names is created (its folder too), atomically
 * (no temporary file left beside either), through chains of links, relative or absolute; and the checks made
 * before any work (assertWritableFile) take a dangling link for a file still to be written.
 *
 * Kept weakenings (suites/weakenings): fs-dangling-link-replaced.patch (a dangling link written over, as a new file
 * at the link's path) fails "a relative dangling link: the link stays, the file it names is created";
 * fs-writable-check-link-end.patch (the check before any work looks at the link's own folder, as it did before
 * this issue) fails "the checks before any work refuse a dangling link whose file cannot be created".
 */
import { afterAll, describe, expect, it } from "vitest";
import { lstatSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { assertWritableFile, writeFileAtomic, writeOutputFile } from "../../harness/util/fs.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), "cp-dangling-"));
  dirs.push(d);
  return d;
}
/** Every entry under `dir`, recursively, as relative paths (links not followed). */
function tree(dir: string, prefix = ""): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const rel = prefix + e.name;
    return e.isDirectory() ? [`${rel}/`, ...tree(join(dir, e.name), `${rel}/`)] : [rel];
  }).sort();
}

describe("a write through a dangling symlink", () => {
  it("a relative dangling link: the link stays, the file it names is created (its folder too), nothing else left", () => {
    const d = tmp();
    symlinkSync("out/result.json", join(d, "link.json"));
    expect(() => statSync(join(d, "link.json"))).toThrow(/ENOENT/); // dangling
    writeFileAtomic(join(d, "link.json"), '{"ok":true}\n');
    expect(lstatSync(join(d, "link.json")).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(d, "link.json"))).toBe("out/result.json");
    expect(readFileSync(join(d, "out", "result.json"), "utf8")).toBe('{"ok":true}\n');
    expect(lstatSync(join(d, "out", "result.json")).isFile()).toBe(true);
    expect(tree(d)).toEqual(["link.json", "out/", "out/result.json"]); // no temporary file beside the link or the target
    // written again: the target is replaced, the link still a link
    writeFileAtomic(join(d, "link.json"), "2\n");
    expect(readFileSync(join(d, "out", "result.json"), "utf8")).toBe("2\n");
    expect(lstatSync(join(d, "link.json")).isSymbolicLink()).toBe(true);
  });

  it("a chain of links ending in nothing: every link stays, the last one's target is written", () => {
    const d = tmp();
    const other = tmp();
    symlinkSync(join(other, "final.txt"), join(d, "b")); // absolute, into another folder
    symlinkSync("b", join(d, "a"));
    writeOutputFile(join(d, "a"), "hello\n");
    expect(readFileSync(join(other, "final.txt"), "utf8")).toBe("hello\n");
    expect(lstatSync(join(d, "a")).isSymbolicLink() && lstatSync(join(d, "b")).isSymbolicLink()).toBe(true);
    expect(tree(d)).toEqual(["a", "b"]);
    expect(tree(other)).toEqual(["final.txt"]);
  });

  it("the file created through the link gets the mode asked for (a script a user runs)", () => {
    const d = tmp();
    symlinkSync("repro.py", join(d, "link.py"));
    writeFileAtomic(join(d, "link.py"), "print(1)\n", 0o755);
    expect(statSync(join(d, "repro.py")).mode & 0o100).toBe(0o100);
  });

  it("the checks before any work take a dangling link for a file still to be written", () => {
    const d = tmp();
    symlinkSync("out/result.json", join(d, "link.json"));
    expect(() => assertWritableFile(join(d, "link.json"), "--json")).not.toThrow();
  });

  it("the checks before any work refuse a dangling link whose file cannot be created (a file where its folder would be)", () => {
    // seen on 4a1331f: assertWritableFile checked the link's own folder, so the run went ahead and its write failed at the end
    const d = tmp();
    writeFileSync(join(d, "plain"), "");
    symlinkSync("plain/result.json", join(d, "link.json"));
    expect(() => assertWritableFile(join(d, "link.json"), "--json")).toThrow(`--json: ${join(d, "link.json")} cannot be written: ${join(d, "plain")} is a file, not a directory`);
    expect(() => writeFileAtomic(join(d, "link.json"), "x")).toThrow(/link\.json: could not write it \(E[A-Z]+: .*\); it is left as it was$/); // found only at the end of the work
  });

  it("a loop of links is refused in words, not followed forever", () => {
    const d = tmp();
    symlinkSync("b", join(d, "a"));
    symlinkSync("a", join(d, "b"));
    expect(() => writeFileAtomic(join(d, "a"), "x")).toThrow(/too many levels of symbolic links/);
    expect(() => assertWritableFile(join(d, "a"), "--json")).toThrow(/too many levels of symbolic links/);
    expect(tree(d)).toEqual(["a", "b"]);
  });
});
