//! The Rebalanser protocol (docs/protocol.md) as a finite model for stateright's exhaustive checker.
//!
//! One state holds what the ZooKeeper leader stores (member nodes, claims, assignments, `G/epoch`,
//! the Global Barrier's stop order, which resources exist), the requests still in flight on the
//! network, each member's local view (the session its connection is in and the one its loop follows,
//! connection, lease, claims it holds and which of them are verified and watched on this connection,
//! what it works on, coordinator office, whether its loop is busy in a callback, notifications its
//! slow follower has not delivered yet), the operator's failover, and history ("ghost") variables that
//! the invariants read. Every action is one step of one actor; `format_action` prints it.

use stateright::{Model, Property};
use std::fmt;

pub const MAX_M: usize = 3;
pub const MAX_R: usize = 2;
/// Sessions per member: the first one and one after an expiry (policy `reconnect`).
pub const SESS_PER_MEMBER: u8 = 2;

/// The protected rules (each can be removed for a negative control) and modelled assumptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rules {
    /// Owners watch their own claims: a claim deleted from outside stops its owner at once.
    pub owners_watch_claims: bool,
    /// Fenced writes (coordinator writes, release batches) `check` the writer's member node.
    pub fenced_check_member_node: bool,
    /// The lease is renewed only by a `sync` answered through the leader (not by any read).
    pub lease_through_leader: bool,
    /// At a reconnection's handshake every held claim becomes unverified on the new connection;
    /// `owns` needs it verified (the connection listener's `setWatches`, or the loop's re-check).
    pub unverified_until_rechecked: bool,
    /// The failover ends the dead instance by closing its session (read `M` and the session record,
    /// attach, close); without it, the earlier order: delete `M`, list the claims, delete those of
    /// the dead session at the version read.
    pub failover_closes_session: bool,
    /// A join happens only in the session whose start the member's loop has processed.
    pub join_in_processed_session: bool,
    /// A start callback runs only under a claim verified on the current connection: an unverified
    /// claim is read first (on the current connection); one found gone is not started, it is wanted
    /// again and claimed anew.
    pub start_verified: bool,
    /// A claim whose watch reported it changed (its data set by someone else) counts again only once
    /// a read sent after a `sync` finds it still ours with its token; without it, the read alone
    /// (which a server reached after a reconnection may answer from a view that lacks the claim's
    /// deletion) verifies it.
    pub reverify_behind_sync: bool,
}

