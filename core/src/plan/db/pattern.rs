//! Path patterns of database rules: a small glob over root-relative paths
//! with one capture that reads the architecture.
//!
//! A hand-written matcher rather than a regex: the language is tiny, the
//! captures need decoding that a regex cannot express (CK tokens, `gfx11xx`
//! families, MIOpen's CU counts), and it works on bytes, so no path can make
//! it slice inside a character or panic.
//!
//! Matching explores the alternatives the way a backtracking matcher
//! would (`*` shortest first, `**` fewest components first, `{a,b}` in
//! order), so the first match found — and the capture it reads — is the
//! backtracking one; but it remembers the states that failed, so its work
//! is bounded by a constant × pattern length × path length whatever the
//! pattern (see "Matching" below). Operators write rules, and a rule such
//! as `*a*a*a*a*b{arch}` must not be able to stall a listing.

use thiserror::Error;

use super::capture::read;
pub use super::capture::Capture;
use super::DbArch;

/// Why a pattern is unusable. Shown with the rule's file and line.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PatternError {
    #[error("empty pattern")]
    Empty,
    #[error("patterns are relative to the served root: drop the leading '/' (start with **/ to match at any depth)")]
    Absolute,
    #[error("empty path component (\"//\" or a trailing '/')")]
    EmptyComponent,
    #[error("'**' must be a whole path component (write **/name, not **name)")]
    DoubleStarInName,
    #[error("'{{' without a closing '}}'")]
    Unclosed,
    #[error("'}}' without an opening '{{'")]
    StrayClose,
    #[error("unknown {{{0}}}: use {{arch}}, {{arch_cu}}, {{ck_arch}}, {{family}}, {{hex64}}, or {{a,b}} for alternatives")]
    UnknownName(String),
    #[error("alternatives {{{0}}} may hold plain text only (no '*', '?', '{{' or '/')")]
    BadAlternative(String),
    #[error("more than one capture: a file belongs to one architecture")]
    TwoCaptures,
    #[error("pattern longer than {MAX_PATTERN} bytes")]
    TooLong,
}

/// The longest pattern accepted. Matching costs up to a constant × pattern
/// length × path length, and keeps one bit per (pattern position, path
/// position); the cap keeps both small for any path. Real rules are under
/// 100 bytes.
pub const MAX_PATTERN: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Lit(Vec<u8>),
    /// `*`: any run of characters within one component.
    Star,
    /// `?`: one character.
    One,
    /// `{a,b,}`: one of these texts.
    Alt(Vec<Vec<u8>>),
    /// `{hex64}`: 64 hex digits (a content hash).
    Hex64,
    Cap(Capture),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Comp {
    /// `**`: any number of components; as the last component, at least one
    /// (`dir/**` means "anything beneath dir", not dir itself).
    Any,
    Seg(Vec<Tok>),
}

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    comps: Vec<Comp>,
    capture: Option<Capture>,
    /// Texts every matching path holds within one of its components: the
    /// pattern's literal runs, and `gfx` where it captures (every capture
    /// reads a name starting `gfx`). Classification runs for every listed
    /// entry against every rule; a path lacking one of these cannot match,
    /// and finding that out is a few substring searches instead of a walk.
    needles: Vec<Vec<u8>>,
}

/// One component of the path being matched; `Beneath` stands for "any
/// entry inside the directory" when a directory is classified, and only
/// `**` matches it.
#[derive(Clone, Copy)]
pub(super) enum PathComp<'a> {
    Name(&'a [u8]),
    Beneath,
}

/// Result of a successful match: the decoded capture, if the pattern has one.
type Found = Option<DbArch>;

