//! The control socket: a unix stream socket, mode 0600, that answers one
//! request per connection, `status text|json` or `connections text|json`,
//! an operator's request (`admin.rs`: backend, close, reload, config), and
//! the client side that `oi status` and `oi connections` run. A read-only
//! socket (`--status-socket`) answers the same but refuses what writes.
//!
//! The answer is formatted by the server, so the client only prints it and
//! both always agree on the layout.

use super::admin::{self, ServiceAsk, Who};
use super::format;
use super::limits;
use super::slots::{Slot, Slots};
use crate::route::shared::Shared;
use async_io::Async;
use futures_lite::{AsyncWriteExt, FutureExt};
use oi_wire::request::{self, Query};
use smol::LocalExecutor;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Binds the control socket at `path`, mode 0600 from its creation (the
/// umask is set around `bind`; connecting needs write permission). A socket
/// file left by an oi that died is replaced; one that still answers
/// (another oi) is not, nor anything else at the path. The returned file is
/// removed when dropped, only if the path still names the socket bound here.
pub(super) fn bind(path: &Path) -> io::Result<(UnixListener, crate::sys::unix::SocketFile)> {
    let addr = oi_config::UnixAddr::Path(path.to_path_buf());
    let bound = crate::sys::unix::bind(&addr, Some(0o600), BACKLOG)?;
    let file = bound
        .file
        .ok_or_else(|| io::Error::other("a control socket path made no file"))?;
    Ok((bound.listener, file))
}

/// Binds the read-only socket at `path`, mode 0660 (its group may ask for
/// the status; what changes anything is refused there), replacing a stale
/// socket file as [`bind`] does.
pub(super) fn bind_read_only(
    path: &Path,
) -> io::Result<(UnixListener, crate::sys::unix::SocketFile)> {
    let addr = oi_config::UnixAddr::Path(path.to_path_buf());
    let bound = crate::sys::unix::bind(&addr, Some(0o660), BACKLOG)?;
    let file = bound
        .file
        .ok_or_else(|| io::Error::other("a status socket path made no file"))?;
    Ok((bound.listener, file))
}

/// Connections the kernel queues for the control socket before oi accepts.
const BACKLOG: i32 = 128;

/// An `oi upgrade` request on its way to the service loop, which does
/// the upgrade (it holds the listeners) and replies.
pub(crate) struct UpgradeAsk {
    /// The binary to start (`--binary`), else the running one's path.
    pub(crate) binary: Option<PathBuf>,
    /// Where the outcome goes (the line to print, or why it failed), with
    /// a sender dropped once the answer is written: the service waits for
    /// that before it goes on towards exiting.
    pub(crate) reply: async_channel::Sender<(Result<String, String>, async_channel::Sender<()>)>,
}

/// How long `oi upgrade` waits for the answer: the new binary may take the
/// hand-over's whole time to connect and again to say ready.
const UPGRADE_WAIT: Duration = Duration::from_secs(150);

/// Answers requests forever on the observer thread.
pub(super) async fn serve(
    ex: Rc<LocalExecutor<'static>>,
    listener: Async<UnixListener>,
    shared: Arc<Shared>,
    upgrades: Option<async_channel::Sender<UpgradeAsk>>,
    service: Option<async_channel::Sender<ServiceAsk>>,
    read_only: bool,
) {
    let slots = Slots::new();
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                log::debug!("control socket accept: {e}");
                async_io::Timer::after(Duration::from_millis(100)).await;
                continue;
            }
        };
        // A peer is a user id (the socket is 0600, so usually root's); a
        // few slots each, the oldest idle one evicted (see `slots`).
        let who = match rustix::net::sockopt::socket_peercred(stream.get_ref()) {
            Ok(c) => Who {
                uid: c.uid.as_raw(),
                pid: c.pid.as_raw_nonzero().get(),
            },
            Err(_) => Who {
                uid: u32::MAX,
                pid: 0,
            },
        };
        let Some(slot) = slots.admit(who.uid) else {
            continue;
        };
        let shared = shared.clone();
        let upgrades = upgrades.clone();
        let service = service.clone();
        let exe = ex.clone();
        ex.spawn(async move {
            let asks = Asks {
                upgrades: upgrades.as_ref(),
                service: service.as_ref(),
                read_only,
                who,
                ex: &exe,
            };
            let answered = answer(stream, &shared, &slot, &asks)
                .or(async {
                    slot.evicted().await;
                    Err(io::Error::other(
                        "evicted: its user opened more connections",
                    ))
                })
                .await;
            if let Err(e) = answered {
                log::debug!("control socket request: {e}");
            }
        })
        .detach();
    }
}

/// Where a connection's requests go beyond the snapshot, and who asks.
struct Asks<'a> {
    /// The service loop's upgrade requests.
    upgrades: Option<&'a async_channel::Sender<UpgradeAsk>>,
    /// The service loop's other requests (reload).
    service: Option<&'a async_channel::Sender<ServiceAsk>>,
    /// A read-only socket: requests that change anything are refused.
    read_only: bool,
    /// The peer, for the log lines of changes.
    who: Who,
    /// The observer's executor (a disabled backend's grace runs on it).
    ex: &'a LocalExecutor<'static>,
}

/// What a read-only socket answers a request that changes something.
const READ_ONLY: &str = "error: this socket is read-only (status, connections, config); \
    ask the control socket (--socket) to change anything\n";

