// Issue 57: one way of reaching the judge's code from a subject's clip (after load). A refusal is rethrown as
// the cell's error, so the test reads the guard's own words; a form that got through says so instead.
export function subject(name, attempt) {
  return {
    name,
    async clip() {
      const got = await attempt();
      throw new Error(`${name}: the judge's code was imported (${Object.keys(got).slice(0, 3).join(", ")})`);
    },
  };
}
