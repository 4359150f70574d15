//! Running the checker: the bounded checks (all rules on) and the negative controls (one rule off).

use crate::model::{Act, Algo, Cfg, Proto, Rules, St};
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;
use std::time::Instant;

/// One bounded exhaustive check; returns the names of the properties that failed.
pub fn check(label: &str, cfg: Cfg, threads: usize) -> Vec<&'static str> {
    let start = Instant::now();
    let model = Proto::new(cfg);
    let props = model.properties();
    let checker = model.checker().threads(threads).spawn_bfs().join();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{label}: {} states ({} unique), max depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        secs
    );
    let mut failed = vec![];
    for p in props {
        let found = checker.discovery(p.name);
        let ok = p.expectation.discovery_is_failure() != found.is_some();
        println!(
            "  {:<40} {:?}: {}",
            p.name,
            p.expectation,
            if ok { "holds" } else { "FAILS" }
        );
        if !ok {
            failed.push(p.name);
            if let Some(path) = found {
                print_path(checker.model(), path.into_vec());
            }
        }
    }
    failed
}

/// Prints a counterexample as one step per line.
pub fn print_path(model: &Proto, steps: Vec<(St, Option<Act>)>) {
    println!("    counterexample ({} steps):", steps.len().saturating_sub(1));
    for (i, (_, act)) in steps.iter().enumerate() {
        if let Some(a) = act {
            println!("    {:>3}. {}", i + 1, model.format_action(a));
        }
    }
    if let Some((last, _)) = steps.last() {
        println!("    final: {}", summary(model, last));
    }
}

fn summary(model: &Proto, s: &St) -> String {
    let mut out = vec![];
    for m in 0..model.cfg.members {
        let x = &s.mem[m];
        out.push(format!(
            "{}: works {:?} holds {:?}{}{}",
            (b'A' + m as u8) as char,
            (0..model.cfg.resources)
                .filter(|r| x.working & (1 << r) != 0)
                .map(|r| format!("r{r}"))
                .collect::<Vec<_>>(),
            (0..model.cfg.resources)
                .filter(|r| x.held & (1 << r) != 0)
                .map(|r| format!("r{r}"))
                .collect::<Vec<_>>(),
            if x.alive { "" } else { " (dead)" },
            if x.connected { "" } else { " (disconnected)" },
        ));
    }
    let claims: Vec<String> = (0..model.cfg.resources)
        .map(|r| match s.claims[r] {
            Some(c) => format!("r{r}->session {} token {}", c.sess, c.czxid),
            None => format!("r{r}->none"),
        })
        .collect();
    format!("{}; claims {}", out.join("; "), claims.join(", "))
}

/// A negative control: the rule removed, the invariant expected to fail.
pub struct Control {
    pub name: &'static str,
    pub finding: &'static str,
    pub expect: &'static str,
    pub cfg: Cfg,
}

pub fn controls() -> Vec<Control> {
    // Each control keeps only the faults its counterexample may need, so BFS reaches it quickly;
    // the bounded check (all rules on) explores all fault kinds together.
    let base = |f: fn(&mut Rules), faults: &[&str]| {
        let mut c = Cfg::small(Algo::ResourceBarrier);
        c.liveness = false;
        c.faults = faults.len() as u8;
        c.crashes = faults.contains(&"crash") as u8;
        c.disconnects = faults.contains(&"disconnect") as u8;
        c.cuts = faults.contains(&"cut") as u8;
        c.admin_deletes = faults.contains(&"admin") as u8;
        c.admin_sets = faults.contains(&"set") as u8;
        c.group_deletes = faults.contains(&"group") as u8;
        f(&mut c.rules);
        c
    };
    let small = |mut c: Cfg, members: usize, resources: usize, zxid: u8| {
        c.members = members;
        c.resources = resources;
        c.max_zxid = zxid;
        c
    };
    vec![
        Control {
            name: "owners_watch_claims",
            finding: "G: an owner never notices that its claim is gone",
            expect: "never_two_workers",
            cfg: base(|r| r.owners_watch_claims = false, &["admin"]),
        },
        Control {
            name: "fenced_check_member_node",
            finding: "a deposed coordinator's write in a re-created group",
            expect: "only_the_current_coordinator_writes",
            cfg: base(|r| r.fenced_check_member_node = false, &["disconnect", "group"]),
        },
        Control {
            name: "lease_through_leader",
            finding: "a lease renewed by reads of a cut-off follower",
            expect: "never_two_workers",
            cfg: base(|r| r.lease_through_leader = false, &["cut"]),
        },
        Control {
            name: "unverified_until_rechecked",
            finding: "the reconnect window: claims trusted from the handshake until the loop re-checks",
            expect: "never_two_workers",
            cfg: small(
                base(|r| r.unverified_until_rechecked = false, &["disconnect", "admin"]),
                2,
                2,
                9,
            ),
        },
        Control {
            name: "start_verified",
            finding: "a start callback under a claim verified only on the connection before a reconnection",
            expect: "starts_only_under_live_claims",
            cfg: small(base(|r| r.start_verified = false, &["disconnect", "admin"]), 2, 2, 9),
        },
        Control {
            name: "reverify_behind_sync",
            finding: "a changed claim verified again by a read a lagging server answered after a reconnection",
            expect: "never_two_workers",
            cfg: small(
                base(|r| r.reverify_behind_sync = false, &["set", "admin", "disconnect"]),
                2,
                2,
                9,
            ),
        },
        Control {
            name: "failover_closes_session",
            finding: "the failover's scan-then-delete order: the dead session expires in between",
            expect: "failover_ends_only_the_dead_instance",
            cfg: small(base(|r| r.failover_closes_session = false, &["crash"]), 2, 1, 11),
        },
        Control {
            name: "join_in_processed_session",
            finding: "a join step taken before the loop processed the lost session",
            expect: "one_member_node_per_session",
            cfg: small(base(|r| r.join_in_processed_session = false, &["disconnect"]), 2, 1, 6),
        },
    ]
}

/// Runs one control; true when the checker found a counterexample to the expected invariant.
pub fn run_control(c: &Control, threads: usize) -> bool {
    println!("== rule removed: {} ({})", c.name, c.finding);
    let start = Instant::now();
    let model = Proto::new(c.cfg.clone());
    let checker = model
        .checker()
        .threads(threads)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([c.expect])))
        .spawn_bfs()
        .join();
    println!(
        "   {} states explored, {:.1} s",
        checker.unique_state_count(),
        start.elapsed().as_secs_f64()
    );
    match checker.discovery(c.expect) {
        Some(path) => {
            println!("   {} violated:", c.expect);
            print_path(checker.model(), path.into_vec());
            true
        }
        None => {
            println!("   NO counterexample to {}", c.expect);
            false
        }
    }
}
