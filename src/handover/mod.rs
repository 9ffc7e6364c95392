//! Handing every listening socket to a new oi binary (`oi upgrade`,
//! SIGUSR2), so an upgrade refuses no connection. `docs/handover.md`
//! describes the conversation and the message format (`wire.rs`).
//!
//! The old process ([`hand_over`]) listens on a fresh abstract unix
//! `SOCK_SEQPACKET` socket with a random name, starts the new binary with
//! that name in `OI_HANDOVER`, and accepts only that child (its pid, checked
//! with `SO_PEERCRED`). The child ([`take_from_env`]) says hello with its
//! hand-over version; the old one checks it before sending any descriptor,
//! then sends every listening socket (rules', metrics', the control
//! socket's) with `SCM_RIGHTS`. The child reads its configuration, serves
//! with what matches its rules, and says ready (or why it cannot); the old
//! one hands it the live connections, then asks its service loop the
//! health question (`health.rs`), and only on the answer does it stop
//! accepting. Every way the child can fail (does not start, exits before
//! or after ready, refuses the configuration, speaks another version, says
//! nothing in time, does not answer the health question) leaves the old
//! process serving everything, with one message saying why.

pub(crate) mod conns;
mod health;
mod wire;

pub(crate) use health::HEALTH_TIMEOUT;

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use wire::{Kind, Received};

/// The variable that tells a new oi where the old one waits.
pub(crate) const ENV: &str = "OI_HANDOVER";

/// How long the new binary may take to connect, and then to say ready
/// after it has the sockets (it reads its configuration and resolves names).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(60);

/// What a handed socket is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A rule's listening socket.
    Listener,
    /// The Prometheus endpoint's listener.
    Metrics,
    /// The control socket.
    Control,
    /// The read-only control socket (`--status-socket`).
    Status,
}

impl Role {
    /// The word the message carries.
    fn word(self) -> &'static str {
        match self {
            Role::Listener => "listener",
            Role::Metrics => "metrics",
            Role::Control => "control",
            Role::Status => "status",
        }
    }

    /// The role a word names.
    fn from_word(w: &str) -> Option<Role> {
        [Role::Listener, Role::Metrics, Role::Control, Role::Status]
            .into_iter()
            .find(|r| r.word() == w)
    }
}

/// One socket on its way to the new process.
pub(crate) struct Handed {
    /// What it is for.
    pub(crate) role: Role,
    /// The socket.
    pub(crate) fd: OwnedFd,
    /// A unix listener's socket file the old oi made: its device and
    /// inode, so the new one removes it when done (if the path still
    /// names it) and applies `mode=` to it.
    pub(crate) file: Option<(u64, u64)>,
}

/// The new oi that serves now, as the old one keeps it while it drains.
pub(crate) struct Successor {
    /// The new process's pid.
    pub(crate) pid: u32,
    /// How many listeners it said it serves.
    pub(crate) listeners: u64,
    /// The conversation, kept open for what this oi counts while draining.
    conn: OwnedFd,
}

impl Successor {
    /// Sends what this oi counted since the hand-over (blocking, a few
    /// seconds at most), once its last kept connection has ended.
    pub(crate) fn report(self, drained: &serde_json::Value) {
        health::report(&self.conn, drained);
    }
}

