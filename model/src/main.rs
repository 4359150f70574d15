//! `rebalanser-model check|deep|negative`: see docs/protocol.md, "What is checked".

use rebalanser_model::model::{Algo, Cfg};
use rebalanser_model::run::{check, controls, run_control};
use std::process::ExitCode;

fn threads() -> usize {
    std::env::var("MODEL_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

fn bounds(deep: bool) -> Vec<(String, Cfg)> {
    let mut out = vec![];
    for algo in [Algo::ResourceBarrier, Algo::GlobalBarrier] {
        let mut c = Cfg::small(algo);
        if deep {
            c.max_zxid = 12;
            c.t = 4;
            c.drift = 1;
            c.standbys = 1;
            c.leaves = 1;
        }
        let label = format!(
            "{:?}: {} members, {} resources, zxid <= {}, T={} L={} drift {}",
            algo, c.members, c.resources, c.max_zxid, c.t, c.l, c.drift
        );
        out.push((label, c));
    }
    out
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    match mode.as_str() {
        "check" | "deep" => {
            let mut failed = 0;
            for (label, cfg) in bounds(mode == "deep") {
                failed += check(&label, cfg, threads()).len();
            }
            if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
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
            if missed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        _ => {
            eprintln!("usage: rebalanser-model check|deep|negative");
            ExitCode::from(2)
        }
    }
}
