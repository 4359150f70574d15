//! Conformance: is a recorded run of the real processes a behaviour the model allows?
//!
//! A trace (one per run, written by `tests/chaos/trace.py`) is a list of observable events, one a line:
//! `start M R` (member M begins work on resource R: its `assigned` event), `stop M R` (it stops: its
//! `revoked` event), `algo global|resource` (the algorithm), `join M` (names the members in the order they first joined; not matched).
//! `#` starts a comment; other words on a line (the token) are kept for the reader but not matched.
//! Members are mapped to the model's A, B, C in join order, resources to r0, r1 in order of first
//! appearance; a trace with more is projected onto the first ones (see `project`).
//!
//! The search walks the model's state space guided by the trace: a model step whose change to the
//! members' `working` sets is empty is unobservable and may come anywhere; a step that changes it must
//! produce exactly the trace's next events (as a set). The one exception: a process that dies
//! (`Crash`) stops its work without an event, as a killed worker does. States are explored best-first
//! (furthest in the trace first), up to a bound on visited states.

use crate::model::{Act, Cfg, Proto, St, MAX_M, MAX_R};
use stateright::Model;
use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ev {
    Start(u8, u8),
    Stop(u8, u8),
}

#[derive(Debug)]
pub struct Trace {
    pub events: Vec<Ev>,
    /// Events as written (for messages), parallel to `events`.
    pub lines: Vec<String>,
    pub members: usize,
    pub resources: usize,
    /// Members or resources beyond the model's bounds whose events were dropped.
    pub dropped: usize,
    /// `algo global`: the run used the Global Barrier.
    pub global: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Conforms {
        states: usize,
    },
    NoPath {
        matched: usize,
        first_unmatched: String,
        states: usize,
        exhausted: bool,
    },
    OutOfBounds(String),
}

/// The resources a trace names, in order of first appearance.
pub fn resource_names(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for line in text.lines() {
        let w: Vec<&str> = line.split('#').next().unwrap_or("").split_whitespace().collect();
        if w.len() >= 3 && (w[0] == "start" || w[0] == "stop") && !out.iter().any(|x| x == w[2]) {
            out.push(w[2].to_string());
        }
    }
    out
}

/// Parses a trace, projecting it onto at most `MAX_M` members (in join order) and the resources `keep`
/// (at most `MAX_R`; all when `None`).
pub fn parse(text: &str, keep: Option<&[String]>) -> Result<Trace, String> {
    let mut members: Vec<String> = vec![];
    let mut resources: Vec<String> = keep.map(|k| k.to_vec()).unwrap_or_default();
    let max_r = keep.map_or(MAX_R, |k| k.len().min(MAX_R));
    let mut t = Trace {
        events: vec![],
        lines: vec![],
        members: 0,
        resources: 0,
        dropped: 0,
        global: false,
    };
    for (no, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.is_empty() {
            continue;
        }
        let index = |names: &mut Vec<String>, n: &str| match names.iter().position(|x| x == n) {
            Some(i) => i,
            None => {
                names.push(n.to_string());
                names.len() - 1
            }
        };
        match (w[0], w.len()) {
            ("algo", 2) => t.global = w[1] == "global",
            ("join", 2) => {
                index(&mut members, w[1]);
            }
            ("start" | "stop", n) if n >= 3 => {
                let m = index(&mut members, w[1]);
                if keep.is_some_and(|k| !k.iter().any(|x| x == w[2])) {
                    t.dropped += 1;
                    continue;
                }
                let r = index(&mut resources, w[2]);
                if m >= MAX_M || r >= max_r {
                    t.dropped += 1;
                    continue;
                }
                let (m, r) = (m as u8, r as u8);
                t.events.push(if w[0] == "start" {
                    Ev::Start(m, r)
                } else {
                    Ev::Stop(m, r)
                });
                t.lines.push(format!("line {}: {}", no + 1, line));
            }
            _ => return Err(format!("line {}: cannot read {:?}", no + 1, raw)),
        }
    }
    t.members = members.len().min(MAX_M);
    t.resources = resources.len().min(max_r);
    Ok(t)
}

/// The observable events of one model step (sorted); a dying process's stops are silent.
fn observe(a: &Act, s: &St, n: &St) -> Vec<Ev> {
    let mut out = vec![];
    for m in 0..MAX_M {
        let (b, c) = (s.mem[m].working, n.mem[m].working);
        for r in 0..MAX_R {
            let bit = 1u8 << r;
            if b & bit == 0 && c & bit != 0 {
                out.push(Ev::Start(m as u8, r as u8));
            }
            if b & bit != 0 && c & bit == 0 && !matches!(a, Act::Crash(x) if *x as usize == m) {
                out.push(Ev::Stop(m as u8, r as u8));
            }
        }
    }
    out.sort();
    out
}

/// Searches the model (configured by `cfg`, its sizes set from the trace) for a path whose observable
/// projection is the trace, visiting at most `max_states` (state, position) pairs.
pub fn check_trace(mut cfg: Cfg, t: &Trace, max_states: usize) -> Verdict {
    if t.members == 0 {
        return Verdict::OutOfBounds("no members".into());
    }
    cfg.members = t.members;
    cfg.resources = t.resources.max(1);
    cfg.liveness = false;
    let p = Proto { cfg };
    let mut seen: HashSet<(St, usize)> = HashSet::new();
    // best-first: one stack per trace position, the furthest served first
    let mut levels: Vec<Vec<St>> = vec![vec![]; t.events.len() + 1];
    for s in p.init_states() {
        if seen.insert((s.clone(), 0)) {
            levels[0].push(s);
        }
    }
    let mut best = 0;
    let mut acts = vec![];
    let mut by_len: HashMap<usize, Vec<Ev>> = HashMap::new();
    while let Some(i) = (0..levels.len()).rev().find(|&i| !levels[i].is_empty()) {
        if i == t.events.len() {
            return Verdict::Conforms { states: seen.len() };
        }
        if seen.len() >= max_states {
            break;
        }
        let s = levels[i].pop().expect("non-empty level");
        acts.clear();
        p.actions(&s, &mut acts);
        for a in acts.iter() {
            let Some(n) = p.next_state(&s, *a) else { continue };
            if !p.within_boundary(&n) {
                continue;
            }
            let obs = observe(a, &s, &n);
            let j = i + obs.len();
            if j > t.events.len() {
                continue;
            }
            if !obs.is_empty() {
                let want = by_len.entry(obs.len()).or_default();
                want.clear();
                want.extend_from_slice(&t.events[i..j]);
                want.sort();
                if *want != obs {
                    continue;
                }
            }
            best = best.max(j);
            if seen.insert((n.clone(), j)) {
                levels[j].push(n);
            }
        }
    }
    Verdict::NoPath {
        matched: best,
        first_unmatched: t.lines.get(best).cloned().unwrap_or_default(),
        states: seen.len(),
        exhausted: levels.iter().all(|l| l.is_empty()),
    }
}