impl Pattern {
    pub fn parse(s: &str) -> Result<Pattern, PatternError> {
        if s.is_empty() {
            return Err(PatternError::Empty);
        }
        if s.starts_with('/') {
            return Err(PatternError::Absolute);
        }
        if s.len() > MAX_PATTERN {
            return Err(PatternError::TooLong);
        }
        let mut comps = Vec::new();
        let mut capture = None;
        for c in s.split('/') {
            if c.is_empty() {
                return Err(PatternError::EmptyComponent);
            }
            if c == "**" {
                comps.push(Comp::Any);
                continue;
            }
            if c.contains("**") {
                return Err(PatternError::DoubleStarInName);
            }
            let toks = parse_segment(c)?;
            for t in &toks {
                if let Tok::Cap(k) = t {
                    if capture.replace(*k).is_some() {
                        return Err(PatternError::TwoCaptures);
                    }
                }
            }
            comps.push(Comp::Seg(toks));
        }
        let mut needles: Vec<Vec<u8>> = Vec::new();
        for c in &comps {
            if let Comp::Seg(toks) = c {
                needles.extend(toks.iter().filter_map(|t| match t {
                    Tok::Lit(l) => Some(l.clone()),
                    _ => None,
                }));
            }
        }
        if capture.is_some() {
            needles.push(b"gfx".to_vec());
        }
        // Longest first: the rarer text is the likelier early miss.
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        needles.dedup();
        Ok(Pattern { comps, capture, needles })
    }

    pub fn capture(&self) -> Option<Capture> {
        self.capture
    }

