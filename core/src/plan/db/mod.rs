//! Architecture-specific database files (FORMATS.md §7, newest rules from
//! UPSTREAM-NEWEST.md §7): Tensile libraries, MIOpen databases and CK
//! libraries, composable_kernel static libraries, hipKernelProvider
//! engines, rocJITsu translations, AOTriton kernel images. The view hides
//! those of unselected targets; files whose paths carry no architecture are
//! generic and always shown.
//!
//! The rules are data, not code: one table (`builtin.rules`, embedded) in
//! the same syntax operators use for their own rules (`--db-rule`,
//! `--db-rules FILE`), so a new layout in a ROCm release needs a line in a
//! file rather than a rebuild, and one parser and matcher serve both.
//!
//! Rule syntax, one per line (`#` starts a comment):
//!
//! ```text
//! PATTERN                 # a capture in PATTERN reads the architecture
//! PATTERN -> TARGET       # every matching file belongs to TARGET (gfx1151, gfx90a:xnack-)
//! PATTERN -> generic      # matching files are generic: shown everywhere, later rules skipped
//! ```
//!
//! The pattern language is described in `pattern.rs` and the README.

mod capture;
mod pattern;

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use thiserror::Error;

use crate::formats::target::{Selection, TargetError, TargetId};
pub use pattern::{Capture, PatternError};
use pattern::{PathComp, Pattern};

/// The built-in rule table.
pub const BUILTIN_RULES: &str = include_str!("builtin.rules");

/// The architecture a database file belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbArch {
    /// One processor, optionally with Tensile's `-xnack±` qualifier.
    Processor { processor: String, xnack: Option<bool> },
    /// A family named by a prefix (`aotriton.images/amd-gfx11xx` → `gfx11`).
    Family(String),
}

impl DbArch {
    pub fn selected_by(&self, sel: &Selection) -> bool {
        match self {
            DbArch::Processor { processor, xnack } => sel.selects_db(processor, *xnack),
            DbArch::Family(prefix) => sel.targets.iter().any(|t| t.processor.starts_with(prefix.as_str())),
        }
    }
}

/// `gfx90a`, `gfx90a:xnack-`, or `gfx11*` for a family (the `archs` key).
impl fmt::Display for DbArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbArch::Processor { processor, xnack: None } => f.write_str(processor),
            DbArch::Processor { processor, xnack: Some(x) } => write!(f, "{processor}:xnack{}", if *x { '+' } else { '-' }),
            DbArch::Family(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// What is wrong with one rule.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RuleErrorKind {
    #[error(transparent)]
    Pattern(#[from] PatternError),
    #[error("nothing names the architecture: put a capture such as {{arch}} in the pattern, or end the rule with '-> TARGET' or '-> generic'")]
    NoArchitecture,
    #[error("the pattern captures the architecture and '->' names one too: keep one of them")]
    CaptureAndTarget,
    #[error("'->' needs a target (e.g. gfx1151) or 'generic' after it")]
    MissingTarget,
    #[error("after '->': {0}")]
    BadTarget(TargetError),
    #[error("unexpected {0:?} (a rule is PATTERN [-> TARGET|generic]; patterns hold no spaces, use ? for one)")]
    Unexpected(String),
}

/// A rule that cannot be used, or a rules file that cannot be read.
#[derive(Debug, Error)]
pub enum RuleError {
    /// `at` is `FILE:LINE` or `--db-rule`.
    #[error("{at}: {kind} (rule {text:?})")]
    Bad { at: String, text: String, kind: RuleErrorKind },
    #[error("database rules file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
}

/// What a matching rule concludes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Then {
    /// The pattern's capture.
    Capture,
    Fixed(DbArch),
    Generic,
}

#[derive(Clone)]
struct Rule {
    pattern: Pattern,
    then: Then,
    /// Where it came from (`FILE:LINE`), for diagnostics.
    at: String,
    text: String,
}

