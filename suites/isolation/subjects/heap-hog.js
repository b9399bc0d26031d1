// Fills its JavaScript heap until the worker's limit.
export default {
  name: "heap-hog",
  async clip() {
    const keep = [];
    for (;;) keep.push(new Array(1 << 20).fill(keep.length));
  },
};
