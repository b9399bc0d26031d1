// Throws from a timer callback, outside any promise the harness awaits.
export default {
  name: "timer-throws",
  async clip() {
    setTimeout(() => { throw new Error("thrown from a timer"); }, 0);
    await new Promise((r) => setTimeout(r, 50));
    return 0;
  },
};