impl Rules {
    pub const ALL: Rules = Rules {
        owners_watch_claims: true,
        fenced_check_member_node: true,
        lease_through_leader: true,
        unverified_until_rechecked: true,
        failover_closes_session: true,
        join_in_processed_session: true,
        start_verified: true,
        reverify_behind_sync: true,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    ResourceBarrier,
    GlobalBarrier,
}

/// The model's parameters: sizes, budgets (bounds) and rules.
#[derive(Clone, Debug)]
pub struct Cfg {
    pub members: usize,
    pub resources: usize,
    pub algo: Algo,
    pub rules: Rules,
    /// Session timeout T and lease length L, in ticks of the leader's clock (L < T).
    pub t: u8,
    pub l: u8,
    /// Bound on ZooKeeper writes (zxid) explored.
    pub max_zxid: u8,
    /// Fault budgets.
    pub crashes: u8,
    pub disconnects: u8,
    pub cuts: u8,
    pub admin_deletes: u8,
    /// An administrator sets a claim's data (the claim stays; its owner's watch fires `CHANGED`).
    pub admin_sets: u8,
    pub group_deletes: u8,
    pub standbys: u8,
    pub leaves: u8,
    /// Faults of all kinds together in one run.
    pub faults: u8,
    /// Ticks a member's clock may fall behind the leader's (bounded drift).
    pub drift: u8,
    /// Steps of the fault-free continuation the liveness checks allow.
    pub quiet_steps: usize,
    /// Budgets of the steps that are not faults: a member loop busy in a long callback (it does no
    /// loop step until the callback returns), a member's server a slow follower (notifications lag,
    /// syncs still answered through the leader), a resource created or deleted by an outsider.
    pub busy: u8,
    pub slows: u8,
    pub resource_changes: u8,
    /// Whether the liveness properties are checked (they cost a continuation per state).
    pub liveness: bool,
    /// Conformance (docs/protocol.md, "Conformance"): the outsider's deletions of a member node and
    /// of a session (the explorer's eviction and `expire` fault), both 0 in the exhaustive checks.
    pub node_deletes: u8,
    pub expiries: u8,
    /// Conformance: the coordinator may write any plan over the live member nodes (each resource to
    /// one of them or to none), not only the balanced, sticky one: a projection onto fewer resources
    /// than the run had cannot see what the real plan balanced, and the run may delete resources.
    pub any_plan: bool,
    /// Members join for the first time in index order (a symmetry reduction); off for conformance,
    /// whose members are named by the trace.
    pub ordered_joins: bool,
}

impl Cfg {
    pub fn small(algo: Algo) -> Cfg {
        Cfg {
            members: 3,
            resources: 2,
            algo,
            rules: Rules::ALL,
            t: 3,
            l: 2,
            max_zxid: 9,
            crashes: 1,
            disconnects: 1,
            cuts: 1,
            admin_deletes: 1,
            admin_sets: 0,
            group_deletes: 1,
            standbys: 0,
            leaves: 0,
            busy: 0,
            slows: 0,
            resource_changes: 0,
            drift: 0,
            faults: 2,
            quiet_steps: 200,
            liveness: true,
            node_deletes: 0,
            expiries: 0,
            any_plan: false,
            ordered_joins: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Claim {
    pub sess: u8,
    pub czxid: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub seq: u8,
    pub member: u8,
    pub sess: u8,
}

/// A release batch in flight: `multi(check(member node)?, delete(G/owners/r) for r in mask)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Release {
    pub member: u8,
    pub sess: u8,
    pub node: u8,
    pub mask: u8,
    pub tokens: [u8; MAX_R],
}

/// `Mem::lag`: the slow follower has not notified the deletion of the member node yet.
pub const LAG_NODE: u8 = 0x80;

impl Mem {
    /// Claims in `mask` are known lost (a watch fired, a read found them gone): `owns` is false for
    /// them at once and the loop's revoke (abstracted into this step) forgets them.
    fn drop_claims(&mut self, mask: u8) {
        self.held &= !mask;
        self.working &= !mask;
        self.verified &= !mask;
        self.watching &= !mask;
        self.lag &= !mask;
        self.chg &= !mask;
        self.reported &= !mask;
        self.synced &= !mask;
        self.stale &= !mask;
    }
    /// The connection is gone: the watches went with it, and what its server had not notified or
    /// answered yet with them.
    fn connection_gone(&mut self) {
        self.watching = 0;
        self.lag = 0;
        self.chg = 0;
        self.synced = 0;
    }
    /// The watches of the claims in `mask` reported a change of their data: `owns` is false for them
    /// at once (the watch callback revokes their verification) and they wait for re-verification;
    /// the watch fired, so it is no longer armed.
    fn changed(&mut self, mask: u8) {
        let mask = mask & self.held;
        self.verified &= !mask;
        self.watching &= !mask;
        self.reported |= mask;
        self.synced &= !mask;
    }
    /// What refers to claims it no longer holds is forgotten with them.
    fn normalize(&mut self) {
        self.chg &= self.held;
        self.reported &= self.held;
        self.synced &= self.reported;
        self.stale &= self.reported;
    }
    /// It has left the group (a graceful leave, a standby): no work, no claims, no member node, no office,
    /// no assignment, no stop marker.
    fn out_of_group(&mut self) {
        self.working = 0;
        self.held = 0;
        self.node = 0;
        self.coord = 0;
        self.assigned = 0;
        self.marker = false;
    }
    /// Its member node is gone: it revokes all work and rejoins.
    fn evicted(&mut self) {
        self.working = 0;
        self.node = 0;
        self.coord = 0;
        self.marker = false;
        self.lag &= !LAG_NODE;
    }
}

/// `Mem::pend`: what the connection's return left to do.
pub const PEND_SETWATCHES: u8 = 1; // the connection listener's setWatches for every held claim
pub const PEND_RECHECK: u8 = 2; // the member loop's re-check (own node, claims), queued as CONNECTED

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Mem {
    pub alive: bool,     // the process runs
    pub sess: u8,        // its connection's session (0: none yet); id = member * SESS_PER_MEMBER + n + 1
    pub lsess: u8,       // the session its member loop follows (differs from sess until it processes LOST)
    pub sessions: u8,    // sessions made so far
    pub connected: bool, // the connection is up
    pub cut: bool,       // its server is a follower cut off from the leader (reads answered, syncs not)
    pub node: u8,        // the member node it joined with (seq; 0: none)
    pub lease: u8,       // lease ticks left (0: lapsed)
    pub assigned: u8,    // resources its assignment names (bitmask)
    pub held: u8,        // claims it believes it holds
    pub tokens: [u8; MAX_R],
    pub working: u8,  // resources it works on (owns() true)
    pub coord: u8,    // epoch its coordinator instance took office with (0: not coordinator)
    pub cnode: u8,    // the member node its coordinator instance took office as
    pub marker: bool, // stopped for the Global Barrier's stop order
    pub standby: bool,
    pub left: bool,
    pub behind: u8,   // ticks its clock lags the leader's
    pub joined: bool, // has joined at least once (members first join in index order: symmetry)
    pub verified: u8, // held claims verified on the current connection (owns() and a start need it)
    pub watching: u8, // held claims whose watch is armed on the current connection
    pub pend: u8,     // PEND_* bits
    pub busy: bool,   // its loop is inside a callback (no loop step until it returns)
    pub slow: bool,   // its server is a slow follower: notifications lag, syncs pass through the leader
    pub lag: u8,      // deletions of its claims its slow follower has not notified yet
    pub chg: u8,      // changes of its claims' data its slow follower has not notified yet
    pub reported: u8, // held claims whose watch reported a change: unverified until re-verified
    pub synced: u8,   // reported claims whose re-verification's sync has been answered (the read is next)
    pub stale: u8,    // reported claims deleted since: a server that has not caught up still shows them
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Idle,
    /// Read (after a sync) dead member `member`'s node `node` and its session record `sess`.
    Read {
        member: u8,
        node: u8,
        sess: u8,
    },
    /// The earlier order: deleted `M`.
    Fenced {
        member: u8,
        node: u8,
        sess: u8,
    },
    /// The earlier order: listed `G/owners`; the claims of `sess` in `mask`.
    Scanned {
        member: u8,
        node: u8,
        sess: u8,
        mask: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct St {
    pub zxid: u8,
    pub group: bool,
    pub epoch: u8, // version of G/epoch (0: missing)
    pub barrier_stop: bool,
    pub nodes: Vec<Node>, // sorted by seq
    pub claims: [Option<Claim>; MAX_R],
    pub present: u8,                                 // resources that exist (G/resources)
    pub assign: [Option<(u8, u8)>; MAX_M],           // per member: (member node written for, mask)
    pub ttl: [u8; MAX_M * SESS_PER_MEMBER as usize], // per session: ticks left at the leader (0: ended)
    pub net: Vec<Release>,
    pub mem: [Mem; MAX_M],
    pub op: Op,
    pub budget: Budget,
    pub ghost: Ghost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Budget {
    pub crashes: u8,
    pub disconnects: u8,
    pub cuts: u8,
    pub admin_deletes: u8,
    pub admin_sets: u8,
    pub group_deletes: u8,
    pub standbys: u8,
    pub leaves: u8,
    pub drift: u8,
    pub node_deletes: u8,
    pub expiries: u8,
    pub busy: u8,
    pub slows: u8,
    pub resource_changes: u8,
}

/// History the invariants read; never read by the protocol's actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// Per resource, members whose claim was deleted from outside while they could not hear of it.
    pub window: [u8; MAX_R],
    pub last_token: [u8; MAX_R],
    pub last_worker: [u8; MAX_R], // member + 1
    pub token_regressed: bool,
    pub stale_write: bool,
    pub failover_wrong: bool,
    pub release_foreign: bool,
    /// A start callback ran under a claim that no longer existed at the leader, outside the
    /// documented window (its owner had heard, or could have heard, of the deletion).
    pub start_under_gone_claim: bool,
    /// A start was called off: its claim, read on the current connection, was found gone.
    pub start_called_off: bool,
    /// Resources whose claim an administrator deleted by hand (not with the whole group).
    pub admin_deleted: u8,
    /// A claim whose watch reported a change was found still ours by its re-verification, and its
    /// work went on.
    pub reverified: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Act {
    // members
    Join(u8),
    ReadAssignment(u8),
    Claim(u8, u8),
    Start(u8, u8),
    Renew(u8),
    ReadBarrier(u8),
    /// The connection comes back in the same session: the handshake (the leader touches the
    /// session; the lease is renewed at once), on kazoo's connection thread.
    Handshake(u8),
    /// The claims' re-check thread (woken by the connection listener, beside the member loop): its
    /// `setWatches` for every held claim is answered (with the rule).
    SetWatches(u8),
    /// The member loop reaches its re-check (the queued CONNECTED): own node, claims read again.
    Recheck(u8),
    /// The session expired; kazoo connects in a new session (the loop has not processed LOST yet).
    NewSession(u8),
    /// The member loop processes LOST and the new CONNECTED: all work stopped, to join again.
    SessionEnded(u8),
    /// The member loop enters a long callback (a stop or start callback up to its timeout).
    Busy(u8),
    /// The callback returns.
    Free(u8),
    /// The slow follower delivers the claim deletions it had not notified yet.
    CatchUp(u8),
    /// The member loop, re-verifying the claims whose watch reported a change: its `sync` is
    /// answered (through the leader, after the notifications before it).
    ReverifySync(u8),
    /// The member loop reads those claims (behind the sync, with the rule): one still ours with its
    /// token counts again (watch re-armed), any other is lost.
    ReverifyRead(u8),
    Standby(u8),
    Rejoin(u8),
    Leave(u8),
    // coordinator
    TakeOffice(u8),
    WritePlan(u8),
    /// Conformance only (`any_plan`): coordinator `m` writes plan `code` (resource r goes to member
    /// `code / (M+1)^r % (M+1)`, the value M meaning none).
    WriteAnyPlan(u8, u8),
    // ZooKeeper
    Deliver(u8),
    FollowerGivesUp(u8),
    Tick,
    TickLagging(u8),
    // operator
    /// The kubelet reports `m`'s container ended; after a sync the operator reads `M` and the
    /// session record.
    FailoverRead(u8),
    /// Attaches to the dead session and closes it (a no-op if it has expired).
    FailoverClose,
    /// The earlier order: delete `M` at the version read; list `G/owners`; delete the claims of
    /// the dead session at the version read.
    FailoverDeleteNode,
    FailoverScan,
    FailoverDeleteClaims,
    RecreateGroup,
    // faults and outsiders
    Crash(u8),
    Disconnect(u8),
    Cut(u8),
    /// Member `m`'s server becomes a slow follower (it still reaches the leader).
    Slow(u8),
    AdminDeleteClaim(u8),
    /// An administrator sets the data of claim `r` (the node stays, its `czxid` too).
    AdminSetClaim(u8),
    DeleteGroup,
    /// An outsider deletes resource `r` / creates it again.
    DeleteResource(u8),
    CreateResource(u8),
    /// Conformance only: an outsider deletes member `m`'s node (the explorer's eviction).
    AdminDeleteNode(u8),
    /// Conformance only: member `m`'s session is ended at the server by an outsider (the explorer's
    /// `expire` fault: a second client closes it); the server closes its connection.
    Expire(u8),
}

impl Act {
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Act::Crash(_)
                | Act::Disconnect(_)
                | Act::Cut(_)
                | Act::Slow(_)
                | Act::AdminDeleteClaim(_)
                | Act::AdminSetClaim(_)
                | Act::DeleteGroup
                | Act::DeleteResource(_)
                | Act::CreateResource(_)
                | Act::AdminDeleteNode(_)
                | Act::Expire(_)
                | Act::Standby(_)
                | Act::Leave(_)
                | Act::TickLagging(_)
                | Act::Busy(_)
        )
    }
}

fn name(m: u8) -> char {
    (b'A' + m) as char
}

impl fmt::Display for Act {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Act::Join(m) => write!(f, "member {}: joins (creates its member node)", name(m)),
            Act::ReadAssignment(m) => write!(
                f,
                "member {}: reads its assignment; stops and releases what left it",
                name(m)
            ),
            Act::Claim(m, r) => write!(f, "member {}: claims r{} (creates G/owners/r{})", name(m), r, r),
            Act::Start(m, r) => write!(f, "member {}: starts work on r{}", name(m), r),
            Act::Renew(m) => write!(f, "member {}: renews its lease", name(m)),
            Act::ReadBarrier(m) => write!(f, "member {}: reads G/barrier", name(m)),
            Act::Handshake(m) => write!(
                f,
                "member {}: reconnects in its session (handshake: lease renewed)",
                name(m)
            ),
            Act::SetWatches(m) => write!(
                f,
                "member {}: the claims' re-check thread: setWatches on its claims answered",
                name(m)
            ),
            Act::Recheck(m) => write!(
                f,
                "member {}: loop re-checks after the reconnection (own node, claims)",
                name(m)
            ),
            Act::NewSession(m) => write!(f, "member {}: session expired; connects in a new one", name(m)),
            Act::SessionEnded(m) => write!(
                f,
                "member {}: loop processes the lost session (stops all work)",
                name(m)
            ),
            Act::Busy(m) => write!(f, "member {}: loop enters a long callback", name(m)),
            Act::Free(m) => write!(f, "member {}: the callback returns", name(m)),
            Act::CatchUp(m) => write!(f, "server: {}'s slow follower delivers its notifications", name(m)),
            Act::ReverifySync(m) => write!(
                f,
                "member {}: loop re-verifies its changed claims: its sync is answered",
                name(m)
            ),
            Act::ReverifyRead(m) => write!(
                f,
                "member {}: loop re-verifies its changed claims: reads them (ours: verified; else lost)",
                name(m)
            ),
            Act::Standby(m) => write!(f, "member {}: a stop callback overruns: steps aside (standby)", name(m)),
            Act::Rejoin(m) => write!(f, "member {}: callbacks returned: rejoins from standby", name(m)),
            Act::Leave(m) => write!(f, "member {}: leaves gracefully (closes its session)", name(m)),
            Act::TakeOffice(m) => write!(f, "coordinator {}: predecessor gone, takes the next epoch", name(m)),
            Act::WritePlan(m) => write!(f, "coordinator {}: fenced write of the plan", name(m)),
            Act::WriteAnyPlan(m, p) => write!(f, "coordinator {}: fenced write of plan #{}", name(m), p),
            Act::Deliver(i) => write!(f, "server: a release batch in flight (#{}) reaches the leader", i),
            Act::FollowerGivesUp(m) => {
                write!(
                    f,
                    "server: {}'s follower gives up on the leader, closes its connections",
                    name(m)
                )
            }
            Act::Tick => write!(f, "clock: one tick"),
            Act::TickLagging(m) => write!(f, "clock: one tick, member {}'s clock lags", name(m)),
            Act::FailoverRead(m) => write!(
                f,
                "operator: kubelet reports {}'s container ended; reads M and its session record",
                name(m)
            ),
            Act::FailoverClose => write!(f, "operator: attaches to the dead session and closes it"),
            Act::FailoverDeleteNode => write!(f, "operator: deletes M (earlier order)"),
            Act::FailoverScan => write!(f, "operator: lists G/owners for the dead session's claims"),
            Act::FailoverDeleteClaims => write!(f, "operator: deletes the listed claims at the version read"),
            Act::RecreateGroup => write!(f, "operator: re-creates the group"),
            Act::Crash(m) => write!(f, "fault: member {}'s process dies", name(m)),
            Act::Disconnect(m) => write!(f, "fault: member {}'s connection drops", name(m)),
            Act::Cut(m) => write!(f, "fault: member {}'s server is cut off from the leader", name(m)),
            Act::Slow(m) => write!(f, "fault: member {}'s server becomes a slow follower", name(m)),
            Act::AdminDeleteClaim(r) => write!(f, "administrator: deletes G/owners/r{}", r),
            Act::AdminSetClaim(r) => write!(f, "administrator: sets the data of G/owners/r{}", r),
            Act::DeleteGroup => write!(f, "administrator: deletes the whole group G"),
            Act::DeleteResource(r) => write!(f, "administrator: deletes resource r{}", r),
            Act::CreateResource(r) => write!(f, "administrator: creates resource r{}", r),
            Act::AdminDeleteNode(m) => write!(f, "administrator: deletes member {}'s node", name(m)),
            Act::Expire(m) => write!(f, "fault: member {}'s session is closed at the server", name(m)),
        }
    }
}

pub struct Proto {
    pub cfg: Cfg,
}

fn bits(mask: u8, n: usize) -> impl Iterator<Item = usize> {
    (0..n).filter(move |i| mask & (1 << i) != 0)
}

impl Budget {
    fn total(&self) -> u8 {
        self.crashes
            + self.disconnects
            + self.cuts
            + self.admin_deletes
            + self.admin_sets
            + self.group_deletes
            + self.standbys
            + self.leaves
            + self.drift
            + self.node_deletes
            + self.expiries
            + self.busy
            + self.slows
            + self.resource_changes
    }
}

impl St {
    fn sess_alive(&self, s: u8) -> bool {
        s != 0 && self.ttl[(s - 1) as usize] > 0
    }
    fn node_exists(&self, seq: u8) -> bool {
        seq != 0 && self.nodes.iter().any(|n| n.seq == seq)
    }
    /// Can the member hear of changes at once (connected through a server that reaches the leader)?
    fn hears(&self, m: usize) -> bool {
        let x = &self.mem[m];
        x.alive && x.connected && !x.cut
    }
    fn next_zxid(&mut self) -> u8 {
        self.zxid += 1;
        self.zxid
    }
    fn owner_member(&self, sess: u8) -> usize {
        ((sess - 1) / SESS_PER_MEMBER) as usize
    }

