//! "Did you mean" hints for misspelt keywords and option names.

/// Largest edit distance a hint may be from what was written.
const MAX_DISTANCE: usize = 2;

/// Words longer than this get no hint: the distance is quadratic in length,
/// and nothing that long is a typo of a keyword.
const MAX_HINT_LEN: usize = 40;

/// The candidate closest to `written` within [`MAX_DISTANCE`] edits (ties: the
/// first in `candidates`), ignoring a candidate equal to `written`. Short words
/// need a closer match: a two-letter word is at distance 2 from everything.
pub fn closest<'a>(written: &str, candidates: &[&'a str]) -> Option<&'a str> {
    if written.is_empty() || written.len() > MAX_HINT_LEN {
        return None;
    }
    let limit = if written.chars().count() <= 3 {
        1
    } else {
        MAX_DISTANCE
    };
    candidates
        .iter()
        .filter(|c| **c != written)
        .map(|c| (distance(written, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// ` (did you mean 'x'?)`, or nothing when no candidate is close.
pub fn suggestion(written: &str, candidates: &[&str]) -> String {
    closest(written, candidates).map_or_else(String::new, |c| format!(" (did you mean '{c}'?)"))
}

/// Optimal string alignment distance: insertions, deletions, substitutions
/// and swaps of two neighbours each cost one (so `alow`→`allow` is 1 and
/// `tiemout`→`timeout` is 1).
pub fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance("alow", "allow"), 1);
        assert_eq!(distance("logfle", "logfile"), 1);
        assert_eq!(distance("timout", "timeout"), 1);
        assert_eq!(distance("tiemout", "timeout"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("deny", "deny"), 0);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn hints() {
        let words = ["allow", "deny", "logfile", "pidlogfile", "logcommon"];
        assert_eq!(closest("alow", &words), Some("allow"));
        assert_eq!(closest("logfle", &words), Some("logfile"));
        assert_eq!(closest("pidlogfil", &words), Some("pidlogfile"));
        assert_eq!(closest("dny", &words), Some("deny"));
        assert_eq!(closest("xyzzy", &words), None);
        assert_eq!(closest("ab", &words), None);
        assert_eq!(closest(&"a".repeat(100), &words), None);
        assert_eq!(suggestion("alow", &words), " (did you mean 'allow'?)");
        assert_eq!(suggestion("127.0.0.1", &words), "");
    }
}
