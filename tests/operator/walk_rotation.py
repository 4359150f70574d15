"""How far a Secret rotation walks through the operator's code: a measurement, run by hand.

    pytest tests/operator/walk_rotation.py -q -s            # prints the figures
    WALK_LIST=1 pytest tests/operator/walk_rotation.py -q -s  # and every function entered

A group with digest credentials is applied and its status loop runs (a real ZooKeeper, the recording
API server of tests/operator/support.py). Then the Secret changes, and a profiler over every thread
records each function of ``rebalanser_operator`` entered, from the Secret poll's hand-over
(``poll_once``) until a re-apply it asked for returns having gone through (a first one that met its
new session still connecting ends early, and a refresh tries again when it connects: both are
walked): how many distinct functions, in how many
modules, how many calls (property reads and writes counted apart: a value, not a step; and a generator
resumed by its consumer, the same call going on), how often
control passed into a module from another (``WALK_LIST=1`` lists the hand-offs in order), and how often
the Secret's content was read from the API server. Two walks:
without the operator's own identity (the new password is a new session of the group's) and with it
(the operator's session stays; only the group's ACL changes). The file is
not named ``test_*``: the suite does not run it. It also runs on older commits (where the status loop
was ``status/loop.py`` and started the re-apply itself), so a before and after can be compared.
"""

from __future__ import annotations

import collections
import importlib.util
import inspect
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest
import rebalanser_operator
from rebalanser_operator.apply.actions import apply_spec
from rebalanser_operator.apply.secretpoll import poll_once
from rebalanser_operator.runtime import LoopOptions, OperatorContext
from rebalanser_operator.zkpool import DigestCredentials

from tests.operator.support import TEST_TENANCY, RecordingKube, status_loop
from tests.support.workers import wait_for
from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk

PACKAGE = Path(rebalanser_operator.__file__).parent
SUPPORT = str(Path(__file__).with_name("support.py"))
API_READS = ("read_credentials", "read_tls", "secret_data")
ANONYMOUS = ("<genexpr>", "<lambda>", "<listcomp>", "<setcomp>", "<dictcomp>")
GENERATOR = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR | inspect.CO_COROUTINE


def accessors() -> set[Any]:
    """The code of every property of the package's classes (its getters and setters): a property read or
    written is a value's, not a step of the walk; the walk counts those apart."""
    codes: set[Any] = set()
    for name, module in list(sys.modules.items()):
        if name != "rebalanser_operator" and not name.startswith("rebalanser_operator."):
            continue
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == name:
                for attribute in vars(cls).values():
                    if isinstance(attribute, property):
                        codes.update(f.__code__ for f in (attribute.fget, attribute.fset) if f is not None)
    return codes


class Walk:
    def __init__(self) -> None:
        self.on = False
        self.went_through: bool | None = None  # whether the re-apply that ended the walk went through
        self.attempts = 0  # re-applies run during the walk
        self.calls: list[tuple[str, str]] = []
        self.hops: list[tuple[str, str]] = []  # (caller's module, callee's module) where they differ
        self.accessors = accessors()
        self.reads: list[tuple[str, str]] = []  # properties read or written
        self.generators: list[FrameType] = []  # the generators' frames entered (kept alive: compared by identity)
        self.resumes = 0  # generators resumed after their first entry

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.on or event != "call":
            return
        code = frame.f_code
        if code.co_filename == SUPPORT and code.co_name in API_READS:
            self.calls.append(("API server", code.co_name))
        elif code.co_filename.startswith(str(PACKAGE)) and code.co_name not in ANONYMOUS:
            module = str(Path(code.co_filename).relative_to(PACKAGE))
            if code in self.accessors:
                self.reads.append((module, getattr(code, "co_qualname", code.co_name)))
                return
            if code.co_flags & GENERATOR:
                if frame in self.generators:  # a generator resumed by its consumer: the same call going on
                    self.resumes += 1
                    return
                self.generators.append(frame)
            self.calls.append((module, getattr(code, "co_qualname", code.co_name)))
            caller = _package_module(frame.f_back)
            if caller != module:
                self.hops.append((caller or "-", module))


