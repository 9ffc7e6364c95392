//! Every file-system operation oi makes on a configured path: the status
//! file, the pid file, the log file, the control socket and unix listener
//! sockets. oi often runs as root and these paths often sit in directories
//! other users can write to (`/tmp`, a shared `/run/...`), so the rule here
//! is: **nothing a writer of that directory plants (a symlink, a FIFO, a file
//! of their own) is followed, blocked on, written through or removed.**
//!
//! How each operation holds it:
//! - Files replaced whole (status file, pid file, [`replace`]) are written to
//!   a temporary file created `O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK` under a
//!   random name, relative to a descriptor of the directory, then renamed
//!   over the target: a planted symlink at either name is replaced, never
//!   followed, and a FIFO is never opened.
//! - The log file ([`open_append`]) is appended to as rinetd does (logrotate
//!   moves it or truncates it, never makes it a symlink), but opened with
//!   `O_NOFOLLOW|O_NONBLOCK`: a symlink is refused, a FIFO does not block.
//! - Socket files ([`bind_unix`]) are created with their final mode (the
//!   umask is set around `bind`, under [`UMASK`]), recorded by device and
//!   inode, removed only if the path still names that inode, and a later
//!   mode change goes through a descriptor of that inode ([`SocketFile::set_mode`]).
//!
//! One window is left, and is the kernel's: between checking the inode at a
//! path and unlinking it, another process can swap the entry. Both calls are
//! made back to back on a directory descriptor, and what can be lost is a
//! directory entry the swapper made a moment before, never a file's content.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Mode regular files are created with, before the umask (as `File::create`
/// and rinetd's `fopen` do).
const FILE_MODE: u32 = 0o666;

/// Held while the process umask is changed around a socket's `bind` (the
/// umask is process-wide) and while any file here is created, so no file is
/// created under another file's umask.
static UMASK: Mutex<()> = Mutex::new(());

/// A path's directory (open) and its last component.
struct Entry {
    /// The directory, opened once: every later call is relative to it.
    dir: OwnedFd,
    /// The file's name in it.
    name: OsString,
}

