/** How a check's message and a byte count are shown, by reports and by the gate's verdict alike. */

/** A check's message without the trailing "reproduce: ..." line the runner appends (shown apart). */
export function messageBody(message: string): string {
  return message.replace(/\n\s*reproduce: .*$/s, "");
}

export function firstLine(message: string): string {
  return messageBody(message).split("\n")[0] ?? "";
}

export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  const sign = n < 0 ? "-" : "";
  let x = Math.abs(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (x >= 1024 && u < units.length - 1) {
    x /= 1024;
    u++;
  }
  return `${sign}${u === 0 ? x : x.toFixed(x >= 100 ? 0 : x >= 10 ? 1 : 2)} ${units[u]}`;
}