/// The old side: starts `binary` with `args`, hands it `sockets`, and
/// returns the new process once it has answered the health question. On
/// error the child is gone (killed if need be and reaped), every paused
/// flow resumes here, systemd follows this process again, and the message
/// says why.
pub(crate) fn hand_over(
    binary: &Path,
    args: &[OsString],
    sockets: &[Handed],
    parking: &crate::route::park::Parking,
    counters: &dyn Fn() -> serde_json::Value,
) -> Result<Successor, String> {
    let shown = binary.display();
    let (listener, name) = rendezvous().map_err(|e| format!("cannot set up the hand-over: {e}"))?;
    let mut child = Command::new(binary)
        .args(args)
        .env(ENV, &name)
        // The new process becomes the main process and pings the watchdog
        // (systemd's WATCHDOG_PID names the old one).
        .env_remove(crate::sys::notify::WATCHDOG_PID)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the new binary {shown}: {e}"))?;
    let mut ready = false;
    let result = converse(
        &listener, &mut child, sockets, parking, counters, &mut ready,
    );
    if result.is_err() {
        if ready {
            // It told systemd it is the main process (`MAINPID=`): this one
            // is again, before the other one is killed, so systemd never
            // sees its main process gone.
            crate::sys::notify::main_pid();
        }
        let _ = child.kill();
        // UDP listeners whose associations it took read their sockets again.
        parking.abandoned();
    }
    // Reaped off this thread: a child that failed may take a moment to exit.
    std::thread::spawn(move || child.wait());
    result.map_err(|e| format!("the new binary {shown} {e}"))
}

/// A listening abstract `SOCK_SEQPACKET` socket under a random name.
fn rendezvous() -> io::Result<(OwnedFd, String)> {
    let mut random = [0u8; 16];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("oi-handover-{}-{hex}", std::process::id());
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    rustix::net::bind(&fd, &SocketAddrUnix::new_abstract_name(name.as_bytes())?)?;
    rustix::net::listen(&fd, 1)?;
    Ok((fd, name))
}

/// The conversation, from the old side; errors read after "the new binary".
fn converse(
    listener: &OwnedFd,
    child: &mut Child,
    sockets: &[Handed],
    parking: &crate::route::park::Parking,
    counters: &dyn Fn() -> serde_json::Value,
    ready: &mut bool,
) -> Result<Successor, String> {
    let deadline = Instant::now() + TIMEOUT;
    let conn = accept_child(listener, child, deadline)?;
    rustix::net::sockopt::set_socket_timeout(
        &conn,
        rustix::net::sockopt::Timeout::Recv,
        Some(TIMEOUT),
    )
    .map_err(|e| format!("failed: cannot set a timeout ({e})"))?;
    match recv(&conn, child)? {
        (Kind::Hello, _) => {}
        (other, _) => return Err(format!("began with {other:?} instead of a hello")),
    }
    for chunk in sockets.chunks(wire::FDS_PER_MESSAGE) {
        let roles: Vec<serde_json::Value> = chunk
            .iter()
            .map(|h| match h.file {
                Some((dev, ino)) => {
                    serde_json::json!({ "role": h.role.word(), "file": [dev, ino] })
                }
                None => serde_json::json!({ "role": h.role.word() }),
            })
            .collect();
        let fds: Vec<_> = chunk.iter().map(|h| h.fd.as_fd()).collect();
        let body = serde_json::json!({ "sockets": roles });
        wire::send(&conn, Kind::Sockets, &body, &fds)
            .map_err(|e| format!("did not take the sockets: {e}"))?;
    }
    wire::send(&conn, Kind::End, &serde_json::json!({}), &[])
        .map_err(|e| format!("did not take the sockets: {e}"))?;
    match recv(&conn, child)? {
        (Kind::Ready, body) => {
            *ready = true;
            let pid = body["pid"]
                .as_u64()
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(child.id());
            // The new oi serves every listener: now the live connections.
            let n = conns::send(&conn, parking, counters);
            log::info!("upgrade: handed {n} live connection(s) to oi pid {pid}");
            // Then whether its service loop runs; this one accepts until
            // the answer.
            let listeners = health::ask(&conn, pid).map_err(|u| match u {
                health::Unanswered::Closed => match exit_status(child) {
                    Some(status) => format!(
                        "exited ({status}) after saying ready, before answering the health question"
                    ),
                    None => "closed the hand-over after saying ready, before answering the \
                             health question"
                        .to_string(),
                },
                health::Unanswered::Silent => format!(
                    "did not answer the health question within {} s",
                    HEALTH_TIMEOUT.as_secs()
                ),
                health::Unanswered::Wrong(why) => why,
            })?;
            Ok(Successor {
                pid,
                listeners,
                conn,
            })
        }
        // The reason is the new binary's text, which `oi upgrade` prints and
        // the log keeps: escaped and cut like any other outside text, so a
        // broken or hostile binary writes no terminal controls, no line of
        // its own and no 64 KiB message into either.
        (Kind::Failed, body) => Err(format!(
            "refused to take over: {}",
            oi_config::Shown(body["error"].as_str().unwrap_or("no reason given"))
        )),
        (other, _) => Err(format!("sent {other:?} instead of ready")),
    }
}

