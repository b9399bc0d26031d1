/**
 * Nothing injected (issue 21): cell ids, subject names and check messages from a result file are text,
 * never markup. Markdown (the report and the gate's summary) escapes what would open markup or break a
 * table row, HTML escapes what would open a tag, and control characters are shown as \xNN escapes on
 * the terminal, in Markdown and in HTML, so that a message cannot move a terminal's cursor or hide text.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { escapeControls, mdCell, mdCode, mdText, terminalText } from "../../reports/escape.ts";
import { renderMarkdown } from "../../reports/markdown.ts";
import { renderHtml } from "../../reports/html.ts";
import { summarizeJson, type CellJson } from "../../harness/results/schema.ts";
import { cli, synthCell, synthFile, tempDir } from "./fixtures.ts";

const SUBJECT = "x|<script>alert(1)</script>`*_[a](b)\u0000\u001b[31m~$\\";
const ID = `${SUBJECT}/dp_shard2/llama3-debug\nrow|break\r\u202e`;
const MESSAGE = "boom\u0000\u001b[2J<img src=x onerror=alert(1)>\n```\r\n| a | b |\u009b31m\u007f\n  reproduce: npx clip-parity cell --subject x";

/** Control characters a terminal or a renderer may act on (newline and tab aside). */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

function hostile(status: "pass" | "fail"): CellJson {
  return synthCell("evil/dp_shard2/x", {
    id: ID,
    subject: SUBJECT,
    checks: [
      { id: "parity.norm", status, message: status === "fail" ? MESSAGE : "" },
      { id: "check|<b>", status: "pass", message: "" },
    ],
    repro: "npx clip-parity cell --subject 'x|<script>'\u0000",
  });
}

/** The cells of a Markdown table row, split on the pipes that no backslash escapes. */
function rowCells(row: string): number {
  let n = 0;
  for (let i = 0; i < row.length; i++) {
    if (row[i] === "\\") i++;
    else if (row[i] === "|") n++;
  }
  return n - 1;
}

/** Markdown outside fenced code blocks and code spans (inside them everything is literal text). */
function outsideCode(md: string): string {
  return md.replace(/^(`{3,})[^\n]*\n[\s\S]*?\n\1$/gm, "").replace(/(?<!`)(`+)(?!`)[\s\S]*?(?<!`)\1(?!`)/g, "");
}

/** Undoes CommonMark backslash escapes: what a renderer shows for `mdText`'s output. */
function shown(md: string): string {
  return md.replace(/\\([!-/:-@[-`{-~])/g, "$1");
}

describe("escape helpers", () => {
  it("shows control characters as escapes, keeping the ones asked for", () => {
    expect(escapeControls("a\u0000b\u001b[2Jc\u007fd\u009be\tf\ng\u202eh")).toBe("a\\x00b\\x1b[2Jc\\x7fd\\x9be\\tf\\ng\\u202eh");
    expect(escapeControls("a\tb\nc\rd", "\n\t")).toBe("a\tb\nc\\rd");
    expect(terminalText("FAIL x\u001b]0;owned\u0007\r\n  next\u0000")).toBe("FAIL x\\x1b]0;owned\\x07\n  next\\x00");
    expect(terminalText("plain text, unchanged: |<>*_")).toBe("plain text, unchanged: |<>*_");
  });

  it("mdText: what a renderer shows is the text (controls escaped), with nothing that opens markup (property)", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 40 }), (s) => {
        const md = mdText(s);
        expect(shown(md)).toBe(escapeControls(s));
        expect(md).not.toMatch(CONTROL);
        expect(md).not.toMatch(/[\n\r]/);
        // every markup character is escaped by a backslash
        expect(md.replace(/\\[\s\S]/g, "")).not.toMatch(/[\\`*_[\]<>|~&$]/);
      }),
    );
    expect(mdText("x|<script>")).toBe("x\\|\\<script\\>");
  });

  it("mdCell keeps a row in one line; mdCode fences any backtick run and escapes pipes in tables", () => {
    expect(mdCell("a|b\nc")).toBe("a\\|b<br>c");
    expect(mdCode("a`b")).toBe("``a`b``");
    expect(mdCode("`a")).toBe("`` `a ``");
    expect(mdCode("a|b", { table: true })).toBe("`a\\|b`");
    expect(mdCode("a\u0000\nb")).toBe("`a\\x00\\nb`");
    expect(rowCells(`| ${mdCode("a\\|b|", { table: true })} | x |`)).toBe(2);
  });
});

