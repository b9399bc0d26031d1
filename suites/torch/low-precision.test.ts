/**
 * harness/checks/low-precision.ts against PyTorch itself: toF16 is torch's float32 -> float16 rounding, and
 * clipCoefficientIn is the coefficient clip_grads_with_norm_ computes from a bfloat16 or float16 norm, and
 * roundedCoefficients holds the one FSDP1's clip_grad_norm_ computes from its float32 norm (returned rounded to
 * the dtype), over norms and max_norms across the ranges the cells produce.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { toBf16 } from "../../harness/numerics/numerics.ts";
import { clipCoefficientIn, roundedCoefficients, toF16 } from "../../harness/checks/low-precision.ts";
import { torchOptionsFromEnv } from "../../harness/external/torch/options.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();

const PY = `
import json, sys, torch
cases = json.loads(sys.stdin.read())
out = []
for dtype, norm, max_norm, x in cases:
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    t = torch.tensor(norm, dtype=torch.float32).to(dt)
    coef = torch.clamp(max_norm / (t + 1e-6), max=1.0)  # clip_grads_with_norm_ on a norm of that dtype
    n32 = torch.tensor(norm, dtype=torch.float32)  # FSDP1: the float32 coefficient of its float32 norm, cast to the dtype
    fsdp1 = torch.clamp(max_norm / (n32 + 1e-6), max=1.0).to(dt)
    out.append([t.item(), coef.item(), repr(torch.tensor(x, dtype=torch.float32).to(torch.float16).item()), fsdp1.item()])
print(json.dumps(out))  # float16 overflow as the string "inf"
`;

describe(`low-precision clip coefficients agree with PyTorch${torch.skipNote}`, () => {
  it.runIf(torch.run)("toF16, clipCoefficientIn and roundedCoefficients, 4,000 cases", () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const cases: ["bf16" | "f16", number, number, number][] = [];
    for (let i = 0; i < 4000; i++) {
      const dtype = i % 2 ? "bf16" : "f16";
      const norm = Math.fround(10 ** (rnd() * 8 - 4));
      const maxNorm = [1, 0.5, 0.25, 3, 0.1, 7.3][i % 6]!;
      const x = Math.fround((rnd() - 0.5) * 10 ** (rnd() * 12 - 8)); // across float16's subnormal, normal and overflow ranges
      cases.push([dtype, norm, maxNorm, x]);
    }
    cases.push(["f16", 65504, 1, 65519.99], ["f16", 1, 1, 65520], ["f16", 1, 1, 2 ** -25], ["f16", 1, 1, 3 * 2 ** -26]);
    const got = JSON.parse(execFileSync(torchOptionsFromEnv().python, ["-c", PY], { input: JSON.stringify(cases), encoding: "utf8", maxBuffer: 64 << 20 })) as [number, number, string, number][];
    let bad = 0;
    let missed = 0;
    for (const [k, [dtype, norm, maxNorm, x]] of cases.entries()) {
      const [normInDtype, coef, f16Text, fsdp1] = got[k]!;
      const f16 = f16Text === "inf" ? Infinity : f16Text === "-inf" ? -Infinity : Number(f16Text);
      const round = dtype === "bf16" ? toBf16 : toF16;
      expect(round(norm), `${dtype} ${norm}`).toBe(normInDtype);
      if (clipCoefficientIn(dtype, maxNorm, normInDtype) !== coef) bad++;
      if (!roundedCoefficients(dtype, maxNorm, normInDtype).includes(fsdp1)) missed++;
      expect(Object.is(toF16(x), f16) || toF16(x) === f16, `toF16(${x})`).toBe(true);
    }
    expect(bad).toBe(0);
    expect(missed).toBe(0);
  });
});
