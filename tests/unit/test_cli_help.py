"""``rebalanser worker --help`` is for users: every option with its default, the exit codes, and none of
the test suite's fault-simulation options (which keep working, hidden)."""

from __future__ import annotations

import pytest
from rebalanser.cli import parser


def worker_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        parser().parse_args(["worker", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_the_worker_help_shows_the_defaults_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    text = worker_help(capsys)
    for option, default in (("--tick", "0.1"), ("--session-timeout", "10.0"), ("--min-interval", "2.0"),
                            ("--stop-timeout", "30.0"), ("--connect-timeout", "15.0"), ("--algorithm",
                                                                                         "resource-barrier")):
        assert option in text and f"(default: {default})" in text, option
    assert "4 ZooKeeper unreachable" in text and "5 the group does not exist" in text
    assert "--create-group" in text


def test_the_worker_help_has_no_test_only_options_and_no_test_talk(capsys: pytest.CaptureFixture[str]) -> None:
    text = worker_help(capsys)
    assert "--simulate" not in text and "black-box" not in text and "test surface" not in text


def test_the_hidden_fault_simulation_options_still_work() -> None:
    args = parser().parse_args(["worker", "--zk", "h:1", "--group", "/g", "--simulate-stop", "hang",
                                "--simulate-stop-delay", "0.5", "--simulate-oom", "--simulate-start-delay", "2"])
    assert (args.simulate_stop, args.simulate_stop_delay, args.simulate_oom) == ("hang", 0.5, True)
    assert args.simulate_start_delay == 2.0


@pytest.mark.parametrize("argv", [
    ["--tick", "0"], ["--tick", "-1"], ["--tick", "inf"], ["--session-timeout", "0"], ["--stop-timeout", "-1"],
    ["--min-interval", "-1"], ["--summary-interval", "0"], ["--metrics-port", "65536"], ["--id", ""],
    ["--connect-timeout", "0"], ["--zk-password-poll", "0"],
])
def test_every_duration_port_and_id_is_checked_at_parse_time(argv: list[str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        parser().parse_args(["worker", "--zk", "h:1", "--group", "/g", *argv])
    assert ended.value.code == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