/// Waits for the child to connect; fails when it exits first or the deadline passes.
fn accept_child(
    listener: &OwnedFd,
    child: &mut Child,
    deadline: Instant,
) -> Result<OwnedFd, String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        match rustix::net::accept_with(listener, SocketFlags::CLOEXEC) {
            Ok(conn) => {
                let peer = rustix::net::sockopt::socket_peercred(&conn)
                    .map(|c| c.pid.as_raw_nonzero().get())
                    .unwrap_or(0);
                if u32::try_from(peer).ok() == Some(child.id()) {
                    return Ok(conn);
                }
                return Err(format!(
                    "was not the process that connected (pid {peer} did): hand-over abandoned"
                ));
            }
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("could not be reached: accept failed ({e})")),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited ({status}) before taking over"));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "did not start the hand-over within {} s",
                TIMEOUT.as_secs()
            ));
        }
        // Woken by the connection, or after 50 ms to look at the child again.
        let mut fds = [PollFd::new(listener, PollFlags::IN)];
        let tick = Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        let _ = poll(&mut fds, Some(&tick));
    }
}

/// The next message from the child, as an error that names what went wrong.
fn recv(conn: &OwnedFd, child: &mut Child) -> Result<(Kind, serde_json::Value), String> {
    match wire::recv(conn) {
        Ok(Received::Message(Ok(m), _)) => Ok(m),
        Ok(Received::Message(Err(e), _)) => Err(format!("cannot hand over: {e}")),
        Ok(Received::Closed) => match exit_status(child) {
            Some(status) => Err(format!("exited ({status}) before taking over")),
            None => Err("closed the hand-over without taking over".into()),
        },
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
            Err(format!("said nothing for {} s", TIMEOUT.as_secs()))
        }
        Err(e) => Err(format!("broke the hand-over: {e}")),
    }
}

/// How a child that closed the conversation exited, if it does within 2 s
/// (it is most likely exiting).
fn exit_status(child: &mut Child) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// The new side's end of the conversation, kept until it serves.
pub(crate) struct Taker {
    /// The connected socket to the old process.
    conn: OwnedFd,
}

/// The new side: when `OI_HANDOVER` names an old oi waiting, connects,
/// says hello, and takes every socket it sends. Clears the variable (call
/// before any thread starts). `None`: a normal start.
pub(crate) fn take_from_env() -> Option<Result<(Taker, Vec<Handed>), String>> {
    let name = std::env::var_os(ENV)?;
    std::env::remove_var(ENV);
    Some(take(name.as_encoded_bytes()).map_err(|e| format!("hand-over from the running oi: {e}")))
}

