"""The ``rebalanser-operator`` command. The operator's dependencies come with the ``operator`` extra;
on a core-only install the command names the extra instead of failing with a traceback."""

from __future__ import annotations

OPERATOR_EXTRA = "pip install 'rebalanser[operator]'"
EXTRA_PACKAGES = frozenset({"kopf", "kubernetes", "pydantic", "prometheus_client", "yaml"})


def main(argv: list[str] | None = None) -> int:
    try:
        from rebalanser_operator.main import main as run
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in EXTRA_PACKAGES:
            raise  # a defect of ours, not a missing extra
        raise SystemExit(f"rebalanser-operator needs the operator extra ({exc.name} is missing): "
                         f"{OPERATOR_EXTRA}") from None
    return run(argv)
