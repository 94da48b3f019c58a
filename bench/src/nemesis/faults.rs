//! The catalogue of faults the nemesis draws from, written once as data: a new fault is
//! one entry here (and its step in the runner), and every schedule, report and replay
//! takes it from this table.

use std::fmt;

/// The deployment a schedule runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One nats-server, one projector, both API processes on the primary.
    Single,
    /// A three-node R3 NATS cluster, two projectors, one API process reading from a replica.
    Scale,
}

impl Topology {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "single" => Some(Self::Single),
            "scale" => Some(Self::Scale),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Scale => "scale",
        }
    }
}

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    PostgresCrash,
    FailoverToLaggingStandby,
    SecondFailoverToSibling,
    OldPrimaryBehindSameAddress,
    DumpRestoredTwice,
    PointInTimeRestore,
    TransactionHeldOpen,
    NatsRestart,
    ProjectorKill,
    ApiKill,
    ApiRestart,
    RebuildKilled,
    ListenerCut,
    SecretRotation,
    NatsNodeLoss,
    ReplicaLagging,
    PepperRotation,
    StreamAgesEventsOut,
}

impl FaultKind {
    /// Every kind, in the catalogue's order.
    pub const ALL: [Self; 18] = [
        Self::PostgresCrash,
        Self::FailoverToLaggingStandby,
        Self::SecondFailoverToSibling,
        Self::OldPrimaryBehindSameAddress,
        Self::DumpRestoredTwice,
        Self::PointInTimeRestore,
        Self::TransactionHeldOpen,
        Self::NatsRestart,
        Self::ProjectorKill,
        Self::ApiKill,
        Self::ApiRestart,
        Self::RebuildKilled,
        Self::ListenerCut,
        Self::SecretRotation,
        Self::NatsNodeLoss,
        Self::ReplicaLagging,
        Self::PepperRotation,
        Self::StreamAgesEventsOut,
    ];
}

/// What the checker must allow after a fault, and where it may be drawn.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub kind: FaultKind,
    /// Its name in schedules and reports.
    pub name: &'static str,
    /// The topologies it can be drawn for; `None`: both.
    pub only_on: Option<Topology>,
    /// Clients may be told to start over after it (the database went back in time or to
    /// another history that does not descend from the one they synced).
    pub may_start_over: bool,
}

/// Every fault the nemesis knows, in the order reports list them.
pub const CATALOGUE: &[Fault] = &[
    fault(FaultKind::PostgresCrash, "postgres-crash", None, false),
    fault(FaultKind::FailoverToLaggingStandby, "failover-to-lagging-standby", None, false),
    fault(FaultKind::SecondFailoverToSibling, "second-failover-to-sibling", None, true),
    fault(FaultKind::OldPrimaryBehindSameAddress, "old-primary-behind-same-address", None, true),
    fault(FaultKind::DumpRestoredTwice, "dump-restored-twice", None, true),
    fault(FaultKind::PointInTimeRestore, "point-in-time-restore", None, false),
    fault(FaultKind::TransactionHeldOpen, "transaction-held-open", None, false),
    fault(FaultKind::NatsRestart, "nats-restart", Some(Topology::Single), false),
    fault(FaultKind::ProjectorKill, "projector-kill-9", None, false),
    fault(FaultKind::ApiKill, "api-kill-9", None, false),
    fault(FaultKind::ApiRestart, "api-sigterm-restart", None, false),
    fault(FaultKind::RebuildKilled, "rebuild-killed", None, false),
    fault(FaultKind::ListenerCut, "listener-connection-cut", None, false),
    fault(FaultKind::SecretRotation, "cursor-secret-rotation", None, false),
    fault(FaultKind::NatsNodeLoss, "nats-node-loss", Some(Topology::Scale), false),
    fault(FaultKind::ReplicaLagging, "replica-lagging", Some(Topology::Scale), false),
    fault(FaultKind::PepperRotation, "key-pepper-rotation", None, false),
    fault(FaultKind::StreamAgesEventsOut, "stream-ages-events-out", None, false),
];

const fn fault(kind: FaultKind, name: &'static str, only_on: Option<Topology>, may_start_over: bool) -> Fault {
    Fault { kind, name, only_on, may_start_over }
}

impl Fault {
    /// The catalogue's entry for `kind` (every kind has one: a test holds it so).
    pub fn of(kind: FaultKind) -> Option<&'static Fault> {
        CATALOGUE.iter().find(|fault| fault.kind == kind)
    }

    pub fn drawn_on(&self, topology: Topology) -> bool {
        self.only_on.is_none_or(|only| only == topology)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Fault::of(*self).map_or("a fault missing from the catalogue", |fault| fault.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_entry_and_a_name_of_its_own() {
        let mut names: Vec<&str> = CATALOGUE.iter().map(|fault| fault.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CATALOGUE.len(), "a name is given twice");
        for fault in CATALOGUE {
            let first = Fault::of(fault.kind).map(|first| first.name);
            assert_eq!(first, Some(fault.name), "{:?} has more than one entry", fault.kind);
        }
    }

    #[test]
    fn every_kind_is_in_the_catalogue() {
        for kind in FaultKind::ALL {
            assert!(Fault::of(kind).is_some(), "{kind:?} has no entry");
        }
        assert_eq!(FaultKind::ALL.len(), CATALOGUE.len());
    }

    #[test]
    fn each_topology_draws_what_it_has() {
        let drawn = |kind, topology| Fault::of(kind).is_some_and(|fault| fault.drawn_on(topology));
        assert!(drawn(FaultKind::NatsRestart, Topology::Single));
        assert!(!drawn(FaultKind::NatsRestart, Topology::Scale), "a cluster loses one node, not the whole");
        assert!(drawn(FaultKind::PostgresCrash, Topology::Single));
        assert!(drawn(FaultKind::PostgresCrash, Topology::Scale));
    }
}
