//! Ports for configurations of the real binary, which cannot listen on port 0.
//!
//! Binding port 0, noting the port and closing the socket races: the kernel
//! hands out that ephemeral port again, to a listener of another test or as
//! the local port of any outgoing connection (and a connected socket on a
//! port makes a later `bind` of it fail), before oi binds it. So ports come
//! from outside the kernel's ephemeral range (`ip_local_port_range`), which
//! neither `bind(…:0)` nor `connect` ever picks, in blocks of [`BLOCK`] ports
//! that one test process reserves by holding an exclusive `flock` on the
//! block's file: test runs in other worktrees at the same time take other
//! blocks. Within the process a counter hands out each port once. A port
//! is probed with a TCP and a UDP bind before it is handed out, so one some
//! other program holds is skipped.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Ports per reserved block.
const BLOCK: u16 = 128;

/// The lowest port used: below it are well-known and registered services'
/// usual ports that a developer's machine may run.
const LOWEST: u16 = 10_000;

/// What this process has reserved.
struct Reserved {
    /// Lock files of the blocks this process holds (kept open: the lock is the fd's).
    locks: Vec<OwnedFd>,
    /// The next port to try in the current block, and the block's end.
    next: u16,
    /// One past the current block's last port.
    end: u16,
    /// The next block number to try.
    next_block: u32,
}

static RESERVED: Mutex<Reserved> = Mutex::new(Reserved {
    locks: Vec::new(),
    next: 0,
    end: 0,
    next_block: 0,
});

/// The ports outside the ephemeral range this machine leaves for tests:
/// the larger of the gaps below and above `ip_local_port_range`.
fn usable_range() -> (u16, u16) {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut it = text.split_whitespace().map(|n| n.parse::<u16>());
    let (lo, hi) = match (it.next(), it.next()) {
        (Some(Ok(lo)), Some(Ok(hi))) => (lo, hi),
        _ => (32_768, 60_999),
    };
    let below = (LOWEST, lo.max(LOWEST));
    let above = (hi.saturating_add(1).max(LOWEST), u16::MAX);
    if below.1 - below.0 >= above.1 - above.0 {
        below
    } else {
        above
    }
}

/// The directory of block lock files, shared by every test process of this user.
fn lock_dir() -> std::path::PathBuf {
    let uid = rustix::process::getuid().as_raw();
    let dir = std::env::temp_dir().join(format!("oi-test-ports-{uid}"));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Locks block `b`'s file; `None` if another process holds it.
fn lock_block(b: u32) -> Option<OwnedFd> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_dir().join(format!("block-{b}")))
        .ok()?;
    let fd = OwnedFd::from(file);
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(fd)
}

/// Takes the next `count` consecutive blocks no other process holds and
/// returns the first port; panics when no such run is left.
fn reserve_blocks(r: &mut Reserved, count: u32) -> u16 {
    let (lo, hi) = usable_range();
    let blocks = u32::from((hi - lo) / BLOCK);
    assert!(
        blocks >= count,
        "too few ports outside the ephemeral range ({lo}..{hi})"
    );
    // Start where the process id points, so parallel runs rarely try the
    // same blocks first.
    if r.locks.is_empty() {
        r.next_block = std::process::id() % blocks;
    }
    for _ in 0..blocks {
        let b = r.next_block % blocks;
        if b + count > blocks {
            r.next_block = 0;
            continue;
        }
        r.next_block = b + count;
        // All or none: a run half taken is given back.
        let taken: Vec<OwnedFd> = (b..b + count).map_while(lock_block).collect();
        if taken.len() == count as usize {
            r.locks.extend(taken);
            // `b + count <= blocks`, so the run ends at or below `hi`.
            return lo + (b as u16) * BLOCK;
        }
    }
    panic!("no {count} free blocks of test ports in {lo}..{hi}: other processes hold them");
}

/// Takes the next block for [`free_port`].
fn reserve_block(r: &mut Reserved) {
    r.next = reserve_blocks(r, 1);
    r.end = r.next + BLOCK;
}

/// The first of `count` consecutive ports on 127.0.0.1 that no other test
/// is given and that were free for TCP a moment ago (for port ranges).
pub fn free_port_run(count: u16) -> u16 {
    let mut r = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
    let blocks = u32::from(count.div_ceil(BLOCK));
    for _ in 0..8 {
        let base = reserve_blocks(&mut r, blocks);
        let all_free = (base..base + count)
            .all(|p| TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, p))).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no run of {count} free ports");
}

/// Whether nothing holds `port` on 127.0.0.1, for TCP or UDP.
fn unused(port: u16) -> bool {
    let a = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpListener::bind(a).is_ok() && UdpSocket::bind(a).is_ok()
}

/// A port on 127.0.0.1 that no other test of any test process is given and
/// that nothing held a moment ago, for TCP or UDP. Its descriptor is not
/// counted by `open_fds`.
pub fn free_port() -> u16 {
    let mut r = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if r.next >= r.end {
            reserve_block(&mut r);
        }
        let port = r.next;
        r.next += 1;
        if unused(port) {
            return port;
        }
    }
}

/// Like [`free_port`] (every port it gives is free for UDP too).
pub fn free_udp_port() -> u16 {
    free_port()
}

/// Whether `path` is one of the lock files [`free_port`] holds, so descriptor
/// counts can leave them out.
pub fn is_port_lock(path: &std::path::Path) -> bool {
    path.starts_with(lock_dir())
}
