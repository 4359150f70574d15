//! Conformance: is a recorded run of the real processes a behaviour the model allows?
//!
//! A trace (one per run, written by `tests/chaos/trace.py` from the workers' JSON events) has one
//! line per event, in time order:
//!
//! - step labels, each matched by one model step: `start M R TOKEN` (its `assigned` event), `stop M
//!   R` (its `revoked` event), `standby M`, `rejoin M`, `leave M` (a graceful exit), `office M` (takes
//!   office), `suspend M` (the connection dropped), `resume M` (reconnected in the same session: the
//!   loop's re-check; the handshake before it is unobservable), `expired M` (the loop processed the
//!   end of its session; the new session's handshake before it is unobservable);
//! - `delete R`: an outsider deleted the claim on R (the explorer records each deletion it makes, at
//!   the instant it sent it), matched by the model's administrator deletion of that claim; in a trace
//!   whose outside deletions are recorded (`Trace::deletions_recorded`) that step occurs only there;
//! - `tick M R TOKEN`: a state predicate (`owns(R)` of M at that point), checked, not a step;
//! - `note M WHAT`: an event folded into a neighbouring step (the first `connected`, `role follower`,
//!   a callback that returns on standby, `closed`, `stopped`); counted, not matched;
//! - `unmapped M WHAT`: an event the exporter could map to no model step (reported);
//! - `algo global|resource`; `join M` names the members in order of first appearance.
//!
//! `#` starts a comment. The model's invariants are per resource, so a run is checked once per
//! resource (`parse` with `keep`): that resource's `start`/`stop`/`tick` lines and every member-level
//! line, the plan free to be any plan (`Cfg::any_plan`; see docs/protocol.md, "Conformance").
//!
//! The search walks the model's states guided by the trace: a step whose label set is empty is
//! unobservable and may come anywhere; a step with labels must produce exactly the trace's next
//! labels (as a set). A process that dies (`Crash`) stops its work without an event, as a killed
//! worker does. States are explored best-first (furthest in the trace first), up to a bound.

