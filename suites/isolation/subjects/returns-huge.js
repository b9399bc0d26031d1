// Returns a 10-million-element array instead of a norm: the cell fails with a line saying so, and
// the results and reports are still written (not 10 million numbers in a message).
export default {
  name: "returns-huge",
  async clip() {
    return new Array(10_000_000).fill(1.5);
  },
};
