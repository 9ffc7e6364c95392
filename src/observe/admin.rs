//! The control socket's operator requests (`oi backend`, `oi close`,
//! `oi reload`, `oi config`): parsed by `oi_wire::admin`, answered here on
//! the observer thread, and the client side those commands run.
//!
//! An answer is one text; one that starts with `error: ` is a failure (the
//! client prints the rest on stderr and exits 1). Every change is logged
//! once at info with who asked (the peer's uid and pid, SO_PEERCRED).

use super::limits;
use crate::backends::admin::AdminState;
use crate::backends::{BackendPool, Member};
use crate::route::shared::Shared;
use crate::stats::RuleStats;
use oi_wire::admin::{in_network, Admin, Change, Which};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Most names an error lists when a rule or backend is not found.
const MOST_NAMES: usize = 20;

/// How long `oi reload` waits for the outcome: names are looked up (15 s
/// at most) and removed listeners closed.
const RELOAD_WAIT: Duration = Duration::from_secs(60);

/// Who asked, for the log line: the control socket's peer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Who {
    /// Its user id (`u32::MAX` when unknown).
    pub(crate) uid: u32,
    /// Its process id (0 when unknown).
    pub(crate) pid: i32,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {} pid {}", self.uid, self.pid)
    }
}

/// What the service loop answers a request with.
pub(crate) type Outcome = Result<String, String>;

/// A request the service loop answers (it holds the configuration).
pub(crate) enum ServiceAsk {
    /// `oi reload`: reload, then the status line, or every error.
    Reload(async_channel::Sender<Outcome>),
    /// `oi config`: the running configuration's text.
    Config(async_channel::Sender<Outcome>),
}

/// Answers `req` from `who`; `service` reaches the service loop.
pub(super) async fn answer(
    req: Admin<'_>,
    shared: &Arc<Shared>,
    who: Who,
    service: Option<&async_channel::Sender<ServiceAsk>>,
    ex: &smol::LocalExecutor<'static>,
) -> String {
    let outcome = match req {
        Admin::Backend {
            rule,
            backend,
            change,
        } => change_backend(shared, who, rule, backend, change, ex),
        Admin::Close(which) => close(shared, who, which),
        Admin::Reload => reload(who, service).await,
        Admin::Config => config(shared, service).await,
    };
    match outcome {
        Ok(text) => text,
        Err(why) => format!("error: {}\n", why.trim_end()),
    }
}

/// The bytes of a name as text, or an error saying they are not.
fn text<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|_| format!("the {what} is not UTF-8"))
}

/// `names` as a bounded, comma-separated list.
fn listed(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(MOST_NAMES).map(String::as_str).collect();
    let more = names.len().saturating_sub(MOST_NAMES);
    let mut s = shown.join(", ");
    if more > 0 {
        let _ = write!(s, " and {more} more");
    }
    s
}

/// "did you mean" for a near miss, else the list of what exists.
fn not_found(kind: &str, written: &str, names: &[String]) -> String {
    let candidates: Vec<&str> = names.iter().map(String::as_str).collect();
    match oi_config::hint::closest(written, &candidates) {
        Some(c) => format!("no {kind} '{written}' (did you mean '{c}'?)"),
        None if names.is_empty() => format!("no {kind} '{written}': there are none"),
        None => format!("no {kind} '{written}'; there are: {}", listed(names)),
    }
}

/// The serving rule named `name` as `oi status` prints it.
fn rule_named(shared: &Shared, name: &[u8]) -> Result<Arc<RuleStats>, String> {
    let name = text(name, "rule")?;
    let rules = shared.stats.rules();
    if let Some(r) = rules.iter().find(|r| &*r.name() == name) {
        return Ok(r.clone());
    }
    let names: Vec<String> = rules.iter().map(|r| r.name().to_string()).collect();
    Err(not_found("rule", name, &names))
}

/// A rule, its pool, and a member of it.
type Found = (Arc<RuleStats>, Arc<BackendPool>, Arc<Member>);

