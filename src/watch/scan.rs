//! What a reload would read, found the way a reload finds it: the main
//! file, every file an `include` names (read through the configuration's
//! own [`FsIncludes`], so the list is the parser's, not a second guess), and
//! the listing each include glob expands to. From that come a digest (a
//! change to any real path, listing or content changes it) and the
//! directories to watch, each with the names in it that matter.
//!
//! Directories, not files, are watched: an editor's write-to-temp-then-rename
//! and Kubernetes' ConfigMap swap (`rinetd.conf -> ..data/rinetd.conf`,
//! `..data -> ..2026_11_24_...`, replaced by renaming `..data_tmp` over
//! `..data`) put a new inode at the old name, which a watch on the old file
//! would never report. So every symbolic link on the way to a file (the
//! file itself, each hop of its target, and each symlinked directory in
//! those paths) makes its name in its directory one that matters.

use oi_config::{FsIncludes, IncludeSource, IncludedFile};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Component, Path, PathBuf};

/// Most symbolic links followed from one path: the kernel's own limit
/// (ELOOP after 40), so a loop ends here too.
const MAX_LINK_HOPS: usize = 40;

/// What changes in one watched directory matter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Interest {
    /// Any name: an include glob lists this directory, so a new file counts.
    Any,
    /// Only these names: files read, and symbolic links on the way to them.
    Names(BTreeSet<OsString>),
}

impl Interest {
    /// Whether a change to `name` in the directory matters.
    pub(super) fn covers(&self, name: &OsStr) -> bool {
        match self {
            Interest::Any => true,
            Interest::Names(names) => names.contains(name),
        }
    }

    /// Both interests at once (two spellings of one directory share a watch).
    pub(super) fn merge(&mut self, other: &Interest) {
        match (&mut *self, other) {
            (Interest::Any, _) => {}
            (_, Interest::Any) => *self = Interest::Any,
            (Interest::Names(a), Interest::Names(b)) => a.extend(b.iter().cloned()),
        }
    }
}

/// One look at everything a reload of the configuration would read.
pub(super) struct Scan {
    /// Digest of every real path, glob listing and content (or read error)
    /// seen: equal digests mean a reload would read the same thing.
    pub(super) digest: u64,
    /// The directories to watch, by real path, and what matters in each.
    pub(super) dirs: BTreeMap<PathBuf, Interest>,
    /// How many files were read, the main file counted (for the log line).
    pub(super) files: usize,
}

/// Reads the configuration at `main` (an absolute path) and every file it
/// includes, as a reload would. Errors in the files are not reported here:
/// the reload this may trigger reports them; an unreadable file still counts
/// (its error is part of the digest, and its directory is watched, so its
/// return is seen).
pub(super) fn scan(main: &Path) -> Scan {
    load(main, None).1
}

/// Loads the configuration at `main` as [`oi_config::load_within`] does
/// (under `rule_budget`), recording what it read: the digest of a reload's
/// own read, so what the files hold later is compared with what the running
/// configuration came from, not with what a scan happened to see. The
/// watcher's scans go through here too, so equal files give equal digests.
pub(super) fn load(
    main: &Path,
    rule_budget: Option<usize>,
) -> (Result<oi_config::Config, oi_config::ConfigErrors>, Scan) {
    let mut rec = Recorder {
        inner: FsIncludes::new(main),
        hasher: DefaultHasher::new(),
        dirs: BTreeMap::new(),
        files: 0,
    };
    rec.note_path(main);
    std::fs::canonicalize(main)
        .map_err(|e| e.to_string())
        .hash(&mut rec.hasher);
    let bytes = oi_config::read_limited(main);
    bytes.hash(&mut rec.hasher);
    rec.files += 1;
    let config = match oi_config::load_read(main, bytes, &mut rec, rule_budget) {
        Ok((config, None)) => Ok(config),
        Ok((_, Some(errors))) | Err(errors) => Err(errors),
    };
    let scan = Scan {
        digest: rec.hasher.finish(),
        dirs: rec.dirs,
        files: rec.files,
    };
    (config, scan)
}

/// An [`IncludeSource`] that reads through [`FsIncludes`] and records what
/// it read: into the digest, and as directories to watch.
struct Recorder {
    /// The real source, the one a reload uses.
    inner: FsIncludes,
    /// Everything read so far, in order.
    hasher: DefaultHasher,
    /// Directories to watch, by real path.
    dirs: BTreeMap<PathBuf, Interest>,
    /// Files read, the main file counted.
    files: usize,
}

impl Recorder {
    /// Marks `name` in `dir` (or, for `None`, every name) as mattering.
    /// Directories are keyed by real path, so two spellings are one watch;
    /// one that does not exist is skipped (nothing there to watch).
    fn interest(&mut self, dir: &Path, name: Option<&OsStr>) {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let Ok(real) = std::fs::canonicalize(dir) else {
            return;
        };
        let want = match name {
            Some(n) => Interest::Names(BTreeSet::from([n.to_os_string()])),
            None => Interest::Any,
        };
        match self.dirs.get_mut(&real) {
            Some(have) => have.merge(&want),
            None => {
                self.dirs.insert(real, want);
            }
        }
    }