/// An ordered rule set: the first matching rule decides.
#[derive(Clone)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.rules.iter().map(|r| format!("{}: {}", r.at, r.text))).finish()
    }
}

/// The built-in rules.
impl Default for Rules {
    fn default() -> Self {
        Rules::builtin().clone()
    }
}

/// Cuts a trailing comment: `#` at the start or after whitespace (a `#`
/// inside a name is part of it).
fn strip_comment(line: &str) -> &str {
    let b = line.as_bytes();
    let cut = (0..b.len()).find(|&i| b[i] == b'#' && (i == 0 || b[i - 1].is_ascii_whitespace()));
    cut.map_or(line, |i| &line[..i]).trim()
}

/// Parses one rule (comment already stripped, not empty).
fn parse_rule(text: &str, at: String) -> Result<Rule, RuleError> {
    let bad = |kind| RuleError::Bad { at: at.clone(), text: text.to_string(), kind };
    let mut words = text.split_whitespace();
    let pattern = Pattern::parse(words.next().unwrap_or_default()).map_err(|e| bad(e.into()))?;
    let then = match words.next() {
        None if pattern.capture().is_some() => Then::Capture,
        None => return Err(bad(RuleErrorKind::NoArchitecture)),
        Some("->") if pattern.capture().is_some() => return Err(bad(RuleErrorKind::CaptureAndTarget)),
        Some("->") => match words.next() {
            None => return Err(bad(RuleErrorKind::MissingTarget)),
            Some("generic") => Then::Generic,
            Some(t) => {
                let id = TargetId::parse(t).map_err(|e| bad(RuleErrorKind::BadTarget(e)))?;
                let xnack = id.feature("xnack");
                Then::Fixed(DbArch::Processor { processor: id.processor, xnack })
            }
        },
        Some(w) => return Err(bad(RuleErrorKind::Unexpected(w.to_string()))),
    };
    if let Some(w) = words.next() {
        return Err(bad(RuleErrorKind::Unexpected(w.to_string())));
    }
    Ok(Rule { pattern, then, at, text: text.to_string() })
}