    /// Deletes the claim on `r` (someone other than its session did it when `outside`): the owner's
    /// claim watch fires if it is armed on its connection and it can hear of it (a slow follower
    /// notifies later); otherwise the documented window opens, until its lease runs out or is renewed.
    fn delete_claim(&mut self, r: usize, outside: bool, rules: &Rules) {
        let Some(c) = self.claims[r].take() else { return };
        let m = self.owner_member(c.sess);
        if !outside || self.mem[m].sess != c.sess {
            return;
        }
        let bit = 1u8 << r;
        let x = self.mem[m];
        if x.working & bit == 0 && x.held & bit == 0 {
            return;
        }
        if x.reported & bit != 0 {
            // a claim waiting for re-verification: its watch fired (a change), so nothing reports
            // this deletion, and a server that has not caught up with it still shows the claim
            self.mem[m].stale |= bit;
        }
        let watched = x.watching & bit != 0 || !rules.owners_watch_claims;
        if self.hears(m) && watched {
            if !rules.owners_watch_claims {
                return; // nobody watches: the owner never notices (finding G)
            }
            if x.slow {
                self.mem[m].lag |= bit;
                self.ghost.window[r] |= 1 << m;
            } else {
                self.mem[m].drop_claims(bit);
            }
        } else {
            self.ghost.window[r] |= 1 << m;
        }
    }

    /// The member node of `m` is gone while `m` hears of it: it revokes all work and rejoins (a slow
    /// follower notifies it later).
    fn evict_if_hears(&mut self, m: usize) {
        if self.hears(m) {
            if self.mem[m].slow {
                self.mem[m].lag |= LAG_NODE;
            } else {
                self.mem[m].evicted();
            }
        }
    }

    /// Someone else sets the data of the claim on `r` (it stays, with its `czxid`): the owner's
    /// claim watch fires `CHANGED` if it is armed on its connection and it can hear of it (a slow
    /// follower notifies later). A change it cannot hear of is not modelled as reported: the claim is
    /// unchanged as far as the protocol goes, and a `setWatches` firing for it later would send it
    /// through the same re-verification, which finds it.
    fn change_claim(&mut self, r: usize, rules: &Rules) {
        let Some(c) = self.claims[r] else { return };
        let m = self.owner_member(c.sess);
        let bit = 1u8 << r;
        let x = self.mem[m];
        if x.sess != c.sess || x.held & bit == 0 || x.tokens[r] != c.czxid {
            return;
        }
        if !rules.owners_watch_claims || x.watching & bit == 0 || !self.hears(m) {
            return;
        }
        if x.slow {
            self.mem[m].chg |= bit;
        } else {
            self.mem[m].changed(bit);
        }
    }

    /// The slow follower's notifications reach member `m` (before any sync answer after them); its
    /// server has caught up with the leader, so no read shows a claim deleted before this any more.
    fn catch_up(&mut self, m: usize) {
        let chg = self.mem[m].chg;
        self.mem[m].chg = 0;
        self.mem[m].changed(chg);
        self.mem[m].stale = 0;
        let lag = self.mem[m].lag;
        self.mem[m].lag = 0;
        self.mem[m].drop_claims(lag & !LAG_NODE);
        if lag & LAG_NODE != 0 && !self.node_exists(self.mem[m].node) {
            self.mem[m].evicted();
        }
    }