    /// Marks every symbolic link among `path`'s ancestors: swapping one
    /// (`..data`) swaps everything under it.
    fn note_linked_ancestors(&mut self, path: &Path) {
        for dir in path.ancestors().skip(1) {
            let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
                continue;
            };
            if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
                self.interest(parent, Some(name));
            }
        }
    }

    /// Marks the file at `path`: its name in its directory, then each hop of
    /// a symbolic link to it, then its real location.
    fn note_path(&mut self, path: &Path) {
        let mut hop = path.to_path_buf();
        for _ in 0..MAX_LINK_HOPS {
            let (Some(dir), Some(name)) = (hop.parent(), hop.file_name()) else {
                break;
            };
            self.interest(dir, Some(name));
            self.note_linked_ancestors(&hop);
            let Ok(target) = std::fs::read_link(&hop) else {
                break;
            };
            hop = dir.join(target);
        }
        if let Ok(real) = std::fs::canonicalize(path) {
            if let (Some(dir), Some(name)) = (real.parent(), real.file_name()) {
                self.interest(dir, Some(name));
            }
        }
    }

    /// Marks the directory an include glob lists: the longest leading part
    /// of `full` without wildcards. (A glob with wildcards in a directory
    /// part, `conf.d/*/x.conf`, is watched at that leading part and at each
    /// matched file's directory; a new subdirectory is seen, a file created
    /// in it afterwards only once something else changes.)
    fn note_glob(&mut self, full: &Path) {
        let mut dir = PathBuf::new();
        for part in full.components() {
            if let Component::Normal(p) = part {
                if oi_config::has_wildcards(&p.to_string_lossy()) {
                    break;
                }
            }
            dir.push(part);
        }
        self.note_linked_ancestors(&dir.join("x"));
        self.interest(&dir, None);
    }
}

impl IncludeSource for Recorder {
    fn main_file(&self) -> IncludedFile {
        self.inner.main_file()
    }

    fn expand(&mut self, from: &IncludedFile, pattern: &str) -> Result<Vec<IncludedFile>, String> {
        let found = self.inner.expand(from, pattern);
        if oi_config::has_wildcards(pattern) {
            let dir = Path::new(&from.name).parent().unwrap_or(Path::new(""));
            self.note_glob(&dir.join(pattern));
        }
        pattern.hash(&mut self.hasher);
        match &found {
            Ok(files) => {
                for f in files {
                    (&f.name, &f.key).hash(&mut self.hasher);
                }
            }
            Err(e) => e.hash(&mut self.hasher),
        }
        found
    }

    fn read(&mut self, file: &IncludedFile) -> Result<String, String> {
        let text = self.inner.read(file);
        self.files += 1;
        self.note_path(Path::new(&file.name));
        (&file.name, &file.key, &text).hash(&mut self.hasher);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn a_change_anywhere_a_reload_reads_changes_the_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("real");
        let main = root.join("oi.conf");
        std::fs::create_dir(root.join("conf.d")).expect("conf.d");
        write(&main, "include conf.d/*.conf\ninclude one.conf\n");
        write(&root.join("one.conf"), "logcommon\n");
        let first = scan(&main);
        assert_eq!(
            first.files, 2,
            "main and one.conf (the glob matches nothing)"
        );
        assert_eq!(scan(&main).digest, first.digest, "nothing changed");
        // The glob's directory matters whole; the main directory only by name.
        assert_eq!(first.dirs.get(&root.join("conf.d")), Some(&Interest::Any));
        let names = first.dirs.get(&root).expect("main directory watched");
        assert!(names.covers(OsStr::new("oi.conf")) && names.covers(OsStr::new("one.conf")));
        assert!(!names.covers(OsStr::new("oi.log")), "{names:?}");

        write(&root.join("conf.d/a.conf"), "logcommon\n");
        let added = scan(&main);
        assert_ne!(added.digest, first.digest, "a new file matching the glob");
        write(&root.join("one.conf"), "logcommon \n");
        assert_ne!(scan(&main).digest, added.digest, "an included file's text");
    }

    #[test]
    fn a_swapped_symlink_changes_the_digest_and_its_names_are_watched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("real");
        for (d, text) in [("..v1", "logcommon\n"), ("..v2", "logcommon\n")] {
            std::fs::create_dir(root.join(d)).expect("dir");
            write(&root.join(d).join("rinetd.conf"), text);
        }
        std::os::unix::fs::symlink("..v1", root.join("..data")).expect("..data");
        std::os::unix::fs::symlink("..data/rinetd.conf", root.join("rinetd.conf")).expect("link");
        let main = root.join("rinetd.conf");
        let before = scan(&main);
        let names = before.dirs.get(&root).expect("the link's directory");
        assert!(names.covers(OsStr::new("rinetd.conf")), "{names:?}");
        assert!(names.covers(OsStr::new("..data")), "{names:?}");
        assert!(
            before.dirs.contains_key(&root.join("..v1")),
            "the real directory"
        );

        // Same text, new target: the real path changed, so a reload is due.
        std::os::unix::fs::symlink("..v2", root.join("..data_tmp")).expect("tmp");
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
        let after = scan(&main);
        assert_ne!(after.digest, before.digest);
        assert!(after.dirs.contains_key(&root.join("..v2")));
        assert!(!after.dirs.contains_key(&root.join("..v1")));
    }
}