/// The rule, its pool and the member named `backend` in it.
fn member_named(shared: &Shared, rule: &[u8], backend: &[u8]) -> Result<Found, String> {
    let r = rule_named(shared, rule)?;
    let pool = r
        .pool()
        .ok_or_else(|| format!("rule '{}' has no backend pool", r.name()))?;
    let written = text(backend, "backend")?;
    let m = pool.member_named(written).map_err(|names| {
        format!(
            "{} of rule '{}'",
            not_found("backend", written, &names),
            r.name()
        )
    })?;
    Ok((r, pool, m))
}

/// Whether the connection `c` goes to `member` on `rule`.
fn on_member(c: &crate::stats::Conn, rule: &Arc<RuleStats>, member: &Member) -> bool {
    Arc::ptr_eq(c.rule(), rule) && c.backend().is_some_and(|b| member.addrs().contains(&b))
}

/// `oi backend drain|disable|enable|weight`.
fn change_backend(
    shared: &Arc<Shared>,
    who: Who,
    rule: &[u8],
    backend: &[u8],
    change: Change,
    ex: &smol::LocalExecutor<'static>,
) -> Result<String, String> {
    let (r, pool, m) = member_named(shared, rule, backend)?;
    let keep = m.state().weight_override();
    let changed = match change {
        Change::Drain => pool.set_admin(&m, AdminState::Drain, keep),
        Change::Disable { .. } => pool.set_admin(&m, AdminState::Disabled, keep),
        Change::Enable => pool.set_admin(&m, AdminState::Ready, None),
        Change::Weight(w) => pool.reweigh(&m, u32::from(w)),
    };
    let rule_name = r.name();
    log::info!(
        "backend {} of rule {rule_name}: {} -> {} (asked by {who})",
        changed.label,
        changed.before,
        changed.after
    );
    let mut answer = format!(
        "{rule_name} {}: {} (was {})\n",
        changed.label, changed.after, changed.before
    );
    if let Change::Disable { grace_ms } = change {
        let live = shared.stats.connections_where(|c| on_member(c, &r, &m));
        if grace_ms == 0 {
            let (closed, _) = shared.stats.close(|c| on_member(c, &r, &m));
            log_closed(
                closed,
                &format!("backend {} of rule {rule_name} disabled", changed.label),
                who,
            );
            let _ = writeln!(answer, "closed {closed} connection{}", plural(closed));
        } else {
            let grace = Duration::from_millis(grace_ms);
            let _ = writeln!(
                answer,
                "{live} open connection{} close in {:.3}s unless it is enabled or drained meanwhile",
                plural(live),
                grace.as_secs_f64()
            );
            let shared = shared.clone();
            let label = changed.label.clone();
            let changes = m.state().changes();
            ex.spawn(async move {
                async_io::Timer::after(grace).await;
                // Changed again meanwhile (enabled, drained, or disabled
                // anew with a grace of its own): this grace decides nothing.
                if m.state().changes() != changes {
                    return;
                }
                let (closed, _) = shared.stats.close(|c| on_member(c, &r, &m));
                log_closed(
                    closed,
                    &format!("backend {label} of rule {} disabled, grace over", r.name()),
                    who,
                );
            })
            .detach();
        }
    }
    Ok(answer)
}

/// `s` unless `n` is 1.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The one log line of a close.
fn log_closed(closed: usize, why: &str, who: Who) {
    log::info!(
        "closed {closed} connection{}: {why} (asked by {who})",
        plural(closed)
    );
}