    /// A renewal of `m`'s lease through the leader: the window of a claim deleted while it could not
    /// hear of it ends here (the lease from before the deletion no longer bounds its work).
    fn renewed(&mut self, m: usize, l: u8) {
        let x = self.mem[m];
        if x.lag != 0 || x.chg != 0 || x.stale != 0 {
            self.catch_up(m); // the sync's answer comes after the notifications before it
        }
        self.mem[m].lease = l;
        self.mem[m].behind = 0;
        for r in 0..MAX_R {
            self.ghost.window[r] &= !(1 << m);
        }
    }

    fn end_session(&mut self, s: u8, rules: &Rules) {
        self.ttl[(s - 1) as usize] = 0;
        for r in 0..MAX_R {
            if self.claims[r].map(|c| c.sess) == Some(s) {
                self.delete_claim(r, false, rules);
            }
        }
        self.nodes.retain(|n| n.sess != s);
    }
}

impl Proto {
    pub fn new(cfg: Cfg) -> Proto {
        Proto { cfg }
    }

    fn m(&self) -> usize {
        self.cfg.members
    }
    fn r(&self) -> usize {
        self.cfg.resources
    }
    pub fn all_res(&self) -> u8 {
        ((1u16 << self.r()) - 1) as u8
    }

    /// Balanced (max - min <= 1), sticky plan over the live member nodes (in seq order).
    fn plan(&self, s: &St) -> Vec<(u8, u8)> {
        let live: Vec<&Node> = s.nodes.iter().collect();
        let n = live.len();
        if n == 0 {
            return vec![];
        }
        let q = self.r() / n;
        let extra = self.r() % n;
        let mut cur: Vec<u8> = live
            .iter()
            .map(|nd| match s.assign[nd.member as usize] {
                Some((seq, mask)) if seq == nd.seq => mask & s.present,
                _ => 0,
            })
            .collect();
        // resolve duplicates: the first member in order keeps a resource
        let mut taken = 0u8;
        for c in cur.iter_mut() {
            *c &= !taken;
            taken |= *c;
        }
        // members holding most get the q+1 quotas
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(cur[i].count_ones()));
        let mut quota = vec![q; n];
        for &i in order.iter().take(extra) {
            quota[i] = q + 1;
        }
        let mut free = s.present & !taken;
        for i in 0..n {
            while cur[i].count_ones() as usize > quota[i] {
                let hi = 7 - cur[i].leading_zeros() as u8;
                cur[i] &= !(1 << hi);
                free |= 1 << hi;
            }
        }
        for i in 0..n {
            while (cur[i].count_ones() as usize) < quota[i] && free != 0 {
                let lo = free.trailing_zeros() as u8;
                free &= !(1 << lo);
                cur[i] |= 1 << lo;
            }
        }
        live.iter().zip(cur).map(|(nd, mask)| (nd.member, mask)).collect()
    }

    /// Plan `code` of `WriteAnyPlan`: each resource to one of the live member nodes (in member order)
    /// or to none; `None` when it names a member without a node.
    fn any_plan(&self, s: &St, code: u8) -> Option<Vec<(u8, u8)>> {
        let k = self.m() + 1;
        let mut masks = [0u8; MAX_M];
        let mut code = code as usize;
        for r in 0..self.r() {
            let who = code % k;
            code /= k;
            if who < self.m() {
                if !s.nodes.iter().any(|nd| nd.member as usize == who) || s.present & (1 << r) == 0 {
                    return None;
                }
                masks[who] |= 1 << r;
            }
        }
        Some(
            s.nodes
                .iter()
                .map(|nd| (nd.member, masks[nd.member as usize]))
                .collect(),
        )
    }

    fn lowest_node(&self, s: &St) -> Option<Node> {
        s.nodes.first().copied()
    }

    /// The checks every fenced coordinator write starts with.
    fn fenced_ok(&self, s: &St, m: usize) -> bool {
        let x = &s.mem[m];
        s.group && s.epoch == x.coord && (!self.cfg.rules.fenced_check_member_node || s.node_exists(x.cnode))
    }

    fn goal_coordinator(&self, s: &St) -> bool {
        match self.lowest_node(s) {
            Some(n) => s.mem[n.member as usize].coord == s.epoch && s.epoch != 0,
            None => !self.any_can_join(s),
        }
    }

    fn any_can_join(&self, s: &St) -> bool {
        (0..self.m()).any(|m| {
            let x = &s.mem[m];
            x.alive && !x.left && (s.sess_alive(x.sess) || x.sessions < SESS_PER_MEMBER)
        })
    }

    fn goal_claimed(&self, s: &St) -> bool {
        if !s.group {
            return false;
        }
        let live_members: Vec<usize> = (0..self.m())
            .filter(|&m| s.mem[m].alive && s.mem[m].node != 0 && s.node_exists(s.mem[m].node))
            .collect();
        if live_members.is_empty() {
            return !self.any_can_join(s);
        }
        (0..self.r())
            .filter(|&r| s.present & (1 << r) != 0)
            .all(|r| match s.claims[r] {
                Some(c) => {
                    let m = s.owner_member(c.sess);
                    live_members.contains(&m) && self.owns(s, m, r)
                }
                None => false,
            })
    }

    /// `owns(r)` of member `m`: it works on `r` (started, not revoked), in the session its loop
    /// follows, with its lease, and (with the rule) the claim verified on the current connection.
    pub fn owns(&self, s: &St, m: usize, r: usize) -> bool {
        let x = &s.mem[m];
        let bit = 1u8 << r;
        x.alive
            && x.working & bit != 0
            && x.lease > 0
            && x.lsess == x.sess
            && (!self.cfg.rules.unverified_until_rechecked || x.verified & bit != 0)
    }

    /// A fault-free continuation chosen by a fixed priority order (the fairness the liveness checks
    /// assume: every enabled protocol step is eventually taken, and the clock ticks only when no
    /// protocol step is enabled). Returns whether `goal` is reached within `quiet_steps`.
    fn quiet_reaches(&self, s: &St, goal: fn(&Proto, &St) -> bool) -> bool {
        let mut cur = s.clone();
        let mut acts = Vec::new();
        for _ in 0..self.cfg.quiet_steps {
            if goal(self, &cur) {
                return true;
            }
            acts.clear();
            self.actions_inner(&cur, &mut acts, false);
            let pick = acts
                .iter()
                .copied()
                .filter(|a| !a.is_fault() && !matches!(a, Act::Tick | Act::Renew(_)))
                .find(|a| self.next_state_inner(&cur, *a, false).map_or(false, |n| n != cur))
                .or_else(|| {
                    acts.iter()
                        .copied()
                        .find(|a| matches!(a, Act::Renew(_)))
                        .filter(|a| self.next_state_inner(&cur, *a, false).map_or(false, |n| n != cur))
                })
                .or(Some(Act::Tick));
            match pick.and_then(|a| self.next_state_inner(&cur, a, false)) {
                Some(n) => cur = n,
                None => return goal(self, &cur),
            }
        }
        goal(self, &cur)
    }

