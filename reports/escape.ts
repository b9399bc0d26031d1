/**
 * Text from a result file (cell ids, subject names, check messages) is written by whoever made the file,
 * subject code included, so every output treats it as text, never as markup or terminal commands:
 *   - control characters become visible escapes (\x1b, \x00; harness/util/controls.ts), so that a
 *     message cannot clear a terminal, move its cursor, retitle it, or hide text behind a bidi override;
 *   - Markdown escapes every character that could open markup or end a table cell.
 * HTML has its own escaping (html.ts), XML its own (junit.ts).
 */
import { escapeControls, terminalText } from "../harness/util/controls.ts";

export { escapeControls, terminalText };

/**
 * Characters that open or close Markdown markup (code, emphasis, links, HTML, tables, strikethrough,
 * entities, GitHub's math), escaped with a backslash: CommonMark shows any escaped ASCII punctuation as
 * itself, so the text renders unchanged.
 */
const MD_MARKUP = /[\\`*_[\]<>|~&$]/g;

/** Inline Markdown text on one line (a heading, a list item, a table cell): shows exactly `text`. */
export function mdText(text: string): string {
  return escapeControls(text).replace(MD_MARKUP, (ch) => `\\${ch}`);
}

/** A Markdown table cell: `mdText` per line, lines joined by <br> so that the row stays one line. */
export function mdCell(text: string): string {
  return text.split(/\r?\n/).map(mdText).join("<br>");
}

/**
 * A code span (ids read best in monospace): everything inside is literal but backticks, so the fence is
 * one backtick longer than any run in the text. In a table a pipe still ends the cell unless escaped,
 * and a backslash before it would escape the escape: such text is written as `mdText` instead.
 */
export function mdCode(text: string, options: { table?: boolean } = {}): string {
  const body = escapeControls(text);
  if (options.table && body.includes("\\|")) return mdText(text);
  const cell = options.table ? body.replace(/\|/g, "\\|") : body;
  const longest = Math.max(0, ...(cell.match(/`+/g) ?? []).map((run) => run.length));
  const ticks = "`".repeat(longest + 1);
  const pad = cell.startsWith("`") || cell.endsWith("`") ? " " : "";
  return `${ticks}${pad}${cell}${pad}${ticks}`;
}

/** A fenced block that no line of `text` can close early; newlines and tabs kept, other controls escaped. */
export function mdFence(text: string, info = ""): string {
  const body = terminalText(text);
  let ticks = "```";
  while (body.includes(ticks)) ticks += "`";
  return `${ticks}${info}\n${body}\n${ticks}`;
}
