//! What an operator set on a pool's member through the control socket
//! (`oi backend drain|disable|enable|weight`), beside its health: its
//! admin state and a weight that overrides the file's.
//!
//! Both live in the member's [`MemberState`], which a reload that keeps
//! the backend keeps ([`BackendPool::keep_state_of`] shares the state), so
//! they survive a reload while the backend is in the file and go with it
//! when it leaves; `oi upgrade` carries them (`carry.rs`).
//!
//! A member out of service (drained, disabled, or weight 0) is never
//! chosen, not even when every member is down by health (fail open is for
//! health, which may be wrong; an operator's word is not) nor as a rule's
//! only backend: with none in service, a connection is refused. Probes go
//! on as before, so health stays current while a backend is out.

use super::{BackendPool, Member, MemberState};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `MemberState::weight` when the file's weight applies.
pub(super) const FILE_WEIGHT: u32 = u32::MAX;

/// An operator's state of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AdminState {
    /// Chosen as the file says (the file's state).
    Ready,
    /// No new connections; open ones finish.
    Drain,
    /// No new connections; open ones are closed (after a grace).
    Disabled,
}

impl AdminState {
    /// Its name in every output.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Disabled => "disabled",
        }
    }

    /// How it is stored.
    fn to_u8(self) -> u8 {
        match self {
            AdminState::Ready => 0,
            AdminState::Drain => 1,
            AdminState::Disabled => 2,
        }
    }

    /// Read back from its stored value.
    pub(super) fn from_u8(v: u8) -> Self {
        match v {
            1 => AdminState::Drain,
            2 => AdminState::Disabled,
            _ => AdminState::Ready,
        }
    }

    /// Read back from its name (a carried state); `None` for anything else.
    pub(super) fn from_name(s: &str) -> Option<Self> {
        match s {
            "ready" => Some(AdminState::Ready),
            "drain" => Some(AdminState::Drain),
            "disabled" => Some(AdminState::Disabled),
            _ => None,
        }
    }
}

impl MemberState {
    /// The operator's state.
    pub(crate) fn admin(&self) -> AdminState {
        AdminState::from_u8(self.admin.load(Ordering::Relaxed))
    }

    /// Sets the operator's state.
    pub(super) fn set_admin(&self, state: AdminState) {
        self.admin.store(state.to_u8(), Ordering::Relaxed);
    }

    /// How many operator changes it has had (see the field).
    pub(crate) fn changes(&self) -> u32 {
        self.changes.load(Ordering::Relaxed)
    }

    /// The operator's weight, if one overrides the file's.
    pub(crate) fn weight_override(&self) -> Option<u32> {
        match self.weight.load(Ordering::Relaxed) {
            FILE_WEIGHT => None,
            w => Some(w),
        }
    }

    /// Sets (or, with `None`, clears) the operator's weight.
    pub(super) fn set_weight(&self, weight: Option<u32>) {
        self.weight
            .store(weight.unwrap_or(FILE_WEIGHT), Ordering::Relaxed);
    }
}

impl Member {
    /// The weight choices use: the operator's, else the file's.
    pub(crate) fn weight(&self) -> u32 {
        self.state.weight_override().unwrap_or(self.weight)
    }

    /// Whether new connections may go to it: ready, and a weight above 0.
    pub(crate) fn in_service(&self) -> bool {
        self.state.admin() == AdminState::Ready && self.weight() > 0
    }

    /// Whether `text` names it: its label (`name:` or `host:port` as
    /// written) or one of its addresses, as `oi status` prints them.
    fn named(&self, text: &str) -> bool {
        if self.label == text {
            return true;
        }
        let parsed: Option<std::net::SocketAddr> = text.parse().ok();
        self.addrs
            .load()
            .iter()
            .any(|a| Some(*a) == parsed || a.to_string() == text)
    }
}

/// What changing a member did, for the log line and the answer.
pub(crate) struct Changed {
    /// The member's name.
    pub(crate) label: String,
    /// Its state and weight before, as `state=drain weight=3`.
    pub(crate) before: String,
    /// Its state and weight after.
    pub(crate) after: String,
}

/// Its state and weight as a change reports them.
fn described(m: &Member) -> String {
    let weight = match m.state.weight_override() {
        Some(w) => format!("{w} (file: {})", m.weight),
        None => m.weight.to_string(),
    };
    format!("state={} weight={weight}", m.state.admin().as_str())
}

impl BackendPool {
    /// The member `text` names (see [`Member::named`]), or every member's
    /// name to say what exists.
    pub(crate) fn member_named(&self, text: &str) -> Result<Arc<Member>, Vec<String>> {
        let members = self.members.load();
        if let Some(m) = members.iter().find(|m| m.named(text)) {
            return Ok(m.clone());
        }
        let mut names = Vec::new();
        for m in members.iter() {
            for a in m.addrs.load().iter() {
                names.push(a.to_string());
            }
            if m.addrs.load().is_empty() || m.label.parse::<std::net::SocketAddr>().is_err() {
                names.push(m.label.clone());
            }
        }
        names.dedup();
        Err(names)
    }

    /// Sets `member`'s operator state and weight (`None`: the file's): a
    /// change of state (see `MemberState::changes`).
    pub(crate) fn set_admin(
        &self,
        member: &Member,
        state: AdminState,
        weight: Option<u32>,
    ) -> Changed {
        member.state.changes.fetch_add(1, Ordering::Relaxed);
        self.set_weight(member, state, weight)
    }

    /// Sets `member`'s weight, its state as it is: not a change of state
    /// (a disabled backend's grace still ends in closing its connections).
    pub(crate) fn reweigh(&self, member: &Member, weight: u32) -> Changed {
        self.set_weight(member, member.state.admin(), Some(weight))
    }

    /// Stores `state` and `weight` and reports the change.
    fn set_weight(&self, member: &Member, state: AdminState, weight: Option<u32>) -> Changed {
        let before = described(member);
        member.state.set_admin(state);
        member.state.set_weight(weight);
        // Round robin's running weights start again from the new shares.
        for m in self.members.load().iter() {
            m.current.store(0, Ordering::Relaxed);
        }
        Changed {
            label: member.label.clone(),
            before,
            after: described(member),
        }
    }

    /// Whether no member takes new connections (all drained, disabled or
    /// weight 0): why a connection found nothing to try.
    pub(crate) fn none_in_service(&self) -> bool {
        !self.members.load().iter().any(|m| m.in_service())
    }
}
