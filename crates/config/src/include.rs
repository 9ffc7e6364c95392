//! `include FILE|GLOB`: the file-system side. The parser asks an
//! [`IncludeSource`] for the files a pattern names and for their text, so it
//! stays pure and its tests need no files; [`FsIncludes`] is the real one.

use std::path::{Path, PathBuf};

/// Longest include chain, in files, the main file counted (as rinetd-uv:
/// the main file and nine nested levels of `include`).
pub const MAX_INCLUDE_DEPTH: usize = 10;

/// Most files one configuration may read through `include`, counting
/// repeats: bounds the work of a wide glob included at every level.
pub const MAX_INCLUDED_FILES: usize = 1024;

/// One file an `include` pattern matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncludedFile {
    /// The file's name as messages show it (the including file's directory
    /// joined with what matched).
    pub name: String,
    /// What makes two names the same file (the canonical path); include
    /// cycles are found by comparing these.
    pub key: String,
}

/// Where included files come from.
pub trait IncludeSource {
    /// The main file (the one given with `-c`), for cycle detection and messages.
    fn main_file(&self) -> IncludedFile;

    /// The files `pattern`, written in `from`, names, in the order to read
    /// them. A pattern without wildcards names one file whether or not it
    /// exists (reading it then fails); a wildcard pattern may match nothing.
    fn expand(&mut self, from: &IncludedFile, pattern: &str) -> Result<Vec<IncludedFile>, String>;

    /// The text of one file from [`IncludeSource::expand`].
    fn read(&mut self, file: &IncludedFile) -> Result<String, String>;
}

/// Whether `pattern` contains glob wildcards (`*`, `?`, `[`).
pub fn has_wildcards(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// Included files on the file system: patterns relative to the including
/// file's directory, expanded with the `glob` crate in sorted order, each file
/// read with [`super::read_limited`] (so each is a regular file under the size cap).
pub struct FsIncludes {
    /// The main configuration file as given on the command line.
    main: PathBuf,
}

impl FsIncludes {
    /// Includes for the configuration at `main`.
    pub fn new(main: &Path) -> Self {
        FsIncludes {
            main: main.to_path_buf(),
        }
    }

    /// The entry for `path`: its name as given, its canonical path as the key.
    fn file(path: &Path) -> IncludedFile {
        let name = path.display().to_string();
        let key =
            std::fs::canonicalize(path).map_or_else(|_| name.clone(), |p| p.display().to_string());
        IncludedFile { name, key }
    }
}

impl IncludeSource for FsIncludes {
    fn main_file(&self) -> IncludedFile {
        Self::file(&self.main)
    }

    fn expand(&mut self, from: &IncludedFile, pattern: &str) -> Result<Vec<IncludedFile>, String> {
        let dir = Path::new(&from.name).parent().unwrap_or(Path::new(""));
        let joined = dir.join(pattern);
        if !has_wildcards(pattern) {
            return Ok(vec![Self::file(&joined)]);
        }
        // Only the pattern's own wildcards count: the directory is escaped.
        let full = if Path::new(pattern).is_absolute() || dir.as_os_str().is_empty() {
            pattern.to_string()
        } else {
            let dir = dir
                .to_str()
                .ok_or("the including file's directory is not UTF-8")?;
            format!("{}/{pattern}", glob::Pattern::escape(dir))
        };
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            // As the shell and glob(3): `*.conf` does not match `.hidden.conf`.
            require_literal_leading_dot: true,
        };
        let paths = glob::glob_with(&full, options).map_err(|e| format!("invalid pattern: {e}"))?;
        let mut files = Vec::new();
        for entry in paths {
            let path = entry.map_err(|e| e.to_string())?;
            files.push(Self::file(&path));
            if files.len() > MAX_INCLUDED_FILES {
                break;
            }
        }
        // glob sorts each directory's entries; sort the whole list so
        // `conf.d/*/x.conf` reads in one alphabetical order too.
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    fn read(&mut self, file: &IncludedFile) -> Result<String, String> {
        let bytes = super::read_limited(Path::new(&file.name))?;
        super::bytes::decode(&bytes, false)
            .map(|t| t.into_owned())
            .map_err(|e| {
                format!(
                    "line {}: {}: '{}'",
                    e.line,
                    e.message,
                    super::Shown(&e.text)
                )
            })
    }
}

/// Included files held in memory, for tests and the fuzzer: names are matched
/// against a pattern with `glob::Pattern`, as whole strings.
#[derive(Clone, Debug, Default)]
pub struct MemIncludes {
    /// Name of the main file.
    pub main: String,
    /// Every other file: name and text.
    pub files: Vec<(String, String)>,
}

impl IncludeSource for MemIncludes {
    fn main_file(&self) -> IncludedFile {
        IncludedFile {
            name: self.main.clone(),
            key: self.main.clone(),
        }
    }

    fn expand(&mut self, _from: &IncludedFile, pattern: &str) -> Result<Vec<IncludedFile>, String> {
        if !has_wildcards(pattern) {
            let name = pattern.to_string();
            return Ok(vec![IncludedFile {
                key: name.clone(),
                name,
            }]);
        }
        let pattern = glob::Pattern::new(pattern).map_err(|e| format!("invalid pattern: {e}"))?;
        let mut names: Vec<&String> = self
            .files
            .iter()
            .map(|(n, _)| n)
            .filter(|n| pattern.matches(n))
            .collect();
        names.sort();
        names.dedup();
        Ok(names
            .into_iter()
            .map(|n| IncludedFile {
                name: n.clone(),
                key: n.clone(),
            })
            .collect())
    }

    fn read(&mut self, file: &IncludedFile) -> Result<String, String> {
        self.files
            .iter()
            .find(|(n, _)| *n == file.name)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| "No such file or directory (os error 2)".to_string())
    }
}