    fn actions_inner(&self, s: &St, out: &mut Vec<Act>, bounded: bool) {
        let c = &self.cfg;
        let rules = c.rules;
        let writes_ok = !bounded || s.zxid < c.max_zxid;
        for mi in 0..self.m() {
            let m = mi as u8;
            let x = &s.mem[mi];
            if !x.alive {
                continue;
            }
            if x.busy {
                out.push(Act::Free(m));
            }
            // the loop takes a step only when no callback holds it, in the session it follows
            let free = !x.busy;
            let in_session = free && x.lsess == x.sess;
            if free && x.lsess != x.sess {
                out.push(Act::SessionEnded(m));
            }
            if !x.connected {
                // kazoo reconnects on its own thread, whatever the loop is doing
                if s.sess_alive(x.sess) {
                    out.push(Act::Handshake(m));
                } else if x.sessions < SESS_PER_MEMBER {
                    out.push(Act::NewSession(m));
                }
                continue;
            }
            if x.pend & PEND_SETWATCHES != 0 && !x.cut {
                out.push(Act::SetWatches(m));
            }
            if x.lag != 0 || x.chg != 0 {
                out.push(Act::CatchUp(m));
            }
            if x.cut {
                // a follower cut off from the leader answers reads but forwards no write or sync,
                // and closes its client connections after syncLimit x tickTime
                out.push(Act::FollowerGivesUp(m));
            }
            if bounded && !x.cut && !x.slow && s.budget.slows < c.slows {
                out.push(Act::Slow(m));
            }
            if bounded && free && (x.working != 0 || x.held != 0) && s.budget.busy < c.busy {
                out.push(Act::Busy(m));
            }
            let cut = x.cut;
            if x.pend & PEND_RECHECK != 0 && in_session && !cut {
                out.push(Act::Recheck(m));
            }
            let changed = x.reported & x.held;
            if changed != 0 && in_session {
                if !rules.reverify_behind_sync {
                    out.push(Act::ReverifyRead(m));
                } else {
                    // a cut follower forwards no sync: the re-verification waits, as the re-check does
                    if changed & !x.synced != 0 && !cut {
                        out.push(Act::ReverifySync(m));
                    }
                    if changed & x.synced != 0 {
                        out.push(Act::ReverifyRead(m));
                    }
                }
            }
            if x.standby {
                // on standby it keeps its session: a dropped connection reconnects as any other
                if in_session {
                    out.push(Act::Rejoin(m));
                }
                continue;
            }
            let turn = !c.ordered_joins || x.joined || (0..mi).all(|k| s.mem[k].joined || !s.mem[k].alive);
            let join_loop = if rules.join_in_processed_session {
                in_session
            } else {
                free
            };
            if x.node == 0 && s.group && writes_ok && s.sess_alive(x.sess) && turn && !cut && join_loop {
                out.push(Act::Join(m));
            }
            if !in_session {
                continue;
            }
            if x.node != 0 && !cut {
                out.push(Act::ReadAssignment(m));
                if c.algo == Algo::GlobalBarrier {
                    out.push(Act::ReadBarrier(m));
                }
                if writes_ok {
                    for r in bits(x.assigned & !x.held, self.r()) {
                        // a create under a deleted group fails (no parent); the loop's own release of
                        // r is answered (or read back) before it claims r again
                        let releasing = s.net.iter().any(|q| q.sess == x.sess && q.mask & (1 << r) != 0);
                        if s.claims[r].is_none() && x.lease > 0 && s.group && !releasing {
                            out.push(Act::Claim(m, r as u8));
                        }
                    }
                }
                if x.coord == 0 && writes_ok && s.group && x.node != 0 {
                    if self.lowest_node(s).map(|n| n.seq) == Some(x.node) {
                        out.push(Act::TakeOffice(m));
                    }
                }
            }
            if x.coord != 0 && writes_ok && !cut {
                if c.any_plan {
                    let k = (self.m() + 1) as u16;
                    for code in 0..k.pow(self.r() as u32) {
                        out.push(Act::WriteAnyPlan(m, code as u8));
                    }
                } else {
                    out.push(Act::WritePlan(m));
                }
            }
            if x.node != 0 && !cut {
                if bounded && s.budget.standbys < c.standbys {
                    out.push(Act::Standby(m));
                }
                if bounded && s.budget.leaves < c.leaves && writes_ok {
                    out.push(Act::Leave(m));
                }
            }
            // a claim waiting for re-verification is read by it first (the start check's read is the
            // same read, behind the same sync)
            for r in bits(x.held & x.assigned & !x.working & !x.reported, self.r()) {
                if x.lease > 0 && !x.marker {
                    out.push(Act::Start(m, r as u8));
                }
            }
        }
        for mi in 0..self.m() {
            let x = &s.mem[mi];
            if !bounded {
                break;
            }
            if x.alive && s.budget.crashes < c.crashes {
                out.push(Act::Crash(mi as u8));
            }
            if x.alive && x.connected && s.budget.disconnects < c.disconnects {
                out.push(Act::Disconnect(mi as u8));
            }
            if x.alive && x.connected && !x.cut && s.budget.cuts < c.cuts {
                out.push(Act::Cut(mi as u8));
            }
            if x.alive && s.budget.drift < c.drift {
                out.push(Act::TickLagging(mi as u8));
            }
            if writes_ok && s.budget.node_deletes < c.node_deletes && s.node_exists(x.node) {
                out.push(Act::AdminDeleteNode(mi as u8));
            }
            if writes_ok && s.budget.expiries < c.expiries && x.alive && s.sess_alive(x.sess) {
                out.push(Act::Expire(mi as u8));
            }
        }
        for i in 0..s.net.len() {
            out.push(Act::Deliver(i as u8));
        }
        out.push(Act::Tick);
        match s.op {
            Op::Idle if writes_ok => {
                for mi in 0..self.m() {
                    let x = &s.mem[mi];
                    if !x.alive && !x.left && x.node != 0 && s.node_exists(x.node) {
                        out.push(Act::FailoverRead(mi as u8));
                    }
                }
            }
            Op::Idle => {}
            Op::Read { .. } if rules.failover_closes_session => out.push(Act::FailoverClose),
            Op::Read { .. } => out.push(Act::FailoverDeleteNode),
            Op::Fenced { .. } => out.push(Act::FailoverScan),
            Op::Scanned { .. } => out.push(Act::FailoverDeleteClaims),
        }
        if !s.group && writes_ok {
            out.push(Act::RecreateGroup);
        }
        if bounded && writes_ok {
            if s.budget.admin_deletes < c.admin_deletes {
                for r in 0..self.r() {
                    if s.claims[r].is_some() {
                        out.push(Act::AdminDeleteClaim(r as u8));
                    }
                }
            }
            if s.budget.admin_sets < c.admin_sets {
                for r in 0..self.r() {
                    if s.claims[r].is_some() {
                        out.push(Act::AdminSetClaim(r as u8));
                    }
                }
            }
            if s.group && s.budget.group_deletes < c.group_deletes {
                out.push(Act::DeleteGroup);
            }
            if s.group && s.budget.resource_changes < c.resource_changes {
                for r in 0..self.r() {
                    if s.present & (1 << r) != 0 {
                        out.push(Act::DeleteResource(r as u8));
                    } else {
                        out.push(Act::CreateResource(r as u8));
                    }
                }
            }
        }
    }

    fn next_state_inner(&self, s: &St, a: Act, bounded: bool) -> Option<St> {
        let mut n = self.step(s, a, bounded)?;
        for x in n.mem.iter_mut() {
            x.normalize();
        }
        Some(n)
    }

