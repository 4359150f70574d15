//! The conformance checker can say yes and no (docs/protocol.md, "Conformance").

use rebalanser_model::conform::{check_trace, parse, Verdict};
use rebalanser_model::model::{Algo, Cfg};

fn cfg() -> Cfg {
    let mut c = Cfg::small(Algo::ResourceBarrier);
    c.max_zxid = 10;
    c.faults = 1;
    // no outsider deletes a claim: with one, two owners at once is a behaviour the model allows
    c.admin_deletes = 0;
    c.group_deletes = 0;
    c
}

#[test]
fn a_move_conforms() {
    let t = parse(
        "join a\njoin b\noffice a\nstart a x 5\nstart a y 5\nstop a y\nstart b y 9\n",
        None,
    )
    .unwrap();
    assert!(matches!(check_trace(cfg(), &t, 200_000), Verdict::Conforms { .. }));
}

#[test]
fn two_workers_at_once_do_not_conform() {
    let t = parse(
        "join a\njoin b\noffice a\nstart a x 5\nstart a y 5\nstart b y 9\nstop a y\n",
        None,
    )
    .unwrap();
    match check_trace(cfg(), &t, 2_000_000) {
        Verdict::NoPath { matched, exhausted, .. } => {
            assert_eq!(
                matched, 3,
                "office and a's two starts are a behaviour; b starting y while a works on it is not"
            );
            assert!(exhausted, "every path within the bounds was tried");
        }
        v => panic!("expected no matching path, got {v:?}"),
    }
}

/// The explorer's standby run, as `tests/chaos/trace.py` maps it: the member on standby stops its
/// work at the `standby` event (the library fences there), its overrunning callbacks return later
/// (`note` lines), and the other member starts in between; ticks are predicates.
#[test]
fn a_standby_conforms_with_any_plan() {
    let mut c = cfg();
    c.any_plan = true;
    c.ordered_joins = false;
    c.standbys = 1;
    c.max_zxid = 30;
    let t = parse(
        "join a\njoin b\noffice a\nstart a x 5\ntick a x 5\nstop a x\nstart b x 9\ntick b x 9\n\
         stop b x\nstandby b\nstart a x 12\nnote b revoked x: its callback returned\nrejoin b\ntick a x 12\n",
        None,
    )
    .unwrap();
    assert_eq!(t.notes, 1);
    assert!(matches!(check_trace(c, &t, 200_000), Verdict::Conforms { .. }));
}

/// A tick of a member after its stop is work the model never allows.
#[test]
fn work_after_stop_does_not_conform() {
    let mut c = cfg();
    c.any_plan = true;
    let t = parse(
        "join a\njoin b\noffice a\nstart a x 5\nstop a x\nstart b x 9\ntick a x 5\n",
        None,
    )
    .unwrap();
    match check_trace(c, &t, 2_000_000) {
        Verdict::NoPath { matched, exhausted, .. } => {
            assert_eq!(
                matched, 4,
                "office, start, stop, start: a behaviour; the old owner's tick is not"
            );
            assert!(exhausted, "every path within the bounds was tried");
        }
        v => panic!("expected no matching path, got {v:?}"),
    }
}

/// A member on standby whose session expires stays on standby in its new session: it rejoins only
/// once its overrunning callbacks have returned (`rejoin` after `expired`), as the library does.
#[test]
fn a_standby_outlives_its_session() {
    let mut c = cfg();
    c.any_plan = true;
    c.ordered_joins = false;
    c.standbys = 1;
    c.disconnects = 1;
    c.faults = 2;
    c.max_zxid = 30;
    let t = parse(
        "join a\njoin b\noffice a\nstart a x 5\nstop a x\nstart b x 9\nstop b x\nstandby b\n\
         start a x 12\nsuspend b\nexpired b\nnote b connected in a new session\n\
         note b revoked x: its callback returned\nrejoin b\ntick a x 12\n",
        None,
    )
    .unwrap();
    match check_trace(c, &t, 2_000_000) {
        Verdict::Conforms { .. } => {}
        v => panic!("a standby that outlives its session should conform, got {v:?}"),
    }
}

/// A reconnection in the same session: `resume` is the loop's re-check; the handshake and the
/// claims' re-check thread before it are unobservable, and the member owns its resource again after.
#[test]
fn a_reconnection_conforms() {
    let mut c = cfg();
    c.disconnects = 1;
    let t = parse(
        "join a\njoin b\noffice a\nstart a x 5\ntick a x 5\nsuspend a\nresume a\ntick a x 5\n",
        None,
    )
    .unwrap();
    match check_trace(c, &t, 2_000_000) {
        Verdict::Conforms { .. } => {}
        v => panic!("a reconnection should conform, got {v:?}"),
    }
}

/// An outsider deletes a's claim while a is away (the explorer's reconnect scenarios): b, given x by
/// any plan, claims and starts it; a finds its claim gone at the reconnection (its stop). With the
/// run's outside deletions recorded, the model's administrator deletion is the `delete` line, and
/// only there: without it, b cannot claim x while a's claim is there.
fn deleted_while_away(delete_line: bool) -> String {
    let delete = if delete_line { "delete x\n" } else { "" };
    format!("join b\njoin a\noffice b\nstart a x 5\ntick a x 5\nsuspend a\n{delete}start b x 9\nstop a x\nresume a\n")
}

fn deletion_cfg() -> Cfg {
    let mut c = cfg();
    c.any_plan = true;
    c.disconnects = 1;
    c.admin_deletes = 1;
    c.faults = 2;
    c.max_zxid = 20;
    c
}

#[test]
fn a_recorded_outside_deletion_conforms_where_it_is() {
    let mut t = parse(&deleted_while_away(true), None).unwrap();
    t.deletions_recorded = true;
    match check_trace(deletion_cfg(), &t, 2_000_000) {
        Verdict::Conforms { .. } => {}
        v => panic!("a recorded deletion should conform, got {v:?}"),
    }
}

#[test]
fn no_outside_deletion_where_none_was_recorded() {
    let mut t = parse(&deleted_while_away(false), None).unwrap();
    t.deletions_recorded = true;
    match check_trace(deletion_cfg(), &t, 2_000_000) {
        Verdict::NoPath {
            first_unmatched,
            exhausted,
            ..
        } => {
            assert!(first_unmatched.contains("start b x"), "stopped at {first_unmatched}");
            assert!(exhausted, "every path within the bounds was tried");
        }
        v => panic!("without a recorded deletion b cannot claim x: {v:?}"),
    }
    // the campaign's tampering, not recorded: the deletion is an unobservable step
    t.deletions_recorded = false;
    match check_trace(deletion_cfg(), &t, 2_000_000) {
        Verdict::Conforms { .. } => {}
        v => panic!("an unrecorded deletion should be allowed when deletions are not recorded: {v:?}"),
    }
}
