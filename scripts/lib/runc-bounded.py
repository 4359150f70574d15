"""runc, minus the capabilities this host cannot grant.

Docker 20.10 gives a ``--privileged`` container (and ``docker exec --privileged``) every capability the
kernel knows, whether or not the engine itself holds it. Where root's bounding set lacks one (here
CAP_SYS_RESOURCE), runc fails with "unable to apply caps: operation not permitted", so no privileged
container can start; kind's nodes are privileged containers. scripts/install-docker.sh registers
this program as dockerd's default runtime on such hosts: before ``create``/``run`` (the bundle's
config.json) and ``exec`` (the ``--process`` file) it removes the capabilities missing from its own
bounding set, then runs runc with the same arguments. Nothing else changes.

Usage (by dockerd): runc-bounded.py [runc arguments...]; RUNC_BOUNDED_RUNC names the real runc.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Linux capability numbers (include/uapi/linux/capability.h); unknown names are left alone.
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)
# runc's global options that take a value (the rest are flags).
GLOBAL_WITH_VALUE = {"--root", "--log", "--log-format", "--criu", "--rootless"}
CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def missing_capabilities() -> set[str]:
    """Names (CAP_...) of the known capabilities absent from this process's bounding set."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            mask = int(line.split()[1], 16)
            return {f"CAP_{name}" for bit, name in enumerate(CAPABILITIES) if not mask >> bit & 1}
    return set()


def strip(process: dict[str, object], missing: set[str]) -> bool:
    """Remove ``missing`` from every capability set of an OCI process; True when something changed."""
    caps = process.get("capabilities")
    if not isinstance(caps, dict):
        return False
    changed = False
    for key in CAP_SETS:
        values = caps.get(key)
        if isinstance(values, list):
            kept = [c for c in values if c not in missing]
            changed |= len(kept) != len(values)
            caps[key] = kept
    return changed


def option(args: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--name value`` or ``--name=value``)."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def subcommand(args: list[str]) -> tuple[str | None, list[str]]:
    """The runc subcommand and the arguments after it."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in GLOBAL_WITH_VALUE:
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            return arg, args[i + 1:]
    return None, []


def rewrite(path: Path, missing: set[str], *, whole_spec: bool) -> None:
    data = json.loads(path.read_text())
    process = data.get("process") if whole_spec else data
    if isinstance(process, dict) and strip(process, missing):
        tmp = path.with_name(path.name + ".bounded")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def main() -> None:
    runc = os.environ.get("RUNC_BOUNDED_RUNC", "runc")
    args = sys.argv[1:]
    missing = missing_capabilities()
    if missing:
        command, rest = subcommand(args)
        if command in ("create", "run"):
            bundle = option(rest, "--bundle", "-b") or "."
            rewrite(Path(bundle) / "config.json", missing, whole_spec=True)
        elif command == "exec":
            process = option(rest, "--process", "-p")
            if process:
                rewrite(Path(process), missing, whole_spec=False)
    os.execvp(runc, [runc, *args])


if __name__ == "__main__":
    main()