    fn step(&self, s: &St, a: Act, _bounded: bool) -> Option<St> {
        let c = &self.cfg;
        let rules = c.rules;
        let mut n = s.clone();
        match a {
            Act::Join(m) => {
                let mi = m as usize;
                let seq = n.next_zxid();
                n.nodes.push(Node {
                    seq,
                    member: m,
                    sess: n.mem[mi].sess,
                });
                let x = &mut n.mem[mi];
                x.node = seq;
                x.joined = true;
                x.assigned = 0;
                x.marker = false;
                x.lag &= !LAG_NODE;
            }
            Act::ReadAssignment(m) => {
                let mi = m as usize;
                let node = n.mem[mi].node;
                if let Some((seq, mask)) = n.assign[mi] {
                    if seq == node {
                        n.mem[mi].assigned = mask;
                    }
                }
                let x = &mut n.mem[mi];
                let gone = x.held & !x.assigned;
                x.working &= x.assigned;
                if gone != 0 {
                    x.held &= !gone;
                    let q = Release {
                        member: m,
                        sess: x.sess,
                        node: x.node,
                        mask: gone,
                        tokens: x.tokens,
                    };
                    n.net.push(q);
                }
            }
            Act::Claim(m, r) => {
                let mi = m as usize;
                let r = r as usize;
                let z = n.next_zxid();
                n.claims[r] = Some(Claim {
                    sess: n.mem[mi].sess,
                    czxid: z,
                });
                n.mem[mi].held |= 1 << r;
                n.mem[mi].verified |= 1 << r; // created on this connection, its watch armed
                n.mem[mi].watching |= 1 << r;
                n.mem[mi].tokens[r] = z;
                n.ghost.window[r] &= !(1 << mi);
            }
            Act::Start(m, r) => {
                let (mi, r) = (m as usize, r as usize);
                let bit = 1u8 << r;
                let x = n.mem[mi];
                let ours = Claim {
                    sess: x.sess,
                    czxid: x.tokens[r],
                };
                if rules.start_verified && x.verified & bit == 0 {
                    // read on the current connection first (arming its watch); a cut follower's
                    // answer verifies nothing (the read is retried: no step), as at the re-check
                    if x.cut {
                        return None;
                    }
                    if n.claims[r] != Some(ours) {
                        // found gone: not started (no stop callback), wanted again, claimed anew
                        n.mem[mi].drop_claims(bit);
                        n.ghost.start_called_off = true;
                        return Some(n);
                    }
                    n.mem[mi].verified |= bit;
                    n.mem[mi].watching |= bit;
                }
                if n.claims[r] != Some(ours) && n.ghost.window[r] & (1 << mi) == 0 {
                    n.ghost.start_under_gone_claim = true;
                }
                n.mem[mi].working |= bit;
            }
            Act::Renew(m) => {
                let mi = m as usize;
                let x = n.mem[mi];
                if !n.sess_alive(x.sess) {
                    return None;
                }
                if x.cut && rules.lease_through_leader {
                    return None; // the sync is never answered
                }
                n.renewed(mi, c.l);
            }
            Act::ReadBarrier(m) => {
                let mi = m as usize;
                let x = &mut n.mem[mi];
                if n.barrier_stop && !x.marker {
                    x.working = 0;
                    x.marker = true;
                } else if !n.barrier_stop {
                    x.marker = false;
                }
            }
            Act::Handshake(m) => {
                let mi = m as usize;
                let x = n.mem[mi];
                let y = &mut n.mem[mi];
                y.connected = true;
                y.cut = false;
                y.slow = false;
                // kazoo dropped the watches with the connection; what it had not notified, the
                // re-check finds
                y.connection_gone();
                y.pend |= PEND_RECHECK; // CONNECTED, queued for the member loop
                if rules.unverified_until_rechecked {
                    // before the lease can read as renewed: every held claim unverified here, and
                    // the listener sends one setWatches for them at once
                    y.verified = 0;
                    y.pend |= PEND_SETWATCHES;
                }
                // the handshake: the leader validates (touches) the session before answering, and its
                // instant proves the lease at once; but the server reached need only have seen what
                // the member has seen, so it may still show a changed claim's later deletion (`stale`)
                n.ttl[(x.sess - 1) as usize] = c.t;
                let stale = n.mem[mi].stale;
                n.renewed(mi, c.l);
                n.mem[mi].stale = stale;
            }
            Act::SetWatches(m) => {
                let mi = m as usize;
                let x = n.mem[mi];
                let mut lost = 0;
                for r in bits(x.held, self.r()) {
                    let ours = Claim {
                        sess: x.sess,
                        czxid: x.tokens[r],
                    };
                    if n.claims[r] == Some(ours) {
                        // watch armed: verified on this connection, unless its watch reported a
                        // change (only its re-verification's read verifies it again)
                        n.mem[mi].verified |= (1 << r) & !x.reported;
                        n.mem[mi].watching |= 1 << r;
                    } else {
                        lost |= 1 << r; // reported deleted: owns() false at once, a revoke queued
                    }
                }
                n.mem[mi].drop_claims(lost);
                n.mem[mi].pend &= !PEND_SETWATCHES;
            }
            Act::Recheck(m) => {
                let mi = m as usize;
                let x = n.mem[mi];
                n.mem[mi].pend &= !PEND_RECHECK;
                if !n.node_exists(x.node) {
                    // evicted while away: revokes all work and rejoins; its coordinator instance
                    // (if any) learns only when its next fenced write fails
                    n.mem[mi].node = 0;
                    n.mem[mi].working = 0;
                    n.mem[mi].marker = false;
                }
                if rules.owners_watch_claims {
                    for r in bits(x.held, self.r()) {
                        if n.claims[r].map(|cl| cl.sess) != Some(x.sess) {
                            n.mem[mi].drop_claims(1 << r);
                        } else {
                            n.mem[mi].verified |= (1 << r) & !x.reported;
                            n.mem[mi].watching |= 1 << r;
                        }
                    }
                }
            }
            Act::NewSession(m) => {
                // the session expired: policy `reconnect` makes a new one on kazoo's thread; owns() is
                // false at once (the lease is the new session's), the loop learns at LOST
                let mi = m as usize;
                let x = n.mem[mi];
                let sess = m * SESS_PER_MEMBER + x.sessions + 1;
                n.ttl[(sess - 1) as usize] = c.t;
                let y = &mut n.mem[mi];
                y.sess = sess;
                y.sessions += 1;
                y.connected = true;
                y.cut = false;
                y.slow = false;
                y.connection_gone();
                y.verified = 0;
                y.pend = 0;
                n.renewed(mi, c.l);
            }
            Act::SessionEnded(m) => {
                // the loop processes LOST and CONNECTED: all work stopped, claims forgotten (they went
                // with the session), to join again; a member on standby stays on standby (it rejoins
                // only once its overrunning callbacks have returned)
                let mi = m as usize;
                let x = n.mem[mi];
                n.mem[mi] = Mem {
                    alive: true,
                    joined: true,
                    sess: x.sess,
                    lsess: x.sess,
                    sessions: x.sessions,
                    connected: x.connected,
                    cut: x.cut,
                    slow: x.slow,
                    lease: x.lease,
                    behind: x.behind,
                    pend: x.pend,
                    standby: x.standby,
                    // without the rule, a join already taken in the new session is forgotten here
                    ..Mem::default()
                };
            }
            Act::Busy(m) => {
                n.budget.busy += 1;
                n.mem[m as usize].busy = true;
            }
            Act::Free(m) => {
                n.mem[m as usize].busy = false;
            }
            Act::CatchUp(m) => {
                n.catch_up(m as usize);
            }
            Act::ReverifySync(m) => {
                // the sync, sent after the reports it covers, is answered through the leader after the
                // notifications before it: the server's view is no older than those reports
                let mi = m as usize;
                if !n.sess_alive(n.mem[mi].sess) {
                    return None; // refused: the loop learns of the session's end
                }
                let before = n.mem[mi].reported;
                n.catch_up(mi);
                n.mem[mi].synced |= before & n.mem[mi].reported;
            }
            Act::ReverifyRead(m) => {
                let mi = m as usize;
                let x = n.mem[mi];
                let todo = if rules.reverify_behind_sync {
                    x.reported & x.synced
                } else {
                    x.reported
                } & x.held;
                for r in bits(todo, self.r()) {
                    let bit = 1u8 << r;
                    let ours = Claim {
                        sess: x.sess,
                        czxid: x.tokens[r],
                    };
                    let at_leader = n.claims[r] == Some(ours);
                    // a server that has not caught up with the claim's deletion still shows it ours
                    if at_leader || x.stale & bit != 0 {
                        let y = &mut n.mem[mi];
                        y.verified |= bit; // its watch re-armed: counts again
                        y.watching |= bit;
                        y.reported &= !bit;
                        y.synced &= !bit;
                        y.stale &= !bit;
                        if !at_leader {
                            // the read armed a watch its server fires once it applies the deletion
                            y.lag |= bit;
                        } else if y.working & bit != 0 {
                            n.ghost.reverified = true;
                        }
                    } else {
                        n.mem[mi].drop_claims(bit); // lost: stopped, claimed again if still assigned
                    }
                }
            }
            Act::Leave(m) => {
                // every stop callback has returned; the assignment node is deleted, then the session
                // is closed: its claims, member node and stop marker go in one server operation
                // (counted as one write of the zxid bound)
                let mi = m as usize;
                let x = n.mem[mi];
                n.budget.leaves += 1;
                n.assign[mi] = None;
                n.zxid += 1;
                n.end_session(x.sess, &rules);
                let y = &mut n.mem[mi];
                y.out_of_group();
                y.left = true;
                y.alive = false;
                y.connected = false;
            }
            Act::Standby(m) => {
                let mi = m as usize;
                let x = n.mem[mi];
                n.budget.standbys += 1;
                // stop all work, release every claim, delete the assignment node, then the member node
                if x.held != 0 {
                    n.net.push(Release {
                        member: m,
                        sess: x.sess,
                        node: x.node,
                        mask: x.held,
                        tokens: x.tokens,
                    });
                }
                n.assign[mi] = None;
                n.zxid += 1;
                n.nodes.retain(|nd| nd.seq != x.node);
                let y = &mut n.mem[mi];
                y.out_of_group();
                y.verified = 0;
                y.watching = 0;
                y.standby = true;
            }
            Act::Rejoin(m) => {
                n.mem[m as usize].standby = false;
            }
            Act::TakeOffice(m) => {
                let mi = m as usize;
                // versioned set of G/epoch in a multi that checks the member's own node
                if !n.node_exists(n.mem[mi].node) {
                    n.mem[mi].node = 0;
                    return Some(n);
                }
                n.zxid += 1;
                n.epoch += 1;
                n.mem[mi].coord = n.epoch;
                n.mem[mi].cnode = n.mem[mi].node;
            }
            Act::WritePlan(m) | Act::WriteAnyPlan(m, _) => {
                let mi = m as usize;
                if !self.fenced_ok(&n, mi) {
                    n.mem[mi].coord = 0; // fenced off: resigns
                    return Some(n);
                }
                let current = self.lowest_node(&n).map(|nd| nd.seq) == Some(n.mem[mi].cnode);
                let plan = match a {
                    Act::WriteAnyPlan(_, code) => self.any_plan(&n, code)?,
                    _ => self.plan(&n),
                };
                let mut changed = false;
                let mut handover = false;
                for &(member, mask) in &plan {
                    let mu = member as usize;
                    let seq = n.mem[mu].node;
                    let seq = n
                        .nodes
                        .iter()
                        .find(|nd| nd.member == member)
                        .map(|nd| nd.seq)
                        .unwrap_or(seq);
                    let old = match n.assign[mu] {
                        Some((s0, m0)) if s0 == seq => m0,
                        _ => 0,
                    };
                    if old != mask {
                        changed = true;
                    }
                    if old & !n.present != 0 {
                        // a resource deleted while a live member holds it: taken away, a full round
                        handover = true;
                    }
                    for &(other, omask) in &plan {
                        if other != member {
                            let o = other as usize;
                            let oseq = n
                                .nodes
                                .iter()
                                .find(|nd| nd.member == other)
                                .map(|nd| nd.seq)
                                .unwrap_or(0);
                            if let Some((s1, m1)) = n.assign[o] {
                                if s1 == oseq && m1 & mask & !omask != 0 {
                                    handover = true;
                                }
                            }
                        }
                    }
                }
                let stale_assign = (0..self.m())
                    .any(|mu| n.assign[mu].is_some() && !plan.iter().any(|&(member, _)| member as usize == mu));
                if !changed && !stale_assign && !n.barrier_stop {
                    return None;
                }
                if c.algo == Algo::GlobalBarrier && handover && !n.barrier_stop {
                    n.zxid += 1;
                    n.barrier_stop = true;
                    if !current {
                        n.ghost.stale_write = true;
                    }
                    return Some(n);
                }
                if c.algo == Algo::GlobalBarrier && n.barrier_stop {
                    let all_stopped = n.nodes.iter().all(|nd| n.mem[nd.member as usize].marker);
                    if !all_stopped {
                        return None;
                    }
                }
                n.zxid += 1;
                if !current {
                    n.ghost.stale_write = true;
                }
                for mu in 0..self.m() {
                    n.assign[mu] = None;
                }
                for &(member, mask) in &plan {
                    let seq = n
                        .nodes
                        .iter()
                        .find(|nd| nd.member == member)
                        .map(|nd| nd.seq)
                        .unwrap_or(0);
                    n.assign[member as usize] = Some((seq, mask));
                }
                n.barrier_stop = false;
            }
            Act::Deliver(i) => {
                let q = n.net.remove(i as usize);
                if !n.sess_alive(q.sess) {
                    return Some(n); // the server refuses a request of an ended session
                }
                let fenced = rules.fenced_check_member_node;
                if fenced && !n.node_exists(q.node) {
                    // the fenced batch failed as a whole: delete only the claims still ours, read first
                    // (ephemeralOwner is this session and czxid the token held)
                    for r in bits(q.mask, self.r()) {
                        if n.claims[r]
                            == Some(Claim {
                                sess: q.sess,
                                czxid: q.tokens[r],
                            })
                        {
                            n.zxid += 1;
                            n.delete_claim(r, false, &rules);
                        }
                    }
                    return Some(n);
                }
                n.zxid += 1;
                for r in bits(q.mask, self.r()) {
                    if let Some(cl) = n.claims[r] {
                        let foreign = cl.sess != q.sess;
                        if foreign && n.ghost.admin_deleted & (1 << r) == 0 {
                            n.ghost.release_foreign = true;
                        }
                        n.delete_claim(r, foreign, &rules);
                    }
                }
            }
            Act::FollowerGivesUp(m) => {
                let x = &mut n.mem[m as usize];
                x.connected = false;
                x.cut = false;
                x.connection_gone();
            }
            Act::Tick | Act::TickLagging(_) => {
                let lag = if let Act::TickLagging(m) = a {
                    Some(m as usize)
                } else {
                    None
                };
                if lag.is_some() {
                    n.budget.drift += 1;
                }
                for mi in 0..self.m() {
                    let x = n.mem[mi];
                    if x.sess == 0 {
                        continue;
                    }
                    let si = (x.sess - 1) as usize;
                    if n.ttl[si] > 0 {
                        if n.hears(mi) {
                            n.ttl[si] = c.t; // pings keep a healthy connection's session alive
                        } else {
                            n.ttl[si] -= 1;
                            if n.ttl[si] == 0 {
                                n.zxid += 1; // closeSession
                                n.end_session(x.sess, &rules);
                            }
                        }
                    }
                    if !x.alive {
                        continue;
                    }
                    if Some(mi) == lag {
                        n.mem[mi].behind += 1;
                        continue;
                    }
                    let renewed = x.connected && n.sess_alive(x.sess) && (!x.cut || !rules.lease_through_leader);
                    if renewed {
                        // the prober's sync (or, without the rule, any read) is answered: renewed
                        n.renewed(mi, c.l);
                    } else if n.mem[mi].lease > 0 {
                        n.mem[mi].lease -= 1;
                        if n.mem[mi].lease == 0 {
                            n.mem[mi].working = 0; // self-fencing: stops without waiting for any signal
                        }
                    }
                }
            }
            Act::FailoverRead(m) => {
                let mi = m as usize;
                let seq = n.mem[mi].node;
                let Some(nd) = n.nodes.iter().find(|nd| nd.seq == seq).copied() else {
                    return None;
                };
                // M and the session record (created with it) name the session that made M
                n.op = Op::Read {
                    member: m,
                    node: nd.seq,
                    sess: nd.sess,
                };
            }
            Act::FailoverClose => {
                let Op::Read { sess, .. } = n.op else {
                    return None;
                };
                n.op = Op::Idle;
                if n.sess_alive(sess) {
                    // ZooKeeper removes exactly the session's ephemerals, at once, as at an expiry
                    n.zxid += 1;
                    n.end_session(sess, &rules);
                }
            }
            Act::FailoverDeleteNode => {
                let Op::Read { member, node, sess } = n.op else {
                    return None;
                };
                if !n.node_exists(node) {
                    n.op = Op::Idle; // M went meanwhile: nothing to do
                    return Some(n);
                }
                n.zxid += 1;
                n.nodes.retain(|nd| nd.seq != node);
                n.op = Op::Fenced { member, node, sess };
            }
            Act::FailoverScan => {
                let Op::Fenced { member, node, sess } = n.op else {
                    return None;
                };
                let mut mask = 0;
                for r in 0..self.r() {
                    if n.claims[r].map(|cl| cl.sess) == Some(sess) {
                        mask |= 1 << r;
                    }
                }
                n.op = Op::Scanned {
                    member,
                    node,
                    sess,
                    mask,
                };
            }
            Act::FailoverDeleteClaims => {
                let Op::Scanned { sess, mask, .. } = n.op else {
                    return None;
                };
                n.op = Op::Idle;
                let mut wrote = false;
                for r in bits(mask, self.r()) {
                    // at the version read: 0, as every claim's, so any claim now at the path goes
                    if let Some(cl) = n.claims[r] {
                        if cl.sess != sess {
                            n.ghost.failover_wrong = true;
                        }
                        wrote = true;
                        n.delete_claim(r, cl.sess != sess, &rules);
                    }
                }
                if wrote {
                    n.zxid += 1;
                }
            }
            Act::RecreateGroup => {
                n.zxid += 1;
                n.group = true;
                n.epoch = 0;
            }
            Act::Crash(m) => {
                n.budget.crashes += 1;
                let x = &mut n.mem[m as usize];
                x.alive = false;
                x.connected = false;
                x.working = 0;
            }
            Act::Disconnect(m) => {
                n.budget.disconnects += 1;
                let x = &mut n.mem[m as usize];
                x.connected = false;
                x.connection_gone(); // kazoo drops the watches with the connection
            }
            Act::Slow(m) => {
                n.budget.slows += 1;
                n.mem[m as usize].slow = true;
            }
            Act::DeleteResource(r) => {
                n.budget.resource_changes += 1;
                n.zxid += 1;
                n.present &= !(1 << r);
            }
            Act::CreateResource(r) => {
                n.budget.resource_changes += 1;
                n.zxid += 1;
                n.present |= 1 << r;
            }
            Act::Cut(m) => {
                n.budget.cuts += 1;
                n.mem[m as usize].cut = true;
            }
            Act::AdminSetClaim(r) => {
                n.budget.admin_sets += 1;
                n.zxid += 1;
                n.change_claim(r as usize, &rules);
            }
            Act::AdminDeleteClaim(r) => {
                n.budget.admin_deletes += 1;
                n.ghost.admin_deleted |= 1 << r;
                n.zxid += 1;
                n.delete_claim(r as usize, true, &rules);
            }
            Act::AdminDeleteNode(m) => {
                let mi = m as usize;
                n.budget.node_deletes += 1;
                n.zxid += 1;
                let seq = n.mem[mi].node;
                n.nodes.retain(|nd| nd.seq != seq);
                n.assign[mi] = None;
                n.evict_if_hears(mi);
            }
            Act::Expire(m) => {
                let mi = m as usize;
                n.budget.expiries += 1;
                n.zxid += 1; // closeSession
                n.mem[mi].connected = false; // the server closes its connection: it cannot hear first
                n.mem[mi].connection_gone();
                let s0 = n.mem[mi].sess;
                n.ttl[(s0 - 1) as usize] = 0;
                for r in 0..self.r() {
                    if n.claims[r].map(|cl| cl.sess) == Some(s0) {
                        n.delete_claim(r, true, &rules);
                    }
                }
                n.nodes.retain(|nd| nd.sess != s0);
            }
            Act::DeleteGroup => {
                n.budget.group_deletes += 1;
                n.zxid += 1;
                for r in 0..self.r() {
                    n.delete_claim(r, true, &rules);
                }
                let gone: Vec<Node> = std::mem::take(&mut n.nodes);
                for nd in gone {
                    n.evict_if_hears(nd.member as usize);
                }
                n.assign = [None; MAX_M];
                n.epoch = 0;
                n.barrier_stop = false;
                n.group = false;
            }
        }
        Some(n)
    }

