/**
 * The gradient rules of harness/gradients/specs.ts, pinned one by one: what each physical copy is filled
 * with and must hold, for tied copies (finalize) and Partial(sum) gradients. A wrong rule gives the
 * subject and the reference the same wrong gradients, so no correct subject's cell shows it; these
 * tests (and the golden comparison of the mutation suite) do.
 */
import { describe, expect, it } from "vitest";
import { gradSpecs, heldCopies, partialNames, tieCopies } from "../../harness/gradients/specs.ts";
import { getModel } from "../../harness/model/models.ts";

const DSV3 = getModel("deepseek-v3-debug");
const SP = getModel("llama3-debug-sp");
const EMB = "tok_embeddings.weight";
const MTP = "mtp.0.embed_tokens.weight";
const NORM = SP.params.find((p) => p.partialOver?.length)!;
const cfg = (regime: string, more: object = {}) => ({ dtype: "f32" as const, regime, seed: 3, step: 0, pp: 2, ...more });

describe("tied copies", () => {
  it("tieCopies lists canonical then replicas, nothing for an untied parameter; heldCopies says what one tensor holds", () => {
    expect(tieCopies(DSV3, EMB)).toEqual([EMB, MTP]);
    expect(tieCopies(DSV3, "norm.weight")).toEqual([]);
    expect(heldCopies(DSV3, 2, { fqn: "norm.weight", name: "norm.weight", canonical: true, stage: 1 })).toEqual(["norm.weight"]);
    expect(heldCopies(DSV3, 2, { fqn: MTP, name: EMB, canonical: false, stage: 1 })).toEqual([MTP]);
    expect(heldCopies(DSV3, 2, { fqn: EMB, name: EMB, canonical: true, stage: 0 })).toEqual([EMB]);
    expect(heldCopies(DSV3, 1, { fqn: EMB, name: EMB, canonical: true, stage: 0 })).toEqual([EMB, MTP]);
  });

  it("an optimizer-owned subject's copies: each its own partial in finalize; outside it the canonical copy whole and a split replica -0", () => {
    const emb = DSV3.params.find((p) => p.name === EMB)!;
    const fin = gradSpecs(DSV3, cfg("finalize", { shape: "optimizer" }));
    const replica = fin.input({ fqn: MTP, name: EMB, index: emb.index, canonical: false, stage: 1 });
    expect(replica.name).toBe(MTP);
    expect(replica.sumOf).toEqual([MTP]);
    expect(fin.input({ fqn: EMB, name: EMB, index: emb.index, canonical: true, stage: 0 }).sumOf).toEqual([EMB]);
    expect(fin.logical(emb).sumOf).toEqual([EMB, MTP]);
    const active = gradSpecs(DSV3, cfg("active", { shape: "optimizer" }));
    expect(active.input({ fqn: EMB, name: EMB, index: emb.index, canonical: true, stage: 0 })).toEqual(active.logical(emb));
    expect(active.input({ fqn: MTP, name: EMB, index: emb.index, canonical: false, stage: 1 }).mode).toBe("neg-zeros");
    // a clip-shaped subject gets the logical gradient on every copy
    expect(gradSpecs(DSV3, cfg("finalize")).input({ fqn: MTP, name: EMB, index: emb.index, canonical: false, stage: 1 })).toEqual(fin.logical(emb));
  });
});

describe("Partial(sum) gradients", () => {
  const ref = (index: number, count: number) => ({ fqn: NORM.name, name: NORM.name, index: NORM.index, canonical: true, stage: 0, partial: { index, count } });

  it("generated: the logical gradient is the sum of two partials at e - 1; slots 0 and 1 hold them, further slots -0", () => {
    const g = gradSpecs(SP, cfg("active"));
    const logical = g.logical(NORM);
    expect(logical.sumOf).toEqual(partialNames(NORM.name));
    expect(logical.exp).toBe(g.logical(SP.params.find((p) => !p.partialOver?.length)!).exp - 1);
    expect(g.held(ref(0, 2))).toMatchObject({ name: `${NORM.name}#partial0`, exp: logical.exp, mode: "gen" });
    expect(g.held(ref(1, 2))).toMatchObject({ name: `${NORM.name}#partial1`, exp: logical.exp, mode: "gen" });
    expect(g.held(ref(2, 4)).mode).toBe("neg-zeros");
    expect(g.held(ref(0, 1))).toEqual(logical); // one rank on the Partial axes holds the logical gradient
  });

  it("ones and zeros: slot 0 holds the logical gradient itself, every other slot -0", () => {
    for (const regime of ["ones", "zeros"]) {
      const g = gradSpecs(SP, cfg(regime));
      expect(g.logical(NORM).sumOf, regime).toBeUndefined();
      expect(g.held(ref(0, 2)), regime).toEqual(g.logical(NORM));
      expect(g.held(ref(1, 2)).mode, regime).toBe("neg-zeros");
    }
  });
});

describe("non-finite regimes", () => {
  it("put the special value at element 0 of the first parameter with a gradient, and nowhere else", () => {
    const g = gradSpecs(DSV3, cfg("nonfinite-nan"));
    const [first, second] = DSV3.params;
    expect(g.logical(first!)).toMatchObject({ specialIndex: 0 });
    expect(Number.isNaN(g.logical(first!).specialValue)).toBe(true);
    expect(g.logical(second!).specialIndex).toBeUndefined();
    expect(gradSpecs(DSV3, cfg("active")).logical(first!).specialIndex).toBeUndefined();
  });
});
