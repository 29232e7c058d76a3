//! Path patterns of database rules: a small glob over root-relative paths
//! with one capture that reads the architecture.
//!
//! A hand-written matcher rather than a regex: the language is tiny, the
//! captures need decoding that a regex cannot express (CK tokens, `gfx11xx`
//! families, MIOpen's CU counts), and it works on bytes, so no path can make
//! it slice inside a character or panic.
//!
//! Matching backtracks; its cost grows with the number of `*` in one
//! component and of `**` in one pattern (each multiplies the work by the
//! name length or the path depth). The built-in patterns use at most two of
//! each, which keeps even a hostile deep path cheap.

use thiserror::Error;

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
}

/// What a capture reads at its position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// `{arch}`: `gfx` digits letters, then optional `-strict` and Tensile's
    /// `-xnack±` (`gfx90a-xnack-`, `gfx1250-strict`).
    Arch,
    /// `{arch_cu}`: a known processor that may run straight into a CU count
    /// (MIOpen's `gfx90878.db.txt` is gfx908 with 78 CUs); other names as `{arch}`.
    ArchCu,
    /// `{ck_arch}`: a composable_kernel library token: the target with
    /// `:` and `-` written `_` and `+` written `p` (`gfx90a_xnackp`, `gfx1250_strict`).
    CkArch,
    /// `{family}`: AOTriton image directories: `gfx11xx`/`gfx120x` name a family
    /// by prefix (`gfx11`, `gfx120`); anything else is read as `{arch}`.
    Family,
}

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
        Ok(Pattern { comps, capture })
    }

    pub fn capture(&self) -> Option<Capture> {
        self.capture
    }

    /// Matches the whole path; `Some(capture)` on success.
    pub(super) fn matches(&self, path: &[PathComp<'_>]) -> Option<Found> {
        walk(&self.comps, path)
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

fn walk(pat: &[Comp], path: &[PathComp<'_>]) -> Option<Found> {
    match pat.split_first() {
        None => path.is_empty().then_some(None),
        Some((Comp::Any, rest)) => {
            let min = usize::from(rest.is_empty());
            (min..=path.len()).find_map(|k| walk(rest, &path[k..]))
        }
        Some((Comp::Seg(toks), rest)) => {
            let (PathComp::Name(name), tail) = path.split_first().map(|(c, t)| (*c, t))? else { return None };
            let here = segment(toks, name)?;
            let later = walk(rest, tail)?;
            Some(here.or(later))
        }
    }
}

/// Whether `i` starts a character (a UTF-8 continuation byte does not).
fn boundary(s: &[u8], i: usize) -> bool {
    !matches!(s.get(i), Some(b) if b & 0xC0 == 0x80)
}

fn segment(toks: &[Tok], s: &[u8]) -> Option<Found> {
    let Some((tok, rest)) = toks.split_first() else {
        return s.is_empty().then_some(None);
    };
    match tok {
        Tok::Lit(l) => segment(rest, s.strip_prefix(l.as_slice())?),
        Tok::One => {
            let w = (1..=s.len()).find(|&i| boundary(s, i))?;
            segment(rest, &s[w..])
        }
        Tok::Star => (0..=s.len()).filter(|&i| boundary(s, i)).find_map(|i| segment(rest, &s[i..])),
        Tok::Alt(opts) => opts.iter().find_map(|o| segment(rest, s.strip_prefix(o.as_slice())?)),
        Tok::Hex64 => {
            let digits = s.get(..64).filter(|d| d.iter().all(u8::is_ascii_hexdigit))?;
            segment(rest, &s[digits.len()..])
        }
        Tok::Cap(kind) => {
            let (n, arch) = read(*kind, s)?;
            segment(rest, &s[n..])?;
            Some(Some(arch))
        }
    }
}

/// Reads a capture at the start of `s`: bytes consumed and the architecture.
/// Each capture reads one way only (the longest form), so a pattern has one
/// reading of a name.
pub fn read(kind: Capture, s: &[u8]) -> Option<(usize, DbArch)> {
    match kind {
        Capture::Arch => read_arch(s),
        Capture::ArchCu => read_known(s).or_else(|| read_arch(s)),
        Capture::CkArch => read_ck(s),
        Capture::Family => read_family(s).or_else(|| read_arch(s)),
    }
}

/// MIOpen's fixed list (upstream's handler): names where the arch runs
/// into a CU count are only readable against known processors. Longer
/// names first, so `gfx1250-strict` is not read as `gfx1250`.
const KNOWN: &[&str] = &[
    "gfx1250-strict",
    "gfx1250",
    "gfx1201",
    "gfx1200",
    "gfx1151",
    "gfx1150",
    "gfx1102",
    "gfx1101",
    "gfx1100",
    "gfx1030",
    "gfx1010",
    "gfx950",
    "gfx942",
    "gfx941",
    "gfx940",
    "gfx90a",
    "gfx908",
    "gfx906",
    "gfx900",
];

fn processor(s: &[u8], n: usize) -> String {
    String::from_utf8_lossy(&s[..n]).into_owned()
}

fn bare(processor: String) -> DbArch {
    DbArch::Processor { processor, xnack: None }
}

/// `gfx` followed by at least one digit; returns the end of the digits.
fn gfx_digits(s: &[u8]) -> Option<usize> {
    let rest = s.strip_prefix(b"gfx")?;
    let d = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    (d > 0).then_some(3 + d)
}

fn read_arch(s: &[u8]) -> Option<(usize, DbArch)> {
    let mut j = gfx_digits(s)?;
    j += s[j..].iter().take_while(|b| b.is_ascii_lowercase()).count();
    if s[j..].starts_with(b"-strict") {
        j += "-strict".len();
    }
    let p = processor(s, j);
    let xnack = match s.get(j..j + 7) {
        Some(b"-xnack+") => Some(true),
        Some(b"-xnack-") => Some(false),
        _ => None,
    };
    let n = if xnack.is_some() { j + 7 } else { j };
    Some((n, DbArch::Processor { processor: p, xnack }))
}

fn read_known(s: &[u8]) -> Option<(usize, DbArch)> {
    KNOWN.iter().find_map(|k| {
        let after = s.strip_prefix(k.as_bytes())?;
        (!after.first().is_some_and(u8::is_ascii_lowercase)).then(|| (k.len(), bare(k.to_string())))
    })
}

fn read_ck(s: &[u8]) -> Option<(usize, DbArch)> {
    let mut j = gfx_digits(s)?;
    j += s[j..].iter().take_while(|b| b.is_ascii_lowercase()).count();
    let mut p = processor(s, j);
    if s[j..].starts_with(b"_strict") {
        j += "_strict".len();
        p.push_str("-strict");
    }
    let mut xnack = None;
    loop {
        let rest = &s[j..];
        let (name_len, is_xnack) = if rest.starts_with(b"_xnack") {
            (6, true)
        } else if rest.starts_with(b"_sramecc") {
            (8, false)
        } else {
            break;
        };
        // `+` is written `p`, `-` is written `_`. sramecc is read and
        // dropped: database files are told apart by xnack only.
        let on = match rest.get(name_len) {
            Some(b'p') => true,
            Some(b'_') => false,
            _ => break,
        };
        if is_xnack {
            xnack = Some(on);
        }
        j += name_len + 1;
    }
    Some((j, DbArch::Processor { processor: p, xnack }))
}

fn read_family(s: &[u8]) -> Option<(usize, DbArch)> {
    let d = gfx_digits(s)?;
    let x = s[d..].iter().take_while(|&&b| b == b'x').count();
    let ends = !s.get(d + x).is_some_and(|b| b.is_ascii_alphanumeric());
    ((1..=2).contains(&x) && ends).then(|| (d + x, DbArch::Family(processor(s, d))))
}