    /// Every time `owns(r)` turns true for a member (a start, or a claim verified on a new
    /// connection), its token must be above every earlier owner's of `r`, and equal only for the
    /// same owner: work under an older token is possible only in the documented window, where a
    /// fenced downstream rejects it.
    fn note_new_owners(&self, s: &St, n: &mut St) {
        for m in 0..self.m() {
            for r in 0..self.r() {
                if self.owns(s, m, r) || !self.owns(n, m, r) {
                    continue;
                }
                let tok = n.mem[m].tokens[r];
                let g = &mut n.ghost;
                let same = g.last_worker[r] == m as u8 + 1;
                let in_window = g.window[r] & (1 << m) != 0;
                if in_window {
                    continue; // work in the window is the documented one: it moves no history
                }
                if tok < g.last_token[r] || (!same && tok == g.last_token[r]) {
                    g.token_regressed = true;
                }
                g.last_token[r] = g.last_token[r].max(tok);
                g.last_worker[r] = m as u8 + 1;
            }
        }
    }

    fn overlap_ok(&self, s: &St) -> bool {
        for r in 0..self.r() {
            let workers: Vec<usize> = (0..self.m()).filter(|&m| self.owns(s, m, r)).collect();
            if workers.len() < 2 {
                continue;
            }
            // allowed only for the documented window: all but the newest holder lost their claim to an
            // outside deletion while they could not hear of it, and their lease has not been renewed
            // since (so one lease bounds it)
            let newest = *workers.iter().max_by_key(|&&m| s.mem[m].tokens[r]).unwrap();
            if workers
                .iter()
                .any(|&m| m != newest && s.ghost.window[r] & (1 << m) == 0)
            {
                return false;
            }
        }
        true
    }
}

impl Model for Proto {
    type State = St;
    type Action = Act;

