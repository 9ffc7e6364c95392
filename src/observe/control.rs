//! The control socket: a unix stream socket, mode 0600, that answers one
//! request per connection, `status text|json` or `connections text|json`,
//! and the client side that `oi status` and `oi connections` run.
//!
//! The answer is formatted by the server, so the client only prints it and
//! both always agree on the layout.

use super::format;
use super::limits;
use super::request::{self, Query};
use super::slots::{Slot, Slots};
use crate::shared::Shared;
use async_io::Async;
use futures_lite::{AsyncWriteExt, FutureExt};
use smol::LocalExecutor;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Binds the control socket at `path`, mode 0600 from its creation (the
/// umask is set around `bind`; connecting needs write permission). A socket
/// file left by an oi that died is replaced; one that still answers
/// (another oi) is not, nor anything else at the path. The returned file is
/// removed when dropped, only if the path still names the socket bound here.
pub(super) fn bind(path: &Path) -> io::Result<(UnixListener, crate::unix::SocketFile)> {
    let addr = crate::config::UnixAddr::Path(path.to_path_buf());
    let bound = crate::unix::bind(&addr, Some(0o600), BACKLOG)?;
    let file = bound
        .file
        .ok_or_else(|| io::Error::other("a control socket path made no file"))?;
    Ok((bound.listener, file))
}

/// Connections the kernel queues for the control socket before oi accepts.
const BACKLOG: i32 = 128;

/// Answers requests forever on the observer thread.
pub(super) async fn serve(
    ex: Rc<LocalExecutor<'static>>,
    listener: Async<UnixListener>,
    shared: Arc<Shared>,
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
        let uid = rustix::net::sockopt::socket_peercred(stream.get_ref())
            .map_or(u32::MAX, |c| c.uid.as_raw());
        let Some(slot) = slots.admit(uid) else {
            continue;
        };
        let shared = shared.clone();
        ex.spawn(async move {
            let answered = answer(stream, &shared, &slot)
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

/// Reads one request line and writes its answer; `slot` is marked busy
/// (no longer evictable) once the line is complete.
async fn answer(
    mut stream: Async<UnixStream>,
    shared: &Shared,
    slot: &Slot<u32>,
) -> io::Result<()> {
    let head = limits::read_head(&mut stream, b"\n").await?;
    slot.busy();
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
        _ => "error: ask `status` or `connections`, then `text` or `json`\n".to_string(),
    };
    limits::bounded(stream.write_all(text.as_bytes())).await??;
    let _ = limits::bounded(stream.close()).await;
    Ok(())
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