    /// Matches the whole path; `Some(capture)` on success.
    pub(super) fn matches(&self, path: &[PathComp<'_>]) -> Option<Found> {
        if !self.may_match(path) {
            return None;
        }
        let hit = MEMO.with(|m| match m.try_borrow_mut() {
            Ok(mut memo) => self.run(path, &mut memo),
            // Not reached (matching does not re-enter itself); a fresh
            // table keeps it correct if it ever does.
            Err(_) => self.run(path, &mut Memo::default()),
        })?;
        Some(hit.and_then(|h| {
            let (PathComp::Name(name), Some(kind)) = (path[h.comp], self.capture) else { return None };
            read(kind, &name[h.at..]).map(|r| r.arch(&name[h.at..]))
        }))
    }

    /// Whether every needle occurs in some component of `path` (a
    /// necessary condition for a match: each literal run and each capture
    /// lies within one component).
    fn may_match(&self, path: &[PathComp<'_>]) -> bool {
        self.needles.iter().all(|n| {
            path.iter().any(|c| match c {
                PathComp::Name(name) => memchr::memmem::find(name, n).is_some(),
                PathComp::Beneath => false,
            })
        })
    }

    fn run(&self, path: &[PathComp<'_>], memo: &mut Memo) -> Option<Option<Hit>> {
        let walk_states = (self.comps.len() + 1) * (path.len() + 1);
        memo.reset(0, walk_states);
        Walk { comps: &self.comps, path, memo, seg_base: walk_states }.walk(0, 0)
    }
}

fn parse_segment(c: &str) -> Result<Vec<Tok>, PatternError> {
    let mut toks = Vec::new();
    let mut lit = Vec::new();
    let mut rest = c;
    while let Some(ch) = rest.chars().next() {
        let special = matches!(ch, '*' | '?' | '{' | '}');
        if special && !lit.is_empty() {
            toks.push(Tok::Lit(std::mem::take(&mut lit)));
        }
        match ch {
            '*' => toks.push(Tok::Star),
            '?' => toks.push(Tok::One),
            '}' => return Err(PatternError::StrayClose),
            '{' => {
                let end = rest.find('}').ok_or(PatternError::Unclosed)?;
                let inner = &rest[1..end];
                toks.push(brace(inner)?);
                rest = &rest[end + 1..];
                continue;
            }
            _ => {
                let mut buf = [0u8; 4];
                lit.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            }
        }
        rest = &rest[ch.len_utf8()..];
    }
    if !lit.is_empty() {
        toks.push(Tok::Lit(lit));
    }
    Ok(toks)
}

fn brace(inner: &str) -> Result<Tok, PatternError> {
    if inner.contains(',') {
        if inner.contains(['*', '?', '{', '/']) {
            return Err(PatternError::BadAlternative(inner.to_string()));
        }
        return Ok(Tok::Alt(inner.split(',').map(|a| a.as_bytes().to_vec()).collect()));
    }
    Ok(match inner {
        "arch" => Tok::Cap(Capture::Arch),
        "arch_cu" => Tok::Cap(Capture::ArchCu),
        "ck_arch" => Tok::Cap(Capture::CkArch),
        "family" => Tok::Cap(Capture::Family),
        "hex64" => Tok::Hex64,
        other => return Err(PatternError::UnknownName(other.to_string())),
    })
}

/// Whether `i` starts a character (a UTF-8 continuation byte does not).
fn boundary(s: &[u8], i: usize) -> bool {
    !matches!(s.get(i), Some(b) if b & 0xC0 == 0x80)
}

// ---------------------------------------------------------------------------
// Matching.
//
// The matcher explores the same alternatives in the same order as a plain
// backtracking matcher (the first success found is the answer, and it
// decides the capture), but it remembers every state that failed: a state is
// a (pattern position, path position) pair, and what happens from a state
// depends on nothing else, so a state that failed once fails again and is
// not explored twice. Pruning only calls that would have failed cannot
// change the first success, so the answer is the backtracking one.
//
// Bound. Within one name of L bytes and a segment of T tokens there are
// (T + 1) × (L + 1) states; each is expanded at most once, and `*` (the only
// token that can try many lengths) is expanded as "the rest here, or `*`
// one character further on", so a run of `*` attempts stops at the first
// state already known to fail. Across components the same holds for `**`
// over a path of D components. The work is therefore at most a constant ×
// (pattern length) × (path length), and `Pattern::parse` refuses patterns
// longer than `MAX_PATTERN`, which keeps the constant fixed. The remembered
// states live in a per-thread bit table that is cleared, not reallocated,
// for each match.
// ---------------------------------------------------------------------------

/// Where a capture was read: path component and byte offset in it. Kept
/// as positions while matching so that failed attempts allocate nothing;
/// the architecture is decoded once, for the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hit {
    comp: usize,
    at: usize,
}

/// Bits of "this state failed"; grows to the largest match seen on the
/// thread and is reused.
#[derive(Default)]
struct Memo {
    bits: Vec<u64>,
}

impl Memo {
    /// Clears `n` bits starting at bit `base` (growing the table if needed).
    fn reset(&mut self, base: usize, n: usize) {
        let (lo, hi) = (base / 64, (base + n).div_ceil(64));
        if self.bits.len() < hi {
            self.bits.resize(hi, 0);
        }
        self.bits[lo..hi].fill(0);
    }

    fn failed(&self, i: usize) -> bool {
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn fail(&mut self, i: usize) {
        self.bits[i / 64] |= 1 << (i % 64);
    }
}

thread_local! {
    static MEMO: std::cell::RefCell<Memo> = std::cell::RefCell::default();
}

#[cfg(test)]
thread_local! {
    /// States expanded and `*`/`**` positions tried on this thread (tests
    /// assert the bound on it).
    static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[inline]
fn step() {
    #[cfg(test)]
    STEPS.with(|s| s.set(s.get() + 1));
}

/// Work done by matches on this thread so far (see the bound above).
#[cfg(test)]
pub(super) fn steps() -> u64 {
    STEPS.with(|s| s.get())
}

struct Walk<'m, 'p, 'a> {
    comps: &'p [Comp],
    path: &'m [PathComp<'a>],
    memo: &'m mut Memo,
    /// Bit index of segment states (after the walk states).
    seg_base: usize,
}

impl Walk<'_, '_, '_> {
    fn state(&self, c: usize, j: usize) -> usize {
        c * (self.path.len() + 1) + j
    }

    /// The pattern from component `c` against the path from `j`.
    fn walk(&mut self, c: usize, j: usize) -> Option<Option<Hit>> {
        step();
        if self.memo.failed(self.state(c, j)) {
            return None;
        }
        let found = match self.comps.get(c) {
            None => (j == self.path.len()).then_some(None),
            Some(Comp::Any) => self.any(c, j),
            Some(Comp::Seg(toks)) => match self.path.get(j) {
                Some(PathComp::Name(name)) => {
                    let here = Segment { toks, s: name, memo: &mut *self.memo, base: self.seg_base }.run(j);
                    match here {
                        Some(here) => self.walk(c + 1, j + 1).map(|later| here.or(later)),
                        None => None,
                    }
                }
                _ => None,
            },
        };
        if found.is_none() {
            self.memo.fail(self.state(c, j));
        }
        found
    }

    /// `**` at `c`: the rest after skipping 0, 1, … components (at least
    /// one when `**` is last), fewest first. State (c, i) for i > j is the
    /// same question one component further on, so the loop stops at the
    /// first such state already known to fail and marks the ones it tried.
    fn any(&mut self, c: usize, j: usize) -> Option<Option<Hit>> {
        let min = usize::from(c + 1 == self.comps.len());
        let mut i = j;
        let mut found = None;
        while i + min <= self.path.len() {
            step();
            if i > j && self.memo.failed(self.state(c, i)) {
                break;
            }
            found = self.walk(c + 1, i + min);
            if found.is_some() {
                break;
            }
            i += 1;
        }
        if found.is_none() {
            for k in j + 1..i.min(self.path.len() + 1) {
                self.memo.fail(self.state(c, k));
            }
        }
        found
    }
}

/// One component matched against one name; `base` is where its failure
/// bits start in the memo.
struct Segment<'m, 'p, 's> {
    toks: &'p [Tok],
    s: &'s [u8],
    memo: &'m mut Memo,
    base: usize,
}