describe("Markdown report", () => {
  const cells = [hostile("fail"), hostile("pass")];
  const md = renderMarkdown(cells, summarizeJson(cells), { title: "t<b>i|tle", matrix: "m*x", notes: ["DRIFT x|<i>\u001b[0m"] });

  it("has no control character anywhere and no HTML outside code blocks but its own <br> and the <details> fold", () => {
    expect(md).not.toMatch(CONTROL);
    const own = /<br>|<details><summary>|<\/summary>|<\/details>/g;
    expect(outsideCode(md).replace(own, "")).not.toMatch(/(?<!\\)</);
    expect(md.match(/<details>/g)).toHaveLength(1);
  });

  it("keeps every table row as wide as its own table's header", () => {
    const unfenced = md.replace(/^(`{3,})[^\n]*\n[\s\S]*?\n\1$/gm, "");
    const tables = unfenced.split("\n\n").map((block) => block.split("\n")).filter((rows) => rows[0]!.startsWith("|"));
    expect(tables.length).toBe(2); // the grid, the failure groups
    for (const rows of tables) {
      expect(rows.length).toBeGreaterThanOrEqual(3);
      for (const row of rows) expect(rowCells(row), row).toBe(rowCells(rows[0]));
      expect(rows[2].startsWith(`| ${mdText(SUBJECT)} |`)).toBe(true);
    }
  });

  it("keeps a hostile cell id in its heading's line and shows the message as literal text", () => {
    const heading = md.split("\n").find((l) => l.startsWith("#### "))!;
    expect(heading).toBe(`#### ${mdCode(ID)}`);
    expect(md).toContain("## t\\<b\\>i\\|tle: matrix m\\*x");
    expect(md).toContain("boom\\x00\\x1b[2J<img src=x onerror=alert(1)>\n```\n| a | b |\\x9b31m\\x7f\n```"); // inside a longer fence
    expect(md).toContain("- **parity.norm**");
  });
});

describe("gate summary", () => {
  it("escapes the cell id, check id and message in its table, on stdout and in --md", async () => {
    const dir = tempDir();
    const base = join(dir, "base.json");
    const now = join(dir, "now.json");
    const md = join(dir, "gate.md");
    const pass = hostile("pass");
    const fail = { ...pass, checks: pass.checks.map((x) => ({ ...x, status: "fail" as const, message: MESSAGE })) };
    writeFileSync(base, JSON.stringify(synthFile([pass])));
    writeFileSync(now, JSON.stringify(synthFile([fail])));
    const r = await cli(["gate", "--baseline", base, "--results", now, "--md", md]);
    expect(r.code).toBe(1);
    expect(r.stdout).not.toMatch(CONTROL);
    const rows = r.stdout.split("\n").filter((l) => l.startsWith("|"));
    expect(rows).toHaveLength(4);
    for (const row of rows) expect(rowCells(row), row).toBe(4);
    expect(outsideCode(r.stdout).replace(/<br>/g, "")).not.toMatch(/(?<!\\)</);
    expect(rows[3]).toContain(`| ${mdText("check|<b>")} |`);
  });
});

describe("terminal output of commands", () => {
  it("merge names a hostile cell id with its control characters escaped", async () => {
    const dir = tempDir();
    const a = join(dir, "a.json");
    const b = join(dir, "b.json");
    writeFileSync(a, JSON.stringify(synthFile([hostile("pass"), synthCell("reference/tp2/y")])));
    writeFileSync(b, JSON.stringify(synthFile([{ ...hostile("pass"), totalNorm: 1 }])));
    const r = await cli(["merge", "--out", join(dir, "m.json"), a, b]);
    expect(r.code).toBe(2);
    expect(r.stderr).not.toMatch(CONTROL);
    expect(r.stderr).toContain(`merge: cell ${escapeControls(ID)} is in ${a} and in ${b}`);
  });

  it("a result file that repeats a hostile cell with different content is named escaped", async () => {
    const dir = tempDir();
    const a = join(dir, "a.json");
    writeFileSync(a, JSON.stringify(synthFile([hostile("pass"), { ...hostile("pass"), totalNorm: 1 }])));
    const r = await cli(["report", "--results", a, "--out", join(dir, "out")]);
    expect(r.code).toBe(2);
    expect(r.stderr).not.toMatch(CONTROL);
    expect(r.stderr).toContain(`cell ${escapeControls(ID)} appears twice`);
  });
});

describe("HTML report", () => {
  it("escapes hostile text: no tag, script or control character but its own", () => {
    const cells = [hostile("fail"), hostile("pass")];
    const html = renderHtml(cells, summarizeJson(cells), { title: "<script>alert(1)</script>", notes: ["<img src=x>"] });
    expect(html.match(/<script\b/g)).toHaveLength(2); // the embedded JSON and the page's own script
    expect(html).not.toMatch(/<img\b|<b>|<\/script>\s*<script>alert/);
    expect(html).not.toMatch(CONTROL);
    const json = /<script type="application\/json" id="cells-data">([\s\S]*?)<\/script>/.exec(html)![1];
    expect(JSON.parse(json)[0].id).toBe(ID); // the data itself is intact
  });
});