/// Reads one request line and writes its answer; `slot` is marked busy
/// (no longer evictable) once the line is complete.
async fn answer(
    mut stream: Async<UnixStream>,
    shared: &Arc<Shared>,
    slot: &Slot<u32>,
    asks: &Asks<'_>,
) -> io::Result<()> {
    let head = limits::read_head(&mut stream, b"\n").await?;
    slot.busy();
    let upgrades = asks.upgrades;
    if let Some(req) = oi_wire::admin::admin_request(&head) {
        let text = match req {
            Err(why) => format!("error: {why}\n"),
            Ok(req) if req.writes() && asks.read_only => READ_ONLY.to_string(),
            Ok(req) => admin::answer(req, shared, asks.who, asks.service, asks.ex).await,
        };
        limits::bounded(stream.write_all(text.as_bytes())).await??;
        let _ = limits::bounded(stream.close()).await;
        return Ok(());
    }
    if asks.read_only && request::upgrade_request(&head).is_some() {
        limits::bounded(stream.write_all(READ_ONLY.as_bytes())).await??;
        let _ = limits::bounded(stream.close()).await;
        return Ok(());
    }
    if let Some(binary) = request::upgrade_request(&head) {
        use std::os::unix::ffi::OsStrExt;
        let binary = binary.map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(b)));
        let (reply, outcome) = async_channel::bounded(1);
        let ask = UpgradeAsk { binary, reply };
        // Bounded like the client's wait: a service that never takes or
        // answers the request (it is stopping) cannot hold this task.
        let asked = async {
            let sent = match upgrades {
                Some(u) => u.send(ask).await.is_ok(),
                None => false,
            };
            (sent, outcome.recv().await.ok())
        };
        let waited = async {
            async_io::Timer::after(UPGRADE_WAIT).await;
            (true, None)
        };
        let (text, written) = match asked.or(waited).await {
            (_, Some((Ok(line), written))) => (format!("{line}\n"), Some(written)),
            (_, Some((Err(why), written))) => (format!("error: {why}\n"), Some(written)),
            (true, None) => ("error: the upgrade was not answered\n".into(), None),
            (false, None) if upgrades.is_some() => (
                "error: this oi takes no more upgrade requests: it has handed over to a \
                 new oi, or is stopping\n"
                    .into(),
                None,
            ),
            (false, None) => ("error: this oi takes no upgrade request\n".into(), None),
        };
        limits::bounded(stream.write_all(text.as_bytes())).await??;
        let _ = limits::bounded(stream.close()).await;
        drop(written);
        return Ok(());
    }
    let (what, json) = match request::control_request(&head) {
        Some((q, json)) => (Some(q), json),
        None => (None, false),
    };
    let text = match what {
        Some(Query::Status) => {
            let s = shared.snapshot();
            if json {
                format::status_json(&s).to_string()
            } else {
                format::status_text(&s)
            }
        }
        Some(Query::Connections) => {
            let rows = format::connections_json(&shared.stats.connections());
            if json {
                rows.to_string()
            } else {
                format::connections_text(&rows)
            }
        }
        _ => "error: ask `status` or `connections`, then `text` or `json`; or `backend`, `close`, `reload`, `config`\n".to_string(),
    };
    limits::bounded(stream.write_all(text.as_bytes())).await??;
    let _ = limits::bounded(stream.close()).await;
    Ok(())
}

/// `oi upgrade`: asks the server listening on `socket` to upgrade (to
/// `binary`, else its own path) and returns its answer, or why it failed.
pub fn ask_upgrade(socket: &Path, binary: Option<&Path>) -> io::Result<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot reach oi's control socket {}: {e} (is oi running with --socket?)",
                socket.display()
            ),
        )
    })?;
    stream.set_read_timeout(Some(UPGRADE_WAIT))?;
    stream.set_write_timeout(Some(limits::TIMEOUT))?;
    let mut line = b"upgrade".to_vec();
    if let Some(b) = binary {
        let bytes = b.as_os_str().as_bytes();
        if bytes.contains(&b'\n') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a binary path with a newline cannot be asked for",
            ));
        }
        line.push(b' ');
        line.extend_from_slice(bytes);
    }
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                e.kind(),
                format!(
                    "oi did not answer the upgrade request within {} s",
                    UPGRADE_WAIT.as_secs()
                ),
            ),
            _ => e,
        })?;
    match answer.strip_prefix("error: ") {
        Some(why) => Err(io::Error::other(why.trim_end().to_string())),
        None if answer.is_empty() => Err(io::Error::other(
            "oi closed the control connection without answering",
        )),
        None => Ok(answer),
    }
}

/// Asks the server listening on `socket` and returns its answer (what
/// `oi status` and `oi connections` print).
pub fn ask(socket: &Path, query: Query, json: bool) -> io::Result<String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot reach oi's control socket {}: {e} (is oi running with --socket?)",
                socket.display()
            ),
        )
    })?;
    stream.set_read_timeout(Some(limits::TIMEOUT))?;
    stream.set_write_timeout(Some(limits::TIMEOUT))?;
    let what = match query {
        Query::Status => "status",
        Query::Connections => "connections",
    };
    let how = if json { "json" } else { "text" };
    stream.write_all(format!("{what} {how}\n").as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if json && !answer.ends_with('\n') {
        answer.push('\n');
    }
    Ok(answer)
}
