//! The control socket: a unix stream socket, mode 0600, that answers one
//! request per connection, `status text|json` or `connections text|json`,
//! and the client side that `oi status` and `oi connections` run.
//!
//! The answer is formatted by the server, so the client only prints it and
//! both always agree on the layout.

use super::format;
use super::limits::{self, Gate};
use crate::shared::Shared;
use async_io::Async;
use futures_lite::AsyncWriteExt;
use smol::LocalExecutor;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// What the client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// The counters (`oi status`).
    Status,
    /// The live connections (`oi connections`).
    Connections,
}

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
    let gate = Gate::new(limits::MAX_CLIENTS);
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                log::debug!("control socket accept: {e}");
                async_io::Timer::after(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(pass) = gate.enter() else { continue };
        let shared = shared.clone();
        ex.spawn(async move {
            let _pass = pass;
            if let Err(e) = answer(stream, &shared).await {
                log::debug!("control socket request: {e}");
            }
        })
        .detach();
    }
}

/// Reads one request line and writes its answer.
async fn answer(mut stream: Async<UnixStream>, shared: &Shared) -> io::Result<()> {
    let head = limits::read_head(&mut stream, b"\n").await?;
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (what, how) = (words.next(), words.next());
    let json = how == Some("json");
    let text = match what {
        Some("status") => {
            let s = shared.snapshot();
            if json {
                format::status_json(&s).to_string()
            } else {
                format::status_text(&s)
            }
        }
        Some("connections") => {
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
