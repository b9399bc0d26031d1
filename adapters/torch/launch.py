"""Runs torchrun for one harness session and outlives neither the harness nor anything started below it.

usage: python launch.py HARNESS_PID SESSION_DIR -- TORCHRUN_ARGS...

Why it exists: torchrun puts every rank in a session of its own, and code under test may start processes of
its own (a data loader, a detached helper, a double fork). Killing torchrun's process group reaches none of
those, and a harness killed with SIGKILL kills nothing at all. This process:

- is a child subreaper (Linux prctl PR_SET_CHILD_SUBREAPER): a process started anywhere below it whose parent
  dies is re-parented here, not to init, so it is still found when the session ends;
- watches the harness: when it is gone (its parent changed), when torchrun ends, or on SIGTERM (the harness
  ending the session), it kills every process below it and reaps them;
- removes the session directory when the harness is gone (otherwise the harness reads its log and removes it).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def descendants(root: int) -> list[int]:
    """Every live process below `root`, by the parent links in /proc (children first found, any depth)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        # the command name may hold spaces and parentheses: the fields after its last ')' are fixed
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_below(root: int) -> None:
    """SIGKILL everything below `root` until nothing is left (a process may fork while it is being killed)."""
    for _ in range(50):
        pids = descendants(root)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()
        time.sleep(0.02)


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] != "--":
        print("usage: launch.py HARNESS_PID SESSION_DIR -- TORCHRUN_ARGS...", file=sys.stderr)
        return 2
    harness, session, args = int(argv[0]), argv[1], argv[3:]
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except OSError:
        pass  # not Linux: the kill below still reaches torchrun's own children
    ending = {"term": False}

    def on_term(_sig, _frame) -> None:
        ending["term"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    torchrun = subprocess.Popen([sys.executable, *args])
    code = None
    while not ending["term"] and os.getppid() == harness:
        code = torchrun.poll()
        if code is not None:
            break
        time.sleep(0.1)
    harness_gone = os.getppid() != harness
    kill_below(os.getpid())
    if harness_gone and os.environ.get("CLIP_PARITY_TORCH_KEEP") != "1":
        try:
            os.chmod(session, 0o700)  # the harness made it unlistable while the ranks ran
        except OSError:
            pass
        shutil.rmtree(session, ignore_errors=True)
    return code if code is not None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