impl Entry {
    /// Opens `path`'s directory. The path must end in a file name.
    fn of(path: &Path) -> io::Result<Entry> {
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not end in a file name", path.display()),
            )
        })?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = rustix::fs::open(
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Entry {
            dir,
            name: name.to_owned(),
        })
    }

    /// Type and identity of what `name` names now, without following a symlink.
    fn stat(&self, name: &OsStr) -> io::Result<(FileType, (u64, u64))> {
        let st = rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        Ok((FileType::from_raw_mode(st.st_mode), id(&st)))
    }

    /// Unlinks `name` if it is still the inode `want`.
    fn unlink_if(&self, name: &OsStr, want: (u64, u64)) -> io::Result<bool> {
        match self.stat(name) {
            Ok((_, got)) if got == want => {
                rustix::fs::unlinkat(&self.dir, name, AtFlags::empty())?;
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Device and inode: what identifies a file oi made.
#[allow(clippy::unnecessary_cast)] // the field types differ between targets
fn id(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// A name nobody can guess: `.NAME.` and 16 random hex digits, `.tmp`.
fn temp_name(name: &OsStr) -> io::Result<OsString> {
    let mut random = [0u8; 8];
    let mut filled = 0;
    // getrandom(2) returns at most what was asked; bounded by the buffer.
    while filled < random.len() {
        let n =
            rustix::rand::getrandom(&mut random[filled..], rustix::rand::GetRandomFlags::empty())?;
        if n == 0 {
            return Err(io::Error::other("getrandom returned nothing"));
        }
        filled += n;
    }
    let mut t = b".".to_vec();
    t.extend_from_slice(name.as_bytes());
    t.extend_from_slice(format!(".{:016x}.tmp", u64::from_ne_bytes(random)).as_bytes());
    Ok(OsString::from_vec(t))
}

/// Replaces the file at `path` with `bytes`, atomically (a reader sees the
/// old file or the new one): a fresh temporary file beside it, then
/// rename(2). Whatever was at `path` (a file, a symlink, a FIFO) is replaced,
/// never opened.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let at = Entry::of(path)?;
    let tmp = temp_name(&at.name)?;
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let fd = {
        let _umask = UMASK.lock().unwrap_or_else(|p| p.into_inner());
        rustix::fs::openat(&at.dir, &tmp, flags, Mode::from_raw_mode(FILE_MODE))?
    };
    let made = id(&rustix::fs::fstat(&fd)?);
    let mut file = File::from(fd);
    let written = file
        .write_all(bytes)
        .and_then(|()| Ok(rustix::fs::renameat(&at.dir, &tmp, &at.dir, &at.name)?));
    if written.is_err() {
        let _ = at.unlink_if(&tmp, made);
    }
    written
}

/// Opens the log file at `path` for appending, creating it if needed
/// (mode 0666 less the umask, as rinetd's `fopen`). A symlink there is
/// refused (`O_NOFOLLOW`: root must not append through a link someone
/// planted); a FIFO, socket or device is opened without waiting
/// (`O_NONBLOCK`; a FIFO nobody reads is refused with ENXIO). The file is
/// returned with `O_NONBLOCK` still set; the caller decides for non-regular files.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    let flags = OFlags::WRONLY
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let opened = {
        let _umask = UMASK.lock().unwrap_or_else(|p| p.into_inner());
        rustix::fs::open(path, flags, Mode::from_raw_mode(FILE_MODE))
    };
    match opened {
        Ok(fd) => Ok(File::from(fd)),
        Err(Errno::LOOP) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link; oi does not follow one there (name the file itself)",
                path.display()
            ),
        )),
        Err(Errno::NXIO) => Err(io::Error::new(
            io::ErrorKind::NotConnected,
            format!(
                "{}: a FIFO nobody reads (oi does not wait for a reader)",
                path.display()
            ),
        )),
        Err(e) => Err(e.into()),
    }
}

/// A socket file oi made by binding: removed when the last handle is
/// dropped, and only if the path still names the inode the bind made.
/// Cloned by the listener and by the reload bookkeeping, which changes its mode.
#[derive(Clone)]
pub(crate) struct SocketFile(Arc<SocketInner>);

/// What [`SocketFile`] shares.
struct SocketInner {
    /// The directory and name, opened at bind: removal is relative to it.
    at: Entry,
    /// The path as configured, for messages.
    path: PathBuf,
    /// Device and inode right after bind.
    id: (u64, u64),
    /// Set when another process serves the socket now (a hand-over): the
    /// file stays when this one lets go of it.
    kept: std::sync::atomic::AtomicBool,
}

impl Drop for SocketInner {
    fn drop(&mut self) {
        if self.kept.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        match self.at.unlink_if(&self.at.name, self.id) {
            Ok(true) => {}
            Ok(false) => log::debug!(
                "socket file {} is no longer ours: left alone",
                self.path.display()
            ),
            Err(e) => log::warn!("cannot remove socket file {}: {e}", self.path.display()),
        }
    }
}

impl SocketFile {
    /// Leaves the file in place when the last handle goes: a new oi
    /// serves the socket now (`oi upgrade`).
    pub(crate) fn keep(&self) {
        self.0
            .kept
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Removes the file again when the last handle goes: this process
    /// serves the socket now (a new oi whose hand-over has completed).
    pub(crate) fn own(&self) {
        self.0
            .kept
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the socket file's permissions (a reload's new `mode=`) through a
    /// descriptor of the inode the bind made: a symlink or another file put
    /// at the path meanwhile is left alone, and the error says so.
    pub(crate) fn set_mode(&self, mode: u32) -> io::Result<()> {
        let inner = &self.0;
        let fd = rustix::fs::openat(
            &inner.at.dir,
            &inner.at.name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Socket || id(&st) != inner.id {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path no longer names the socket oi bound (left alone)",
            ));
        }
        // fchmod(2) on a socket descriptor changes the socket, not its file;
        // an O_PATH descriptor of the file is changed through /proc, which
        // names exactly that inode, whatever happens to the path.
        let proc = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        rustix::fs::chmod(proc.as_str(), Mode::from_raw_mode(mode & 0o7777))?;
        Ok(())
    }

