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
        "join a\njoin b\nstart a x 5\nstart a y 5\nstop a y\nstart b y 9\n",
        None,
    )
    .unwrap();
    assert!(matches!(check_trace(cfg(), &t, 200_000), Verdict::Conforms { .. }));
}

#[test]
fn two_workers_at_once_do_not_conform() {
    let t = parse(
        "join a\njoin b\nstart a x 5\nstart a y 5\nstart b y 9\nstop a y\n",
        None,
    )
    .unwrap();
    match check_trace(cfg(), &t, 2_000_000) {
        Verdict::NoPath { matched, exhausted, .. } => {
            assert_eq!(matched, 3, "the first three events are a behaviour, the fourth is not");
            assert!(exhausted, "every path within the bounds was tried");
        }
        v => panic!("expected no matching path, got {v:?}"),
    }
}
