//! Dropping root after binding (`--user`/`--group`, or `user`/`group` lines):
//! for the drop-in mode that Debian's rinetd unit runs as root. Every
//! listener is bound first; then the process becomes the user, keeping only
//! `CAP_NET_BIND_SERVICE`, so a reload can still bind a port below 1024,
//! and sets `no_new_privs`. The shipped unit keeps its own sandbox and needs
//! none of this.
//!
//! The calls are rustix's per-thread ones (Linux keeps credentials per
//! thread; libc's wrappers broadcast to every thread, rustix's do not), so
//! this runs while the process has one thread, before the log writer,
//! executors and observer exist; with more, it refuses rather than leave a
//! thread running as root. What runs after (log file, status file, control
//! socket, a reload's reopen) runs as the user: those paths must be the
//! user's to write.
//!
//! Names are looked up in `/etc/passwd` and `/etc/group` (numeric ids work
//! too); NSS sources such as LDAP are not consulted.

use rustix::thread::{CapabilitySet, CapabilitySets, Gid, Uid};
use std::io;
use std::os::fd::BorrowedFd;

/// Who to become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// The user id.
    uid: u32,
    /// The group id: `--group`, else the user's primary group.
    gid: u32,
    /// As given, for messages.
    name: String,
}

/// The id of `name` in a `name:x:id:...` file (`/etc/passwd`, `/etc/group`),
/// and the field after it (the primary group, in `/etc/passwd`).
fn lookup(file: &str, text: &str, name: &str) -> Result<(u32, Option<u32>), String> {
    for line in text.lines() {
        let mut f = line.split(':');
        if f.next() != Some(name) {
            continue;
        }
        let id = f.nth(1).and_then(|v| v.parse().ok());
        let next = f.next().and_then(|v| v.parse().ok());
        return id
            .map(|id| (id, next))
            .ok_or_else(|| format!("{file}: malformed entry for '{name}'"));
    }
    Err(format!("no '{name}' in {file}"))
}

/// Resolves `user` (and `group`) to ids, from the two files' text.
pub(crate) fn resolve_in(
    user: &str,
    group: Option<&str>,
    passwd: &str,
    groups: &str,
) -> Result<Target, String> {
    let (uid, primary) = match user.parse::<u32>() {
        Ok(uid) => (uid, None),
        Err(_) => lookup("/etc/passwd", passwd, user)?,
    };
    let gid = match group {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => lookup("/etc/group", groups, g)?.0,
        },
        None => {
            primary.ok_or_else(|| format!("user {user} is numeric: give its group with --group"))?
        }
    };
    if uid == 0 {
        return Err(format!("user '{user}' is root: nothing to drop"));
    }
    Ok(Target {
        uid,
        gid,
        name: user.to_string(),
    })
}

impl Target {
    /// Whether this process runs as the target already: a new oi started
    /// by `oi upgrade` from one that dropped to it (same `--user`).
    pub(crate) fn is_current(&self) -> bool {
        rustix::process::geteuid().as_raw() == self.uid
            && rustix::process::getegid().as_raw() == self.gid
    }
}

/// Resolves `user` (and `group`) from `/etc/passwd` and `/etc/group`.
pub(crate) fn resolve(user: &str, group: Option<&str>) -> Result<Target, String> {
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    resolve_in(user, group, &read("/etc/passwd")?, &read("/etc/group")?)
}

