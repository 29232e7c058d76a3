//! The captures of database-rule patterns (`{arch}`, `{arch_cu}`,
//! `{ck_arch}`, `{family}`): what each reads at its position in a path
//! component, and the architecture it names. The matcher (`pattern.rs`)
//! decides where a capture stands; this reads it there.

use super::DbArch;

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

/// What a capture read: its length and how to name the architecture,
/// as positions in the name (nothing allocated until `arch`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Reading {
    pub(super) len: usize,
    name: Name,
    xnack: Option<bool>,
}

#[derive(Clone, Copy, Debug)]
enum Name {
    /// The first n bytes are the processor.
    Span(usize),
    /// The first n bytes, then `-strict` (composable_kernel's `_strict`).
    StrictSpan(usize),
    /// A processor of the fixed list.
    Known(&'static str),
    /// The first n bytes name a family by prefix.
    Family(usize),
}

impl Reading {
    /// The architecture, from the name the reading was made on.
    pub(super) fn arch(self, s: &[u8]) -> DbArch {
        let text = |n: usize| String::from_utf8_lossy(&s[..n]).into_owned();
        let processor = match self.name {
            Name::Span(n) => text(n),
            Name::StrictSpan(n) => text(n) + "-strict",
            Name::Known(k) => k.to_string(),
            Name::Family(n) => return DbArch::Family(text(n)),
        };
        DbArch::Processor { processor, xnack: self.xnack }
    }
}

/// Reads a capture at the start of `s`. Each capture reads one way only
/// (the longest form), so a pattern has one reading of a name.
pub(super) fn read(kind: Capture, s: &[u8]) -> Option<Reading> {
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

/// `gfx` followed by at least one digit; returns the end of the digits.
fn gfx_digits(s: &[u8]) -> Option<usize> {
    let rest = s.strip_prefix(b"gfx")?;
    let d = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    (d > 0).then_some(3 + d)
}

fn read_arch(s: &[u8]) -> Option<Reading> {
    let mut j = gfx_digits(s)?;
    j += s[j..].iter().take_while(|b| b.is_ascii_lowercase()).count();
    if s[j..].starts_with(b"-strict") {
        j += "-strict".len();
    }
    let xnack = match s.get(j..j + 7) {
        Some(b"-xnack+") => Some(true),
        Some(b"-xnack-") => Some(false),
        _ => None,
    };
    let len = if xnack.is_some() { j + 7 } else { j };
    Some(Reading { len, name: Name::Span(j), xnack })
}

fn read_known(s: &[u8]) -> Option<Reading> {
    KNOWN.iter().find_map(|k| {
        let after = s.strip_prefix(k.as_bytes())?;
        (!after.first().is_some_and(u8::is_ascii_lowercase)).then_some(Reading { len: k.len(), name: Name::Known(k), xnack: None })
    })
}

fn read_ck(s: &[u8]) -> Option<Reading> {
    let mut j = gfx_digits(s)?;
    j += s[j..].iter().take_while(|b| b.is_ascii_lowercase()).count();
    let mut name = Name::Span(j);
    if s[j..].starts_with(b"_strict") {
        name = Name::StrictSpan(j);
        j += "_strict".len();
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
    Some(Reading { len: j, name, xnack })
}

fn read_family(s: &[u8]) -> Option<Reading> {
    let d = gfx_digits(s)?;
    let x = s[d..].iter().take_while(|&&b| b == b'x').count();
    let ends = !s.get(d + x).is_some_and(|b| b.is_ascii_alphanumeric());
    ((1..=2).contains(&x) && ends).then_some(Reading { len: d + x, name: Name::Family(d), xnack: None })
}
