/**
 * TorchOptions: defaults from code, CLIP_PARITY_TORCH_* only as overrides parsed in one place with errors
 * that name the variable and the value; isCI as the one CI rule (CI=1 must not skip the torch suites).
 */
import { describe, expect, it } from "vitest";
import { DEFAULT_TORCH_OPTIONS, torchOptionsFromEnv } from "../../harness/external/torch/options.ts";
import { isCI } from "../../harness/util/env.ts";
import { InputError } from "../../harness/errors.ts";
import { torchRequired } from "./torch-available.ts";

describe("TorchOptions from the environment", () => {
  it("are the code's defaults when nothing is set (empty values count as unset)", () => {
    expect(torchOptionsFromEnv({})).toEqual(DEFAULT_TORCH_OPTIONS);
    expect(torchOptionsFromEnv({ CLIP_PARITY_TORCH_TIMEOUT_S: "", CLIP_PARITY_TORCH_FOREACH: "" })).toEqual(DEFAULT_TORCH_OPTIONS);
  });

  it("take every override", () => {
    const o = torchOptionsFromEnv({
      CLIP_PARITY_TORCH_PYTHON: "/opt/py/bin/python",
      CLIP_PARITY_TORCH_TIMEOUT_S: "20",
      CLIP_PARITY_TORCH_COLLECTIVE_TIMEOUT_S: "4",
      CLIP_PARITY_TORCH_START_TIMEOUT_S: "7.5",
      CLIP_PARITY_TORCH_TOLERANCE: "bf16",
      CLIP_PARITY_TORCH_FOREACH: "false",
      CLIP_PARITY_TORCH_DEVICE: "cpu",
      CLIP_PARITY_TORCH_VERBOSE: "1",
      CLIP_PARITY_TORCH_KEEP: "true",
    });
    expect(o).toEqual({ python: "/opt/py/bin/python", cellTimeoutS: 20, collectiveTimeoutS: 4, startTimeoutS: 7.5, tolerance: "bf16", foreach: false, device: "cpu", verbose: true, keep: true });
  });

  it("refuse a bad value, naming the variable and the value", () => {
    const bad: [string, string, RegExp][] = [
      ["CLIP_PARITY_TORCH_TIMEOUT_S", "soon", /CLIP_PARITY_TORCH_TIMEOUT_S: "soon" is not a positive number of seconds/],
      ["CLIP_PARITY_TORCH_START_TIMEOUT_S", "-3", /CLIP_PARITY_TORCH_START_TIMEOUT_S: "-3"/],
      ["CLIP_PARITY_TORCH_COLLECTIVE_TIMEOUT_S", "0", /CLIP_PARITY_TORCH_COLLECTIVE_TIMEOUT_S: "0" is not a positive number of seconds/],
      ["CLIP_PARITY_TORCH_TOLERANCE", "fp16", /CLIP_PARITY_TORCH_TOLERANCE: "fp16" is not exact, fp32, fp32-accum, bf16 or auto/],
      ["CLIP_PARITY_TORCH_FOREACH", "maybe", /CLIP_PARITY_TORCH_FOREACH: "maybe" is not one of/],
      ["CLIP_PARITY_TORCH_DEVICE", "cuda", /CLIP_PARITY_TORCH_DEVICE: "cuda" is not cpu or auto/],
      ["CLIP_PARITY_TORCH_KEEP", "2", /CLIP_PARITY_TORCH_KEEP: "2"/],
    ];
    for (const [name, value, msg] of bad) {
      expect(() => torchOptionsFromEnv({ [name]: value }), name).toThrow(InputError);
      expect(() => torchOptionsFromEnv({ [name]: value }), name).toThrow(msg);
    }
  });

  it("refuse a misspelt variable instead of ignoring it, and leave other programs' variables alone", () => {
    expect(() => torchOptionsFromEnv({ CLIP_PARITY_TORCH_TIMEOUT: "20" })).toThrow(/CLIP_PARITY_TORCH_TIMEOUT: not a clip-parity setting \(known: .*CLIP_PARITY_TORCH_TIMEOUT_S/);
    expect(torchOptionsFromEnv({ CLIP_PARITY_TORCH_SPEC: "torch==2.15.0", CLIP_PARITY_TORCH_PG_TIMEOUT_S: "9" })).toEqual(DEFAULT_TORCH_OPTIONS);
  });
});

describe("isCI", () => {
  it("is CI set to anything but empty, 0 or false", () => {
    for (const v of ["true", "1", "yes", "TRUE", "buildkite"]) expect(isCI({ CI: v }), v).toBe(true);
    for (const v of [undefined, "", "0", "false", "False"]) expect(isCI({ CI: v }), String(v)).toBe(false);
  });

  it("makes torch required under CI=1 as under CI=true once setup:torch ran (CI=1 used to skip the suites)", () => {
    expect(torchRequired({ CI: "1" }, true)).toBe(true);
    expect(torchRequired({ CI: "true" }, true)).toBe(true);
    expect(torchRequired({ CI: "1" }, false)).toBe(false);
    expect(torchRequired({ CI: "0" }, true)).toBe(false);
    expect(torchRequired({ CLIP_PARITY_REQUIRE_TORCH: "1" }, false)).toBe(true);
  });
});
