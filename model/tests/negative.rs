//! Negative controls: each protected rule removed in turn; the checker must find a counterexample.

use rebalanser_model::run::{controls, run_control};

fn control(name: &str) {
    let c = controls()
        .into_iter()
        .find(|c| c.name == name)
        .expect("a control of that name");
    assert!(run_control(&c, 2), "no counterexample with the rule `{name}` removed");
}

#[test]
fn without_owners_watching_their_claims_two_members_work_on_one_resource() {
    control("owners_watch_claims");
}

#[test]
fn without_the_member_node_check_a_deposed_coordinator_writes() {
    control("fenced_check_member_node");
}

#[test]
fn without_renewal_through_the_leader_two_members_work_on_one_resource() {
    control("lease_through_leader");
}

#[test]
fn without_unverified_claims_at_the_handshake_two_members_work_on_one_resource() {
    control("unverified_until_rechecked");
}

#[test]
fn without_the_start_check_a_start_runs_under_a_claim_deleted_while_away() {
    control("start_verified");
}

#[test]
fn without_the_sync_before_re_verifying_a_changed_claim_two_members_work_on_one_resource() {
    control("reverify_behind_sync");
}

#[test]
fn with_the_earlier_failover_order_a_live_members_claim_is_deleted() {
    control("failover_closes_session");
}

#[test]
fn a_join_before_the_loop_processed_the_lost_session_makes_two_member_nodes() {
    control("join_in_processed_session");
}

#[test]
fn every_rule_on_the_controls_bounds_hold() {
    // the same bounds with every rule on: no counterexample (so each control's is the rule's doing)
    use rebalanser_model::model::Rules;
    use rebalanser_model::run::check;
    for mut c in controls() {
        c.cfg.rules = Rules::ALL;
        assert!(check(c.name, c.cfg, 2).is_empty(), "{} with every rule on", c.name);
    }
}