def _package_module(frame: FrameType | None) -> str | None:
    """The package module of the nearest frame of the package up the stack (None: none)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(str(PACKAGE)):
            return str(Path(name).relative_to(PACKAGE))
        frame = frame.f_back
    return None


def reapplier() -> tuple[ModuleType, tuple[str, ...]]:
    """Where the steps that re-apply are looked up when a controller binds them (so that the walk ends
    when one returns having gone through): the refresh's retry, and the Secret's own step where it
    re-applies itself (``take_secret``; older commits: only the retry)."""
    if (PACKAGE / "status" / "loop.py").exists() and importlib.util.find_spec("rebalanser_operator.status.loop"):
        from rebalanser_operator.status import loop

        return loop, ("resync_secrets",)
    from rebalanser_operator import runtime

    return runtime, tuple(name for name in ("take_secret", "resync_secrets") if hasattr(runtime, name))


#: the operator's own identity of the "identity" walk (its sessions do not change with a group's credentials)
OPERATOR = ("rebalanser-operator", "a-long-random-operator-password-0123456789")


def context(kube: RecordingKube, zk_hosts: str, top: str | None) -> Any:
    """The operator's context: the tests' path roots without an identity, or with the operator's identity
    and its own top node ``top`` (the identity takes the namespace roots it creates over)."""
    options = LoopOptions(connect_wait=5.0, period=30.0, coalesce=0.05, min_patch_interval=0.05)
    if top is None:
        return OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=options)
    from rebalanser_operator.identity import OperatorIdentity
    from rebalanser_operator.tenancy import PathRoots, Tenancy

    return OperatorContext(tenancy=Tenancy(path_roots=PathRoots.parse([f"{top}/{{namespace}}"])), kube=kube,
                           options=options, identity=OperatorIdentity.digest(*OPERATOR))


@pytest.mark.parametrize("identity", [False, True], ids=["no-identity", "identity"])
def test_walk_of_a_rotation(zk_hosts: str, group_path: str, monkeypatch: pytest.MonkeyPatch, identity: bool) -> None:
    top = f"/walk-{uuid.uuid4().hex[:10]}" if identity else None
    walk = Walk()
    owner, names = reapplier()

    def then_stop(step: Any) -> Any:
        def stepped(context: Any, rt: Any, *args: Any) -> Any:
            try:
                return step(context, rt, *args)
            finally:
                walk.attempts += 1
                walk.went_through = not rt.secrets_changed and rt.sync is not None and rt.sync.ok
                if walk.went_through:  # else a refresh tries again (a new session was connecting): walked too
                    walk.on = False
        return stepped

    for name in names:
        monkeypatch.setattr(owner, name, then_stop(getattr(owner, name)))  # before the context binds it
    threading.setprofile(walk.profile)
    sys.setprofile(walk.profile)
    kube = RecordingKube()
    ctx = context(kube, zk_hosts, top)
    try:
        kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
        zookeeper = {"connect": zk_hosts, "credentialsSecret": "zk-digest"}
        if top is None:
            zookeeper["path"] = group_path
        spec = {"zookeeper": zookeeper, "resources": ["a", "b"]}
        rt = ctx.group("shop", "orders", "uid-orders")
        apply_spec(ctx, rt, spec, generation=1)
        with status_loop(ctx, rt) as loop:
            wait_for(lambda: loop.patches > 0, 10, "no status was published")
            time.sleep(1.0)  # the first refreshes' wake-ups settle (no rotation is measured here)
            ctx.controller_of(rt).run(lambda: None)
            kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
            walk.on = True
            assert poll_once(ctx, kube.secret_data) == 1
            wait_for(lambda: not walk.on, 10, "no re-apply went through")
            assert rt.credentials == DigestCredentials("op", "new-password")
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        ctx.close()
        with admin_client(zk_hosts, auth_data=[("digest", "op:new-password"), ("digest", "op:old-password"),
                                               ("digest", ":".join(OPERATOR))]) as zk:
            if top is None:
                purge(zk, group_path)
            else:
                zk.delete(top, recursive=True)
    code = [call for call in walk.calls if call[0] != "API server"]
    functions = sorted(set(code))
    modules = collections.Counter(module for module, _ in functions)
    reads = [f for module, f in walk.calls if module == "API server" and f != "secret_data"]
    print(f"\nwalk of a rotation ({'the operator has its own identity' if identity else 'no identity'}): "
          f"{len(functions)} functions in {len(modules)} modules, {len(code)} calls, besides "
          f"{len(set(walk.reads))} properties read or written {len(walk.reads)} times; "
          f"the Secret read {1 + len(reads)} times (the poll's read, then {reads or 'none'}); "
          f"{walk.attempts} re-apply(ies) until one went through; {walk.resumes} generator resumes (not calls)")
    for module, count in sorted(modules.items()):
        print(f"  {module}: {count}")
    entries = collections.Counter(callee for _, callee in walk.hops)
    print(f"  entries into each module from another: {sum(entries.values())}; "
          + ", ".join(f"{m} {n}" for m, n in entries.most_common()))
    order = list(dict.fromkeys(callee for _, callee in walk.hops))
    print("  modules in the order first entered: " + " > ".join(order))
    if os.environ.get("WALK_LIST"):  # the hand-offs in order
        print("  hops: " + " ".join(f"{a}>{b}" for a, b in walk.hops))
    if os.environ.get("WALK_LIST"):  # every function entered, with its number of calls
        counts = collections.Counter(code)
        for module, function in functions:
            print(f"    {module} {function} x{counts[(module, function)]}")