impl Rules {
    /// The built-in table (parsed once).
    pub fn builtin() -> &'static Rules {
        static BUILTIN: OnceLock<Rules> = OnceLock::new();
        // The table is part of the program and parsed by a unit test, so a
        // failure here is a build defect, not bad input.
        BUILTIN.get_or_init(|| Rules::parse(BUILTIN_RULES, "built-in").expect("built-in database rules parse"))
    }

    /// Parses a rules text; `origin` names it in errors (`origin:LINE`).
    pub fn parse(text: &str, origin: &str) -> Result<Rules, RuleError> {
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = strip_comment(line);
            if !line.is_empty() {
                rules.push(parse_rule(line, format!("{origin}:{}", i + 1))?);
            }
        }
        Ok(Rules { rules })
    }

    /// One rule given on the command line.
    pub fn parse_arg(rule: &str) -> Result<Rules, RuleError> {
        let text = strip_comment(rule);
        if text.is_empty() {
            let kind = RuleErrorKind::Pattern(PatternError::Empty);
            return Err(RuleError::Bad { at: "--db-rule".into(), text: rule.to_string(), kind });
        }
        Ok(Rules { rules: vec![parse_rule(text, "--db-rule".into())?] })
    }

    /// Reads a rules file.
    pub fn read(path: &Path) -> Result<Rules, RuleError> {
        let text = std::fs::read_to_string(path).map_err(|source| RuleError::Read { path: path.to_path_buf(), source })?;
        Rules::parse(&text, &path.display().to_string())
    }

    /// The operator's rules (`inline` ones first, then each file in
    /// order) in front of the built-in ones.
    pub fn with_operator_rules(inline: &[String], files: &[PathBuf]) -> Result<Rules, RuleError> {
        let mut rules = Vec::new();
        for r in inline {
            rules.extend(Rules::parse_arg(r)?.rules);
        }
        for f in files {
            let more = Rules::read(f)?;
            log::info!("{} database rule(s) from {}", more.len(), f.display());
            rules.extend(more.rules);
        }
        rules.extend(Rules::builtin().rules.iter().cloned());
        Ok(Rules { rules })
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The architecture of the file at `rel` (root-relative); `None` for a
    /// generic file. Names that are not UTF-8 are never classified.
    pub fn classify(&self, rel: &Path) -> Option<DbArch> {
        self.decide(rel, false)
    }

    /// The architecture every entry beneath directory `rel` belongs to (a
    /// per-architecture directory such as `library/gfx942/`), if any.
    pub fn classify_dir(&self, rel: &Path) -> Option<DbArch> {
        self.decide(rel, true)
    }

    fn decide(&self, rel: &Path, dir: bool) -> Option<DbArch> {
        // Components on the stack for ordinary depths: classification runs
        // for every listed entry and should not allocate.
        const INLINE: usize = 32;
        let mut inline = [PathComp::Beneath; INLINE];
        let mut deep = Vec::new();
        let mut n = 0;
        let comps = rel.components().filter(|c| *c != Component::CurDir).map(Some).chain(dir.then_some(None));
        for c in comps {
            let comp = match c {
                Some(Component::Normal(name)) => PathComp::Name(name.to_str()?.as_bytes()),
                Some(_) => return None,
                None => PathComp::Beneath,
            };
            if n < INLINE {
                inline[n] = comp;
            } else {
                if deep.is_empty() {
                    deep.extend_from_slice(&inline);
                }
                deep.push(comp);
            }
            n += 1;
        }
        let path = if n <= INLINE { &inline[..n] } else { &deep[..] };
        for r in &self.rules {
            let Some(found) = r.pattern.matches(path) else { continue };
            let found = found.map(|a| widen_family(r.pattern.capture(), a));
            if let Some(a) = found.as_ref().filter(|a| !plausible(a)) {
                log::debug!("{}: rule {} reads {a}, which names no processor; rule skipped", rel.display(), r.at);
                continue;
            }
            log::trace!("{}: rule {} ({})", rel.display(), r.at, r.text);
            return match &r.then {
                Then::Capture => found,
                Then::Fixed(a) => Some(a.clone()),
                Then::Generic => None,
            };
        }
        None
    }
}

/// Whether a captured architecture can name a processor: no AMDGPU
/// processor has more than 4 digits. A longer run is an unknown processor
/// run into a count (MIOpen's `gfx103612.db.txt`: gfx1036, 12 CUs); read as
/// a target it would be one no selection names, hiding the file from every
/// view, the GPU it is for included. Such a rule does not apply (upstream's
/// MIOpen handler leaves names outside its list generic, too).
fn plausible(a: &DbArch) -> bool {
    let name = match a {
        DbArch::Processor { processor, .. } => processor,
        DbArch::Family(prefix) => prefix,
    };
    let digits = name.strip_prefix("gfx").map_or(0, |r| r.bytes().take_while(u8::is_ascii_digit).count());
    digits <= 4
}

/// A `{family}` capture that reads one processor without an xnack setting
/// (`aotriton.images/amd-gfx1250`) means that processor and every identity
/// named from it: AOTriton matches its image directories by a pattern that
/// also accepts a longer identity, so a gfx1250-strict device loads the
/// `amd-gfx1250` image. As a prefix family it stays visible in a
/// gfx1250-strict view and `split` routes it to each such artifact. A
/// strict-only image (`amd-gfx1250-strict`) names only the strict identity.
fn widen_family(kind: Option<Capture>, a: DbArch) -> DbArch {
    match a {
        DbArch::Processor { processor, xnack: None } if kind == Some(Capture::Family) => DbArch::Family(processor),
        other => other,
    }
}

#[cfg(test)]
mod tests;