use crate::model::{Act, Cfg, Ghost, Op, Proto, St, MAX_M, MAX_R};
use stateright::Model;
use std::collections::{HashSet, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ev {
    Start(u8, u8),
    Stop(u8, u8),
    Standby(u8),
    Rejoin(u8),
    Leave(u8),
    Office(u8),
    Suspend(u8),
    Resume(u8),
    Expired(u8),
    /// An outsider deleted the claim on this resource.
    AdminDelete(u8),
}

impl Ev {
    fn member(&self) -> Option<u8> {
        match *self {
            Ev::Start(m, _) | Ev::Stop(m, _) => Some(m),
            Ev::Standby(m) | Ev::Rejoin(m) | Ev::Leave(m) | Ev::Office(m) => Some(m),
            Ev::Suspend(m) | Ev::Resume(m) | Ev::Expired(m) => Some(m),
            Ev::AdminDelete(_) => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    /// A step label.
    Step(Ev),
    /// `tick M R`: M works on R here.
    Works(u8, u8),
}

#[derive(Debug, Default)]
pub struct Trace {
    pub items: Vec<Item>,
    /// Items as written (for messages), parallel to `items`.
    pub lines: Vec<String>,
    pub members: usize,
    pub resources: usize,
    /// Lines of other resources (or of members beyond the projection) left out.
    pub dropped: usize,
    /// `note` lines: events folded into a neighbouring step.
    pub notes: usize,
    /// `unmapped` lines: events with no model counterpart.
    pub unmapped: Vec<String>,
    /// `algo global`: the run used the Global Barrier.
    pub global: bool,
    /// Every outside claim deletion of the run is a `delete` line (the explorer's runs): the model's
    /// administrator deletion is then an observable step, taken only where the trace has one. Otherwise
    /// (the campaign, whose tampering is not recorded) it is unobservable, within the budget.
    pub deletions_recorded: bool,
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

fn words(line: &str) -> Vec<&str> {
    line.split('#').next().unwrap_or("").split_whitespace().collect()
}

fn is_resource_line(w: &[&str]) -> bool {
    w.len() >= 3 && matches!(w[0], "start" | "stop" | "tick")
}

/// The resources a trace names, in order of first appearance.
pub fn resource_names(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for line in text.lines() {
        let w = words(line);
        if is_resource_line(&w) && !out.iter().any(|x| x == w[2]) {
            out.push(w[2].to_string());
        }
    }
    out
}

/// Parses a trace, projected onto the resources `keep` (at most `MAX_R`; all when `None`). Members
/// are taken in join order; with `keep`, only those the kept lines concern (the kept resources' lines
/// and `office`); the trace is out of bounds if they are more than `MAX_M`.
pub fn parse(text: &str, keep: Option<&[String]>) -> Result<Trace, String> {
    let mut t = Trace::default();
    let mut all_members: Vec<String> = vec![];
    let mut involved: Vec<String> = vec![];
    let kept = |w: &[&str]| keep.map_or(true, |k| k.iter().any(|x| x == w[2]));
    // first pass: the members, and which ones the projection concerns
    for (no, raw) in text.lines().enumerate() {
        let w = words(raw);
        if w.is_empty() {
            continue;
        }
        if w.len() < 2 && w[0] != "algo" {
            return Err(format!("line {}: cannot read {:?}", no + 1, raw));
        }
        if w[0] == "algo" || w[0] == "delete" {
            continue;
        }
        if !all_members.iter().any(|x| x == w[1]) {
            all_members.push(w[1].to_string());
        }
        let concerns = (is_resource_line(&w) && kept(&w)) || w[0] == "office";
        if concerns && !involved.iter().any(|x| x == w[1]) {
            involved.push(w[1].to_string());
        }
    }
    // a member with no line on the kept resources (and never in office) plays no part in them
    let members: Vec<String> = if keep.is_none() {
        all_members
    } else {
        all_members.into_iter().filter(|m| involved.contains(m)).collect()
    };
    if members.len() > MAX_M {
        return Err(format!(
            "{} members concern the projection (the model has {MAX_M})",
            members.len()
        ));
    }
    let mut resources: Vec<String> = keep.map(|k| k.to_vec()).unwrap_or_default();
    for (no, raw) in text.lines().enumerate() {
        let w = words(raw);
        if w.is_empty() {
            continue;
        }
        if w[0] == "algo" {
            t.global = w.get(1) == Some(&"global");
            continue;
        }
        if w[0] == "delete" {
            if keep.is_some_and(|k| !k.iter().any(|x| x == w[1])) {
                t.dropped += 1;
                continue;
            }
            let r = resource_index(&mut resources, w[1])?;
            t.items.push(Item::Step(Ev::AdminDelete(r)));
            t.lines.push(format!("line {}: {}", no + 1, raw.trim()));
            continue;
        }
        let Some(m) = members.iter().position(|x| x == w[1]) else {
            t.dropped += 1;
            continue;
        };
        let m = m as u8;
        let item = match (w[0], w.len()) {
            ("join", _) => continue,
            ("note", _) => {
                t.notes += 1;
                continue;
            }
            ("unmapped", _) => {
                t.unmapped.push(format!("line {}: {}", no + 1, raw.trim()));
                continue;
            }
            ("start" | "stop" | "tick", n) if n >= 3 => {
                if !kept(&w) {
                    t.dropped += 1;
                    continue;
                }
                let r = resource_index(&mut resources, w[2])?;
                match w[0] {
                    "start" => Item::Step(Ev::Start(m, r)),
                    "stop" => Item::Step(Ev::Stop(m, r)),
                    _ => Item::Works(m, r),
                }
            }
            ("standby", _) => Item::Step(Ev::Standby(m)),
            ("rejoin", _) => Item::Step(Ev::Rejoin(m)),
            ("leave", _) => Item::Step(Ev::Leave(m)),
            ("office", _) => Item::Step(Ev::Office(m)),
            ("suspend", _) => Item::Step(Ev::Suspend(m)),
            ("resume", _) => Item::Step(Ev::Resume(m)),
            ("expired", _) => Item::Step(Ev::Expired(m)),
            _ => return Err(format!("line {}: cannot read {:?}", no + 1, raw)),
        };
        // a tick repeated without a step between them says nothing new
        if matches!(item, Item::Works(..)) {
            let since = t.items.iter().rev().take_while(|i| matches!(i, Item::Works(..)));
            if since.clone().any(|i| *i == item) {
                continue;
            }
        }
        t.items.push(item);
        t.lines.push(format!("line {}: {}", no + 1, raw.trim()));
    }
    t.members = members.len();
    t.resources = resources.len();
    Ok(t)
}

/// The index of resource `name` (added in order of first appearance).
fn resource_index(resources: &mut Vec<String>, name: &str) -> Result<u8, String> {
    let r = match resources.iter().position(|x| x == name) {
        Some(i) => i,
        None => {
            resources.push(name.to_string());
            resources.len() - 1
        }
    };
    if r >= MAX_R {
        return Err(format!("more than {MAX_R} resources"));
    }
    Ok(r as u8)
}

/// The labels of one model step (sorted); a dying process's stops are silent. An administrator's
/// claim deletion is labelled when the trace records outside deletions (`deletions`).
fn observe(a: &Act, s: &St, n: &St, deletions: bool) -> Vec<Ev> {
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
    match *a {
        Act::Standby(m) => out.push(Ev::Standby(m)),
        Act::Rejoin(m) => out.push(Ev::Rejoin(m)),
        Act::Leave(m) => out.push(Ev::Leave(m)),
        Act::TakeOffice(m) if n.mem[m as usize].coord != 0 => out.push(Ev::Office(m)),
        Act::Disconnect(m) | Act::FollowerGivesUp(m) | Act::Expire(m) if s.mem[m as usize].connected => {
            out.push(Ev::Suspend(m))
        }
        // `reconnected` is reported by the member loop when it handles CONNECTED: its re-check
        Act::Recheck(m) => out.push(Ev::Resume(m)),
        // the loop's processing of the lost session stops all work: the `expired` event
        Act::SessionEnded(m) => out.push(Ev::Expired(m)),
        Act::AdminDeleteClaim(r) if deletions => out.push(Ev::AdminDelete(r)),
        _ => {}
    }
    out.sort();
    out
}

/// The model configured for conformance: `cfg`'s rules and algorithm, the trace's sizes, any plan,
/// outsiders' deletions of member nodes and sessions, budgets wide enough for a recorded run.
pub fn conform_cfg(mut cfg: Cfg, t: &Trace) -> Cfg {
    cfg.members = t.members;
    cfg.resources = t.resources.max(1);
    cfg.liveness = false;
    cfg
}

/// The state with what no protocol step can tell apart made equal, so that the search visits each
/// class of states once (a bisimulation of the model's steps, not an approximation):
///
/// - zxids: only their order and equality matter (node order, tokens compared with claims' czxid,
///   the member node a write was fenced on), so every zxid-derived value is renumbered 1, 2, ... in
///   order and `zxid` set to the largest; the next write still gets a larger one;
/// - a token or coordinator node no step will read (the claim not held, the office not held);
/// - history only the invariants read (`ghost`; conformance checks labels, not invariants);
/// - `joined` when joins are not ordered (nothing else reads it).
pub fn canon(p: &Proto, s: &St) -> St {
    let mut n = s.clone();
    for m in 0..MAX_M {
        let x = &mut n.mem[m];
        for r in 0..MAX_R {
            if x.held & (1 << r) == 0 {
                x.tokens[r] = 0;
            }
        }
        if x.coord == 0 {
            x.cnode = 0;
        }
        if !p.cfg.ordered_joins {
            x.joined = false;
        }
    }
    for q in n.net.iter_mut() {
        for r in 0..MAX_R {
            if q.mask & (1 << r) == 0 {
                q.tokens[r] = 0;
            }
        }
    }
    n.ghost = Ghost::default();
    // every zxid-derived value, renumbered in order (0 stays 0: none)
    let mut vals: Vec<u8> = vec![];
    {
        let mut add = |v: u8| {
            if v != 0 {
                vals.push(v)
            }
        };
        n.nodes.iter().for_each(|nd| add(nd.seq));
        n.claims.iter().flatten().for_each(|c| add(c.czxid));
        n.assign.iter().flatten().for_each(|a| add(a.0));
        for q in &n.net {
            add(q.node);
            q.tokens.iter().for_each(|&t| add(t));
        }
        for x in &n.mem {
            add(x.node);
            add(x.cnode);
            x.tokens.iter().for_each(|&t| add(t));
        }
        match n.op {
            Op::Read { node, .. } | Op::Fenced { node, .. } | Op::Scanned { node, .. } => add(node),
            Op::Idle => {}
        }
    }
    vals.sort_unstable();
    vals.dedup();
    let map = |v: u8| -> u8 {
        if v == 0 {
            0
        } else {
            vals.binary_search(&v).map(|i| i as u8 + 1).unwrap_or(v)
        }
    };
    n.nodes.iter_mut().for_each(|nd| nd.seq = map(nd.seq));
    n.claims.iter_mut().flatten().for_each(|c| c.czxid = map(c.czxid));
    n.assign.iter_mut().flatten().for_each(|a| a.0 = map(a.0));
    for q in n.net.iter_mut() {
        q.node = map(q.node);
        q.tokens.iter_mut().for_each(|t| *t = map(*t));
    }
    for x in n.mem.iter_mut() {
        x.node = map(x.node);
        x.cnode = map(x.cnode);
        x.tokens.iter_mut().for_each(|t| *t = map(*t));
    }
    match &mut n.op {
        Op::Read { node, .. } | Op::Fenced { node, .. } | Op::Scanned { node, .. } => *node = map(*node),
        Op::Idle => {}
    }
    n.zxid = vals.len() as u8;
    n
}

/// Searches the model (configured by `cfg`, its sizes set from the trace) for a path whose labels
/// are the trace's, visiting at most `max_states` (state, position) pairs.
///
/// Two searches, the first a guided shortcut, the second complete:
///
/// 1. a member whose lines have all been matched dies at once (a worker whose stream ends was
///    killed: the explorer's and the campaign's kills), with at most a tenth of the states; a path
///    found so is a path of the model, so the trace conforms;
/// 2. otherwise every path: a member dies silently at any step after its last line.
pub fn check_trace(cfg: Cfg, t: &Trace, max_states: usize) -> Verdict {
    if t.members == 0 {
        return Verdict::OutOfBounds("no members".into());
    }
    let p = Proto {
        cfg: conform_cfg(cfg, t),
    };
    let first = search(&p, t, max_states / 10, true);
    if let Verdict::Conforms { .. } = first {
        return first;
    }
    match search(&p, t, max_states, false) {
        Verdict::Conforms { states } => Verdict::Conforms {
            states: states + max_states / 10,
        },
        v => v,
    }
}

/// The search: states are canonical ([`canon`]), explored best-first (the furthest trace position
/// first) and breadth first within a position (the shortest unobservable way to the next label
/// first). A step whose label set is empty may come anywhere; a step with labels must produce
/// exactly the trace's next labels (as a set). With `eager`, a member past its last line dies before
/// anything else happens.
fn search(p: &Proto, t: &Trace, max_states: usize, eager: bool) -> Verdict {
    let n_items = t.items.len();
    let mut seen: HashSet<(St, usize)> = HashSet::new();
    let mut levels: Vec<VecDeque<St>> = vec![VecDeque::new(); n_items + 1];
    for s in p.init_states() {
        let s = canon(p, &s);
        if seen.insert((s.clone(), 0)) {
            levels[0].push_back(s);
        }
    }
    // a member dies silently only after its last line (a killed worker's stream just ends)
    let mut last = [0usize; MAX_M];
    for (k, item) in t.items.iter().enumerate() {
        let m = match item {
            Item::Step(e) => e.member(),
            Item::Works(m, _) => Some(*m),
        };
        if let Some(m) = m {
            last[m as usize] = k + 1;
        }
    }
    let mut best = 0;
    let mut acts = vec![];
    let mut want: Vec<Ev> = vec![];
    while let Some(i) = (0..levels.len()).rev().find(|&i| !levels[i].is_empty()) {
        if i == n_items {
            return Verdict::Conforms { states: seen.len() };
        }
        if seen.len() >= max_states {
            break;
        }
        let s = levels[i].pop_front().expect("non-empty level");
        if let Item::Works(m, r) = t.items[i] {
            // a predicate: holds here (then the next item), or this state is a dead end
            if p.owns(&s, m as usize, r as usize) {
                best = best.max(i + 1);
                if seen.insert((s.clone(), i + 1)) {
                    levels[i + 1].push_back(s);
                }
            }
            continue;
        }
        acts.clear();
        p.actions(&s, &mut acts);
        if eager {
            let done = (0..p.cfg.members).find(|&m| s.mem[m].alive && last[m] <= i);
            if let Some(m) = done {
                acts.retain(|a| *a == Act::Crash(m as u8));
            }
        }
        for a in acts.iter() {
            if matches!(a, Act::Crash(m) if last[*m as usize] > i) {
                continue;
            }
            let Some(n) = p.next_state(&s, *a) else { continue };
            if !p.within_boundary(&n) {
                continue;
            }
            let obs = observe(a, &s, &n, t.deletions_recorded);
            let j = i + obs.len();
            if j > n_items {
                continue;
            }
            if !obs.is_empty() {
                want.clear();
                for item in &t.items[i..j] {
                    match item {
                        Item::Step(e) => want.push(*e),
                        Item::Works(..) => want.clear(),
                    }
                }
                want.sort();
                if want != obs {
                    continue;
                }
            }
            best = best.max(j);
            let n = canon(p, &n);
            if seen.insert((n.clone(), j)) {
                levels[j].push_back(n);
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