    /// Where the file is, as configured.
    pub(crate) fn path(&self) -> &Path {
        &self.0.path
    }

    /// Device and inode the bind made: what a new oi checks the path
    /// against when it takes the socket over (`oi upgrade`).
    pub(crate) fn id(&self) -> (u64, u64) {
        self.0.id
    }

    /// The socket file at `path` that a previous oi made (device and inode
    /// `want`) and handed over with its socket (`oi upgrade`): this process
    /// removes it when done and applies a new `mode=` to it, as if it had
    /// bound it. Refused when the path names anything else now.
    pub(crate) fn adopt(path: &Path, want: (u64, u64)) -> io::Result<SocketFile> {
        let at = Entry::of(path)?;
        match at.stat(&at.name)? {
            (FileType::Socket, id) if id == want => Ok(SocketFile(Arc::new(SocketInner {
                at,
                path: path.to_path_buf(),
                id,
                kept: std::sync::atomic::AtomicBool::new(false),
            }))),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path no longer names the socket the previous oi bound (left alone)",
            )),
        }
    }
}

/// A new non-blocking, close-on-exec unix stream socket.
pub(crate) fn stream_socket() -> io::Result<OwnedFd> {
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        flags,
        None,
    )?)
}

/// Binds `fd` at `path` with the file created at `mode` (0777 less the umask
/// when `None`), after removing a stale socket file there (a socket nothing
/// listens on); anything else at the path is refused and left alone.
pub(crate) fn bind_unix(fd: &OwnedFd, path: &Path, mode: Option<u32>) -> io::Result<SocketFile> {
    let at = Entry::of(path)?;
    let sockaddr = SocketAddrUnix::new(path)?;
    clear_stale(&at, path, &sockaddr)?;
    {
        let _umask = UMASK.lock().unwrap_or_else(|p| p.into_inner());
        let old = mode.map(|m| rustix::process::umask(Mode::from_raw_mode(!m & 0o777)));
        let bound = rustix::net::bind(fd, &sockaddr);
        if let Some(old) = old {
            rustix::process::umask(old);
        }
        bound?;
    }
    match at.stat(&at.name) {
        Ok((FileType::Socket, id)) => Ok(SocketFile(Arc::new(SocketInner {
            at,
            path: path.to_path_buf(),
            id,
            kept: std::sync::atomic::AtomicBool::new(false),
        }))),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} was replaced right after bind", path.display()),
        )),
        Err(e) => Err(e),
    }
}

/// Removes a stale socket file at `path`, or says why the path cannot be used.
fn clear_stale(at: &Entry, path: &Path, sockaddr: &SocketAddrUnix) -> io::Result<()> {
    let (kind, found) = match at.stat(&at.name) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if kind != FileType::Socket {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket (left alone; remove it or choose another path)",
                path.display()
            ),
        ));
    }
    // A socket file: stale unless something accepts connections on it. A
    // non-blocking connect to a unix socket never waits: it succeeds, is
    // refused (nothing listens: stale), or says the backlog is full
    // (EAGAIN: something listens).
    let probe = stream_socket()?;
    match rustix::net::connect(&probe, sockaddr) {
        Err(Errno::CONNREFUSED) => {
            log::info!("removing stale socket file {}", path.display());
            at.unlink_if(&at.name, found).map(drop)
        }
        Ok(()) | Err(Errno::AGAIN) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("another process is listening on {}", path.display()),
        )),
        Err(e) => Err(e.into()),
    }
}

// Tested through every site that uses it: src/process/tests_safe_fs.rs.
