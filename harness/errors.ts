/**
 * Errors with stable codes (like vitest's `ERR_*` codes), so callers and the CLI can tell bad input from
 * a failing check without parsing messages. `exitCode` 2 = bad input (the default).
 */
export class ClipParityError extends Error {
  readonly code: string;
  readonly exitCode: number;
  constructor(code: string, message: string, exitCode = 2) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.exitCode = exitCode;
  }
}

/** An invalid parallel layout or mesh request (SPEC §3). Code "E_LAYOUT". */
export class LayoutError extends ClipParityError {
  constructor(message: string, exitCode = 2) {
    super("E_LAYOUT", message, exitCode);
  }
}

/** An unknown model or an inconsistent manifest / sharding plan (SPEC §4). Code "E_MODEL". */
export class ModelError extends ClipParityError {
  constructor(message: string, exitCode = 2) {
    super("E_MODEL", message, exitCode);
  }
}

/** A generic bad flag, value or file. Code "E_INPUT". */
export class InputError extends ClipParityError {
  constructor(message: string, exitCode = 2) {
    super("E_INPUT", message, exitCode);
  }
}