/// Makes `t` the owner of each listening socket in `listeners`, while oi
/// is still root. The kernel lets a socket join a listener's `SO_REUSEPORT`
/// group only when both have the same owner (the socket's `sk_uid`), and a
/// socket's owner is whoever made it: root, for everything start-up bound.
/// So after the drop, the per-thread sockets that `listen` makes as the user
/// were refused ("Address already in use") and each listener kept a single
/// accept loop. `fchown` on a socket sets that owner (Linux's sockfs, since
/// 4.11), so every thread gets its own socket in the group again.
pub(crate) fn give_listeners(t: &Target, listeners: &[BorrowedFd<'_>]) -> io::Result<()> {
    let uid = Some(Uid::from_raw(t.uid));
    let gid = Some(Gid::from_raw(t.gid));
    for fd in listeners {
        rustix::fs::fchown(fd, uid, gid)?;
    }
    Ok(())
}

/// Becomes `t`, keeping only `CAP_NET_BIND_SERVICE`, and `CAP_NET_ADMIN`
/// too when `net_admin` (a `transparent` rule needs it for every client).
/// Must run while the process has a single thread (see the module documentation).
///
/// The kept capabilities are also raised in the inheritable and ambient
/// sets: the only program oi starts is a new oi (`oi upgrade`), which runs
/// as this user and, an exec of a file with no capabilities of its own
/// clearing everything else, would otherwise start with none (its
/// transparent rules failing every client, a reload unable to bind a low
/// port). Ambient capabilities pass an exec under `no_new_privs` and never
/// grow: the new oi has exactly what this one kept.
pub(crate) fn drop_to(t: &Target, net_admin: bool) -> io::Result<()> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "cannot drop privileges with {threads} threads running"
        )));
    }
    let gid = Gid::from_raw(t.gid);
    let uid = Uid::from_raw(t.uid);
    // Keep the permitted set across the uid change, then narrow it.
    rustix::thread::set_keep_capabilities(true)?;
    rustix::thread::set_thread_groups(&[gid])?;
    rustix::thread::set_thread_res_gid(gid, gid, gid)?;
    rustix::thread::set_thread_res_uid(uid, uid, uid)?;
    rustix::thread::set_keep_capabilities(false)?;
    let mut keep = CapabilitySet::NET_BIND_SERVICE;
    if net_admin {
        keep |= CapabilitySet::NET_ADMIN;
    }
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: keep,
            permitted: keep,
            inheritable: keep,
        },
    )?;
    for cap in [CapabilitySet::NET_BIND_SERVICE, CapabilitySet::NET_ADMIN] {
        if keep.contains(cap) {
            rustix::thread::configure_capability_in_ambient_set(cap, true)?;
        }
    }
    rustix::thread::set_no_new_privs(true)?;
    let kept = if net_admin {
        "CAP_NET_BIND_SERVICE and CAP_NET_ADMIN (for transparent rules)"
    } else {
        "CAP_NET_BIND_SERVICE only"
    };
    log::info!(
        "running as user {} (uid {}, gid {}) with {kept}",
        t.name,
        t.uid,
        t.gid
    );
    Ok(())
}

/// Bit of `CAP_NET_ADMIN` in the kernel's capability masks.
const CAP_NET_ADMIN_BIT: u32 = 12;

/// Bit of `CAP_NET_RAW`, which the kernel also accepts for IP_TRANSPARENT.
const CAP_NET_RAW_BIT: u32 = 13;

/// Whether this process may set IP_TRANSPARENT (what `transparent` needs):
/// `CAP_NET_ADMIN` or `CAP_NET_RAW` in effect, from `/proc/self/status`;
/// `None` when that cannot be read.
pub(crate) fn may_be_transparent() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let admin = effective_has(&status, CAP_NET_ADMIN_BIT)?;
    Some(admin || effective_has(&status, CAP_NET_RAW_BIT)?)
}

/// Whether the `CapEff:` line of a `/proc/PID/status` text has `bit` set.
fn effective_has(status: &str, bit: u32) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask.checked_shr(bit)? & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_admin_is_read_from_the_effective_set() {
        let root = "Name:\toi\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_has(root, CAP_NET_ADMIN_BIT), Some(true));
        // CAP_NET_BIND_SERVICE (bit 10) only, as after drop_to without transparent.
        let user = "CapPrm:\t0000000000000400\nCapEff:\t0000000000000400\n";
        assert_eq!(effective_has(user, CAP_NET_ADMIN_BIT), Some(false));
        let both = "CapEff:\t0000000000001400\n";
        assert_eq!(effective_has(both, CAP_NET_ADMIN_BIT), Some(true));
        let raw = "CapEff:\t0000000000002000\n";
        assert_eq!(effective_has(raw, CAP_NET_ADMIN_BIT), Some(false));
        assert_eq!(effective_has(raw, CAP_NET_RAW_BIT), Some(true));
        assert_eq!(effective_has("Name:\toi\n", CAP_NET_ADMIN_BIT), None);
        assert_eq!(effective_has("CapEff:\tzz\n", CAP_NET_ADMIN_BIT), None);
    }

    #[test]
    fn names_and_numbers_resolve_and_root_is_refused() {
        let passwd = "root:x:0:0::/root:/bin/sh\noi:x:998:997::/:/usr/sbin/nologin\n";
        let group = "root:x:0:\noi:x:997:\nnet:x:42:\n";
        let t = resolve_in("oi", None, passwd, group).expect("oi");
        assert_eq!((t.uid, t.gid), (998, 997));
        let t = resolve_in("oi", Some("net"), passwd, group).expect("group");
        assert_eq!(t.gid, 42);
        let t = resolve_in("1234", Some("5"), passwd, group).expect("numeric");
        assert_eq!((t.uid, t.gid), (1234, 5));
        assert!(resolve_in("1234", None, passwd, group).is_err());
        assert!(resolve_in("nobody", None, passwd, group)
            .expect_err("missing")
            .contains("no 'nobody' in /etc/passwd"));
        assert!(resolve_in("root", None, passwd, group).is_err());
    }
}