    fn init_states(&self) -> Vec<St> {
        let c = &self.cfg;
        let mut s = St {
            zxid: 0,
            group: true,
            epoch: 0,
            barrier_stop: false,
            nodes: vec![],
            claims: [None; MAX_R],
            present: self.all_res(),
            assign: [None; MAX_M],
            ttl: [0; MAX_M * SESS_PER_MEMBER as usize],
            net: vec![],
            mem: [Mem::default(); MAX_M],
            op: Op::Idle,
            budget: Budget::default(),
            ghost: Ghost::default(),
        };
        for m in 0..c.members {
            let sess = m as u8 * SESS_PER_MEMBER + 1;
            s.ttl[(sess - 1) as usize] = c.t;
            s.mem[m] = Mem {
                alive: true,
                sess,
                lsess: sess,
                sessions: 1,
                connected: true,
                lease: c.l,
                ..Mem::default()
            };
        }
        vec![s]
    }

    fn actions(&self, s: &St, out: &mut Vec<Act>) {
        self.actions_inner(s, out, true);
        if s.budget.total() >= self.cfg.faults {
            out.retain(|a| !a.is_fault());
        }
    }

    fn next_state(&self, s: &St, a: Act) -> Option<St> {
        let mut n = self.next_state_inner(s, a, true)?;
        self.note_new_owners(s, &mut n);
        Some(n)
    }

    fn within_boundary(&self, s: &St) -> bool {
        s.zxid <= self.cfg.max_zxid
    }

    fn format_action(&self, a: &Act) -> String {
        a.to_string()
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut props: Vec<Property<Self>> = vec![
            Property::always("never_two_workers", |p, s| p.overlap_ok(s)),
            Property::always("tokens_strictly_increase", |_, s: &St| !s.ghost.token_regressed),
            Property::always("one_member_node_per_session", |_, s: &St| {
                s.nodes
                    .iter()
                    .all(|a| s.nodes.iter().filter(|b| b.sess == a.sess).count() == 1)
            }),
            Property::always("only_the_current_coordinator_writes", |_, s: &St| !s.ghost.stale_write),
            Property::always("failover_ends_only_the_dead_instance", |_, s: &St| {
                !s.ghost.failover_wrong
            }),
            Property::always("release_deletes_only_own_claims", |_, s: &St| !s.ghost.release_foreign),
            Property::always("starts_only_under_live_claims", |_, s: &St| {
                !s.ghost.start_under_gone_claim
            }),
        ];
        if !self.cfg.liveness {
            return props;
        }
        props.extend([
            Property::always("coordinator_eventually", |p: &Proto, s: &St| {
                p.quiet_reaches(s, Proto::goal_coordinator)
            }),
            Property::always("every_resource_claimed_eventually", |p: &Proto, s: &St| {
                p.quiet_reaches(s, Proto::goal_claimed)
            }),
            Property::sometimes("all_resources_worked", |p: &Proto, s: &St| {
                p.goal_claimed(s) && s.nodes.len() >= 2
            }),
        ]);
        // sanity: the new steps are reached within the bounds (when their budgets allow them)
        let c = &self.cfg;
        let two = c.faults >= 2;
        if two && c.busy > 0 && (c.disconnects > 0 || c.cuts > 0) {
            props.push(Property::sometimes(
                "loop_busy_between_handshake_and_recheck",
                |_, s: &St| {
                    s.mem
                        .iter()
                        .any(|x| x.busy && x.pend & PEND_RECHECK != 0 && x.held != 0)
                },
            ));
        }
        if two && c.slows > 0 && (c.admin_deletes > 0 || c.group_deletes > 0) {
            props.push(Property::sometimes(
                "slow_follower_notification_pending",
                |_, s: &St| s.mem.iter().any(|x| x.lag != 0),
            ));
        }
        if two && c.rules.start_verified && (c.disconnects > 0 || c.cuts > 0) {
            props.push(Property::sometimes("start_called_off_claim_gone", |_, s: &St| {
                s.ghost.start_called_off
            }));
        }
        if c.admin_sets > 0 {
            props.push(Property::sometimes("changed_claim_verified_again", |_, s: &St| {
                s.ghost.reverified
            }));
        }
        if two && c.admin_sets > 0 && c.slows > 0 {
            props.push(Property::sometimes("slow_follower_change_pending", |_, s: &St| {
                s.mem.iter().any(|x| x.chg != 0)
            }));
        }
        if two && c.admin_sets > 0 && (c.admin_deletes > 0 || c.group_deletes > 0) {
            props.push(Property::sometimes(
                "changed_claim_deleted_before_reverified",
                |_, s: &St| s.mem.iter().any(|x| x.stale != 0),
            ));
        }
        if c.resource_changes > 0 {
            props.push(Property::sometimes("resource_deleted_while_held", |_, s: &St| {
                s.mem.iter().any(|x| x.held & !s.present != 0)
            }));
        }
        if c.disconnects > 0 {
            props.push(Property::sometimes("lost_session_not_yet_processed", |_, s: &St| {
                s.mem.iter().any(|x| x.alive && x.lsess != x.sess && x.node != 0)
            }));
        }
        props
    }
}
