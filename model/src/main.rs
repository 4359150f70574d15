//! `rebalanser-model check|deep|negative`: see docs/protocol.md, "What is checked".

use rebalanser_model::model::{Algo, Cfg};
use rebalanser_model::run::{check, controls, run_control};
use std::process::ExitCode;

fn threads() -> usize {
    std::env::var("MODEL_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// The bounds: (algorithm, faults per run, zxid bound, extras). `check` runs in `make model` (part of
/// `make test`), `deep` in `make model-deep` (part of `make chaos`).
fn bounds(deep: bool) -> Vec<(String, Cfg)> {
    use Algo::{GlobalBarrier as GB, ResourceBarrier as RB};
    // (algorithm, members, faults per run, zxid bound, extra)
    let shallow = [
        (RB, 3, 1, 9, false),
        (GB, 3, 1, 8, false),
        (RB, 3, 2, 6, false),
        (RB, 2, 2, 9, false),
    ];
    let deeper = [
        (RB, 3, 2, 8, false),
        (GB, 3, 1, 9, false),
        (GB, 3, 2, 7, false),
        (RB, 3, 2, 8, true),
        (GB, 2, 2, 9, false),
        (RB, 2, 3, 9, false),
    ];
    let mut out = vec![];
    for &(algo, members, faults, zxid, extra) in if deep { &deeper[..] } else { &shallow[..] } {
        let mut c = Cfg::small(algo);
        c.members = members;
        c.faults = faults;
        c.max_zxid = zxid;
        // every fault kind (an administrator's set of a claim's data too), and the steps that are not faults but share the budget: a loop busy in
        // a callback, a slow follower, a graceful leave, a resource deleted or created
        let env = |k: &str, d: u8| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
        c.busy = env("BUSY", 1);
        c.slows = env("SLOWS", 1);
        c.leaves = env("LEAVES", 1);
        c.resource_changes = env("RESCH", 1);
        c.admin_sets = env("SETS", 1);
        if extra {
            // a slow clock, a stop callback that overruns; T grows to keep L + drift < T
            c.t = 4;
            c.drift = 1;
            c.standbys = 1;
        }
        let label = format!(
            "{:?}: {} members, {} resources, {} fault(s) per run, zxid <= {}, T={} L={} drift {}{}",
            algo,
            c.members,
            c.resources,
            c.faults,
            c.max_zxid,
            c.t,
            c.l,
            c.drift,
            if extra { ", standby" } else { "" }
        );
        out.push((label, c));
    }
    out
}

/// The conformance configuration of one projected trace: any plan, joins in any order, and fault
/// budgets from what the trace shows (its observable faults) or allows (silent ones).
fn conform_cfg(t: &rebalanser_model::conform::Trace, campaign: bool) -> Cfg {
    use rebalanser_model::conform::{Ev, Item};
    let count = |f: fn(&Ev) -> bool| {
        t.items
            .iter()
            .filter(|i| matches!(i, Item::Step(e) if f(e)))
            .count()
            .min(200) as u8
    };
    let mut c = Cfg::small(if t.global {
        Algo::GlobalBarrier
    } else {
        Algo::ResourceBarrier
    });
    c.max_zxid = 250;
    c.any_plan = true;
    c.ordered_joins = false;
    let suspends = count(|e| matches!(e, Ev::Suspend(_)));
    c.disconnects = suspends;
    c.expiries = suspends;
    c.standbys = count(|e| matches!(e, Ev::Standby(_)));
    c.leaves = count(|e| matches!(e, Ev::Leave(_)));
    c.crashes = t.members as u8; // a killed worker's stream just ends
    c.node_deletes = 1; // the explorer's eviction, the failover
    c.cuts = campaign as u8; // the campaign's partitions
    c.admin_deletes = if campaign {
        1 // its tampering, not recorded
    } else {
        count(|e| matches!(e, Ev::AdminDelete(_))) // the explorer's, recorded: each where it is
    };
    c.group_deletes = campaign as u8;
    c.faults = 250;
    c
}

/// `conform [--campaign] TRACE...`: each recorded trace checked against the model, once per resource
/// (docs/protocol.md, "Conformance"). Exit 1 when a trace has no matching path or an unmapped event.
fn conform(args: Vec<String>) -> ExitCode {
    use rebalanser_model::conform::{check_trace, parse, resource_names, Verdict};
    let max = std::env::var("CONFORM_MAX_STATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let campaign = args.iter().any(|a| a == "--campaign");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let (mut whole_ok, mut whole_bad, mut whole_out) = (0, 0, 0);
    let (mut proj_ok, mut proj_bad, mut proj_out, mut events, mut unmapped_total) = (0, 0, 0, 0, 0);
    for f in &files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{f}: {e}");
                whole_bad += 1;
                continue;
            }
        };
        let lines = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        events += lines;
        let names = resource_names(&text);
        let mut verdicts = vec![];
        // every event without a model counterpart, whichever member and resource it concerns
        let unmapped: Vec<String> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("unmapped "))
            .map(|(no, l)| format!("line {}: {}", no + 1, l.trim()))
            .collect();
        for r in &names {
            let keep = vec![r.clone()];
            let v = match parse(&text, Some(&keep)) {
                Err(e) => Verdict::OutOfBounds(e),
                Ok(mut t) => {
                    t.deletions_recorded = !campaign;
                    check_trace(conform_cfg(&t, campaign), &t, max)
                }
            };
            verdicts.push((r.clone(), v));
        }
        unmapped_total += unmapped.len();
        let bad = verdicts
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::NoPath { .. }))
            .count();
        let out = verdicts
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::OutOfBounds(_)))
            .count();
        let ok = verdicts.len() - bad - out;
        proj_ok += ok;
        proj_bad += bad;
        proj_out += out;
        let verdict = if bad > 0 || !unmapped.is_empty() {
            whole_bad += 1;
            "DOES NOT CONFORM"
        } else if out > 0 {
            whole_out += 1;
            "out of bounds"
        } else {
            whole_ok += 1;
            "conforms"
        };
        println!("{f}: {lines} lines, {} resources: {verdict}", names.len());
        for u in &unmapped {
            println!("  no model counterpart: {u}");
        }
        for (r, v) in &verdicts {
            match v {
                Verdict::Conforms { .. } => {}
                Verdict::NoPath {
                    matched,
                    first_unmatched,
                    states,
                    exhausted,
                } => {
                    let how = if *exhausted {
                        "every path within the bounds tried"
                    } else {
                        "search bound reached"
                    };
                    println!("  [{r}] NO MATCHING PATH: {matched} items matched; first unmatched: {first_unmatched} ({states} states, {how})");
                }
                Verdict::OutOfBounds(why) => println!("  [{r}] out of bounds: {why}"),
            }
        }
    }
    println!(
        "conformance: {} traces ({events} lines): {whole_ok} conform whole, {whole_bad} do not, {whole_out} out of bounds; per resource: {proj_ok} conform, {proj_bad} without a matching path, {proj_out} out of bounds; {unmapped_total} events without a model counterpart",
        files.len()
    );
    if whole_bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    match mode.as_str() {
        "check" | "deep" => {
            let mut failed = 0;
            for (label, cfg) in bounds(mode == "deep") {
                failed += check(&label, cfg, threads()).len();
            }
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        "probe" => {
            let env = |k: &str, d: u8| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
            let mut c = Cfg::small(Algo::ResourceBarrier);
            c.members = env("M", 3) as usize;
            c.max_zxid = env("Z", 9);
            c.faults = env("F", 2);
            c.liveness = env("LIVE", 0) == 1;
            check("probe", c, threads());
            ExitCode::SUCCESS
        }
        "negative" => {
            let missed = controls().iter().filter(|c| !run_control(c, threads())).count();
            if missed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        "conform" => conform(std::env::args().skip(2).collect()),
        _ => {
            eprintln!("usage: rebalanser-model check|deep|negative|conform TRACE...");
            ExitCode::from(2)
        }
    }
}
