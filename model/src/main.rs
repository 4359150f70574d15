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
    let shallow = [(RB, 1, 9, false), (GB, 1, 8, false), (RB, 2, 6, false)];
    let deeper = [
        (RB, 2, 8, false),
        (GB, 1, 9, false),
        (GB, 2, 7, false),
        (RB, 2, 8, true),
    ];
    let mut out = vec![];
    for &(algo, faults, zxid, extra) in if deep { &deeper[..] } else { &shallow[..] } {
        let mut c = Cfg::small(algo);
        c.faults = faults;
        c.max_zxid = zxid;
        if extra {
            // a slow clock, a stop callback that overruns, a graceful leave; T grows to keep L + drift < T
            c.t = 4;
            c.drift = 1;
            c.standbys = 1;
            c.leaves = 1;
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
            if extra { ", standby and leave" } else { "" }
        );
        out.push((label, c));
    }
    out
}

/// `conform TRACE...`: each recorded trace checked against the model (docs/protocol.md, "Conformance").
/// Exit 1 when a trace within bounds has no matching path.
fn conform(files: Vec<String>) -> ExitCode {
    use rebalanser_model::conform::{check_trace, parse, resource_names, Verdict};
    let max = std::env::var("CONFORM_MAX_STATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400_000);
    // a projection (a run with more resources than the model's two) may fail only because the plan
    // balanced more resources than it sees: those are reported, and only whole traces fail the exit
    let (mut ok, mut bad, mut out, mut bad_whole) = (0, 0, 0, 0);
    for f in &files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{f}: {e}");
                bad += 1;
                bad_whole += 1;
                continue;
            }
        };
        // each pair of the run's resources in turn (the model has two)
        let names = resource_names(&text);
        let mut pairs: Vec<Vec<String>> = vec![];
        for i in 0..names.len() {
            for j in i + 1..names.len() {
                pairs.push(vec![names[i].clone(), names[j].clone()]);
            }
        }
        if names.len() < 2 {
            pairs.push(names.clone());
        }
        for keep in &pairs {
            let verdict = match parse(&text, Some(keep)) {
                Err(e) => Verdict::OutOfBounds(e),
                Ok(t) => {
                    let mut cfg = Cfg::small(if t.global {
                        Algo::GlobalBarrier
                    } else {
                        Algo::ResourceBarrier
                    });
                    cfg.max_zxid = 60;
                    cfg.standbys = 1; // the explorer drives standby and graceful leaves
                    cfg.leaves = 1;
                    let v = check_trace(cfg, &t, max);
                    let proj = if t.dropped > 0 {
                        format!(" ({} events beyond the bounds left out)", t.dropped)
                    } else {
                        String::new()
                    };
                    println!(
                        "{f} [{}]: {} events, {} members, {} resources{proj}",
                        keep.join(","),
                        t.events.len(),
                        t.members,
                        t.resources
                    );
                    v
                }
            };
            match verdict {
                Verdict::Conforms { states } => {
                    ok += 1;
                    println!("  conforms ({states} states)");
                }
                Verdict::NoPath {
                    matched,
                    first_unmatched,
                    states,
                    exhausted,
                } => {
                    bad += 1;
                    if names.len() <= 2 {
                        bad_whole += 1;
                    }
                    let how = if exhausted {
                        "every path within the bounds tried"
                    } else {
                        "search bound reached"
                    };
                    println!("  NO MATCHING PATH: {matched} events matched; first unmatched: {first_unmatched} ({states} states, {how})");
                }
                Verdict::OutOfBounds(why) => {
                    out += 1;
                    println!("  out of bounds: {why}");
                }
            }
        }
    }
    println!(
        "conformance: {} traces, {} projections onto two resources: {ok} conform, {bad} without a matching path, {out} out of bounds",
        files.len(), ok + bad + out
    );
    println!("conformance: {bad_whole} whole traces (no projection) without a matching path");
    if bad_whole == 0 {
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
