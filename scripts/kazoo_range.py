"""The kazoo versions that pyproject.toml allows, and the ones that were run (scripts/kazoo-versions.tsv).

``python3 scripts/kazoo_range.py`` prints the range's two bounds, the lowest and the highest allowed
version, which ``make kazoo-range`` runs. The range is written ``kazoo>=LOW,<=HIGH``: both ends are
releases that were run, so a release nobody ran (a newer kazoo) is outside it until it has been run
and recorded. Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"
RECORD = REPO / "scripts" / "kazoo-versions.tsv"
RANGE = re.compile(r"kazoo\s*>=\s*(?P<low>[0-9][0-9.]*)\s*,\s*<=\s*(?P<high>[0-9][0-9.]*)")


@dataclass(frozen=True)
class Trial:
    """One kazoo release run against the contract test and the suite, as recorded."""

    version: str
    passed: bool
    note: str


def version_key(version: str) -> tuple[int, ...]:
    """``2.10.0`` after ``2.9.0``: release numbers compared as numbers (no pre-releases are recorded)."""
    return tuple(int(part) for part in version.split("."))


def declared(pyproject: Path = PYPROJECT) -> tuple[str, str]:
    """The lowest and the highest kazoo version that pyproject.toml's dependency allows."""
    dependencies: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    for requirement in dependencies:
        if re.match(r"kazoo\b", requirement):
            found = RANGE.fullmatch(requirement.replace(" ", ""))
            if found is None:
                raise ValueError(f"{pyproject.name}: {requirement!r} is not of the form kazoo>=LOW,<=HIGH "
                                 "(both bounds versions that were run)")
            return found["low"], found["high"]
    raise ValueError(f"{pyproject.name} declares no kazoo dependency")


def trials(record: Path = RECORD) -> list[Trial]:
    """The recorded runs, one a line: version, ``passed`` or ``failed``, what ran or what broke."""
    found: list[Trial] = []
    for line in record.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        version, result, note = line.split("\t", 2)
        if result not in ("passed", "failed"):
            raise ValueError(f"{record.name}: {version}: result {result!r} is neither passed nor failed")
        found.append(Trial(version, result == "passed", note))
    return found


def main() -> int:
    try:
        low, high = declared()
    except ValueError as exc:
        print(f"kazoo_range: {exc}", file=sys.stderr)
        return 2
    print(low, high)
    return 0


if __name__ == "__main__":
    sys.exit(main())