/// Connects to the old process at abstract `name` and takes its sockets.
fn take(name: &[u8]) -> Result<(Taker, Vec<Handed>), String> {
    let conn = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| e.to_string())?;
    let addr = SocketAddrUnix::new_abstract_name(name).map_err(|e| e.to_string())?;
    rustix::net::connect(&conn, &addr).map_err(|e| format!("cannot connect: {e}"))?;
    rustix::net::sockopt::set_socket_timeout(
        &conn,
        rustix::net::sockopt::Timeout::Recv,
        Some(TIMEOUT),
    )
    .map_err(|e| e.to_string())?;
    let hello = serde_json::json!({
        "pid": std::process::id(),
        "oi": env!("CARGO_PKG_VERSION"),
    });
    wire::send(&conn, Kind::Hello, &hello, &[]).map_err(|e| e.to_string())?;
    let mut handed = Vec::new();
    loop {
        let (kind, body, fds) = match wire::recv(&conn).map_err(|e| e.to_string())? {
            Received::Message(Ok((kind, body)), fds) => (kind, body, fds),
            Received::Message(Err(e), _) => {
                let why = format!("the running oi's message: {e}");
                let _ = wire::send(
                    &conn,
                    Kind::Failed,
                    &serde_json::json!({ "error": why }),
                    &[],
                );
                return Err(why);
            }
            Received::Closed => return Err("the running oi closed the hand-over".into()),
        };
        match kind {
            Kind::Sockets => {
                let roles = body["sockets"].as_array().cloned().unwrap_or_default();
                if roles.len() != fds.len() {
                    return Err(format!(
                        "{} sockets described, {} descriptors received",
                        roles.len(),
                        fds.len()
                    ));
                }
                for (entry, fd) in roles.iter().zip(fds) {
                    let role = entry["role"]
                        .as_str()
                        .and_then(Role::from_word)
                        .unwrap_or(Role::Listener);
                    let file = match (entry["file"][0].as_u64(), entry["file"][1].as_u64()) {
                        (Some(dev), Some(ino)) => Some((dev, ino)),
                        _ => None,
                    };
                    handed.push(Handed { role, fd, file });
                }
            }
            Kind::End => return Ok((Taker { conn }, handed)),
            other => return Err(format!("unexpected {other:?} message")),
        }
    }
}

impl Taker {
    /// Tells the old process this one serves; it stops accepting and sends
    /// its live connections next ([`Taker::connections`]).
    pub(crate) fn ready(&self) {
        let body = serde_json::json!({ "pid": std::process::id() });
        if let Err(e) = wire::send(&self.conn, Kind::Ready, &body, &[]) {
            log::warn!("could not tell the previous oi that this one serves: {e}");
        }
    }

    /// Receives the connections the old process paused and its counters
    /// (blocking).
    pub(crate) fn connections(&self) -> Result<conns::Handed, String> {
        conns::receive(&self.conn)
    }

    /// Tells the old process which connections this one serves now; it
    /// closes its copies of those and runs the others on.
    /// `false`: the old process was not told, and serves them on.
    pub(crate) fn adopted(&self, ids: &[u64]) -> bool {
        match conns::confirm(&self.conn, ids) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("could not confirm the connections taken over ({e}); the previous oi keeps them");
                false
            }
        }
    }

    /// Waits (blocking) for the old process's health question, which
    /// comes after the live connections.
    pub(crate) fn question(&self) -> Result<(), String> {
        health::question(&self.conn)
    }

    /// Answers the health question from the service loop (this process
    /// serves `listeners` listeners), and waits (blocking) until the old
    /// process says it has stopped answering the control socket and the
    /// metrics port: the hand-over is complete then.
    pub(crate) fn answer(self, listeners: usize) -> Result<Previous, String> {
        health::answer(&self.conn, listeners)?;
        Ok(Previous { conn: self.conn })
    }

    /// Tells the old process why this one gives up (it keeps serving).
    pub(crate) fn failed(self, why: &str) {
        let _ = wire::send(
            &self.conn,
            Kind::Failed,
            &serde_json::json!({ "error": why }),
            &[],
        );
    }
}

/// The old oi that handed over and drains the connections it kept, as the
/// new one keeps it.
pub(crate) struct Previous {
    /// The conversation, on which its last counts come.
    conn: OwnedFd,
}

impl Previous {
    /// Waits (blocking, as long as the old oi drains) for what it counted
    /// since it sent its counters; `None` when it exits without them.
    pub(crate) fn drained(self) -> Option<serde_json::Value> {
        health::drained(&self.conn)
    }
}