/// `oi close`.
fn close(shared: &Shared, who: Who, which: Which<'_>) -> Result<String, String> {
    let (closed, left, what) = match which {
        Which::Id(id) => {
            let (closed, left) = shared.stats.close(|c| c.id() == id);
            if closed == 0 && left == 0 {
                return Err(format!(
                    "no live connection has id {id} (`oi connections` lists them)"
                ));
            }
            (closed, left, format!("id {id}"))
        }
        Which::Client { ip, bits } => {
            let (closed, left) = shared.stats.close(|c| match c.client() {
                crate::net::peer::Peer::Ip(a) => in_network(a.ip(), ip, bits),
                crate::net::peer::Peer::Unix => false,
            });
            (closed, left, format!("client {ip}/{bits}"))
        }
        Which::Rule(rule) => {
            let r = rule_named(shared, rule)?;
            let (closed, left) = shared.stats.close(|c| Arc::ptr_eq(c.rule(), &r));
            (closed, left, format!("rule {}", r.name()))
        }
        Which::Backend { rule, backend } => {
            let (r, _, m) = member_named(shared, rule, backend)?;
            let (closed, left) = shared.stats.close(|c| on_member(c, &r, &m));
            (
                closed,
                left,
                format!("backend {} of rule {}", m.label(), r.name()),
            )
        }
    };
    log_closed(closed, &what, who);
    let mut answer = format!("closed {closed} connection{}\n", plural(closed));
    if left > 0 {
        let _ = writeln!(
            answer,
            "left {left} flow{} open: oi close ends TCP and unix stream connections and UDP associations to UDP backends",
            plural(left)
        );
    }
    Ok(answer)
}

/// `oi reload`: the service loop reloads and answers.
async fn reload(
    who: Who,
    service: Option<&async_channel::Sender<ServiceAsk>>,
) -> Result<String, String> {
    let Some(service) = service else {
        return Err("this oi takes no reload request".into());
    };
    log::info!("reload asked by {who}");
    let (reply, outcome) = async_channel::bounded(1);
    if service.send(ServiceAsk::Reload(reply)).await.is_err() {
        return Err("the server is stopping".into());
    }
    match outcome.recv().await {
        Ok(o) => o,
        Err(_) => Err("the reload was not answered".into()),
    }
}

/// `oi config`: the running configuration from the service loop, with
/// what operators changed since (admin state, weights) as comments after
/// its first line.
async fn config(
    shared: &Shared,
    service: Option<&async_channel::Sender<ServiceAsk>>,
) -> Result<String, String> {
    let Some(service) = service else {
        return Err("this oi takes no config request".into());
    };
    let (reply, outcome) = async_channel::bounded(1);
    if service.send(ServiceAsk::Config(reply)).await.is_err() {
        return Err("the server is stopping".into());
    }
    let text = match outcome.recv().await {
        Ok(o) => o?,
        Err(_) => return Err("the request was not answered".into()),
    };
    let mut changed = String::new();
    for r in shared.stats.rules() {
        let Some(pool) = r.pool() else { continue };
        for m in pool.members().iter() {
            let state = m.state().admin();
            let weight = m.state().weight_override();
            if state == AdminState::Ready && weight.is_none() {
                continue;
            }
            let weight = weight.map_or_else(String::new, |w| format!(" weight={w}"));
            let _ = writeln!(
                changed,
                "#   rule {} backend {}: state={}{weight}",
                r.name(),
                m.label(),
                state.as_str()
            );
        }
    }
    if changed.is_empty() {
        return Ok(text);
    }
    let (head, body) = text.split_once('\n').unwrap_or((&text, ""));
    Ok(format!(
        "{head}\n# Changed at run time (oi backend), not in the file:\n{changed}{body}"
    ))
}

/// Sends one request line (`line`, without its newline) to the control
/// socket at `socket` and returns the answer; an answer that starts with
/// `error: ` is returned as the error.
pub fn ask_admin(socket: &Path, line: &str, reload: bool) -> io::Result<String> {
    if line.contains('\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a request with a newline cannot be asked",
        ));
    }
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot reach oi's control socket {}: {e} (is oi running with --socket?)",
                socket.display()
            ),
        )
    })?;
    let wait = if reload { RELOAD_WAIT } else { limits::TIMEOUT };
    stream.set_read_timeout(Some(wait))?;
    stream.set_write_timeout(Some(limits::TIMEOUT))?;
    stream.write_all(format!("{line}\n").as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    match answer.strip_prefix("error: ") {
        Some(why) => Err(io::Error::other(why.trim_end().to_string())),
        None if answer.is_empty() => Err(io::Error::other(
            "oi closed the control connection without answering",
        )),
        None => Ok(answer),
    }
}