impl Segment<'_, '_, '_> {
    fn run(mut self, comp: usize) -> Option<Option<Hit>> {
        self.memo.reset(self.base, (self.toks.len() + 1) * (self.s.len() + 1));
        self.eval(0, 0).map(|at| at.map(|at| Hit { comp, at }))
    }

    fn state(&self, k: usize, i: usize) -> usize {
        self.base + k * (self.s.len() + 1) + i
    }

    /// Tokens from `k` against the name from byte `i`: `Some(capture offset)`.
    fn eval(&mut self, k: usize, i: usize) -> Option<Option<usize>> {
        step();
        if self.memo.failed(self.state(k, i)) {
            return None;
        }
        let s = self.s;
        let rest = &s[i..];
        let found = match self.toks.get(k) {
            None => rest.is_empty().then_some(None),
            Some(Tok::Lit(l)) => rest.starts_with(l).then(|| self.eval(k + 1, i + l.len())).flatten(),
            Some(Tok::One) => (1..=rest.len()).find(|&w| boundary(rest, w)).and_then(|w| self.eval(k + 1, i + w)),
            Some(Tok::Star) => self.star(k, i),
            Some(Tok::Alt(opts)) => opts.iter().filter(|o| rest.starts_with(o)).find_map(|o| self.eval(k + 1, i + o.len())),
            Some(Tok::Hex64) => match rest.get(..64) {
                Some(d) if d.iter().all(u8::is_ascii_hexdigit) => self.eval(k + 1, i + 64),
                _ => None,
            },
            Some(Tok::Cap(kind)) => read(*kind, rest).and_then(|r| self.eval(k + 1, i + r.len)).map(|_| Some(i)),
        };
        if found.is_none() {
            self.memo.fail(self.state(k, i));
        }
        found
    }

    /// `*` at `k`: the rest of the tokens after 0, 1, … characters,
    /// shortest first, stopping at a position where `*` already failed.
    fn star(&mut self, k: usize, i: usize) -> Option<Option<usize>> {
        let s = self.s;
        let mut p = i;
        let mut found = None;
        while p <= s.len() {
            step();
            if boundary(s, p) {
                if p > i && self.memo.failed(self.state(k, p)) {
                    break;
                }
                found = self.eval(k + 1, p);
                if found.is_some() {
                    break;
                }
            }
            p += 1;
        }
        if found.is_none() {
            for q in i + 1..p.min(s.len() + 1) {
                self.memo.fail(self.state(k, q));
            }
        }
        found
    }
}

#[cfg(test)]
#[path = "match_tests.rs"]
mod match_tests;
