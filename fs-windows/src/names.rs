//! Windows names and paths: splitting the `\`-separated path Dokan hands
//! over into components, stream syntax, which view names Windows can show,
//! and case folding.

use crate::ntstatus::*;

/// NTFS's limit on one component, in UTF-16 units.
pub const MAX_COMPONENT: usize = 255;

/// The stream a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stream {
    /// The file itself (also `name::$DATA`).
    Default,
    /// An alternate data stream (`name:stream[:type]`): the view has none.
    Alternate(String),
}

/// A path as Dokan gives it (`\`, `\lib\libfoo.dll`), split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WinPath {
    /// Components from the root; empty for the root itself.
    pub components: Vec<String>,
    pub stream: Stream,
}

/// Characters NTFS / Win32 do not allow in a name (besides controls).
fn forbidden(c: char) -> bool {
    matches!(c, '\\' | '/' | ':' | '*' | '?' | '"' | '<' | '>' | '|') || (c as u32) < 0x20
}

fn check_component(c: &str) -> Result<(), NtStatus> {
    if c == "." || c == ".." || c.chars().any(forbidden) || c.encode_utf16().count() > MAX_COMPONENT {
        return Err(STATUS_OBJECT_NAME_INVALID);
    }
    Ok(())
}

/// Splits a Dokan path on `\`. Empty components (leading, trailing or
/// doubled separators) are skipped; `.`/`..`, wildcards and other
/// characters Windows forbids make the name invalid. A `:` may only appear
/// in the last component, as stream syntax: `name::$DATA` is the file
/// itself, any other stream is reported as [`Stream::Alternate`] (the
/// caller answers "not found": the view has no alternate streams).
pub fn parse(path: &str) -> Result<WinPath, NtStatus> {
    let parts: Vec<&str> = path.split('\\').filter(|c| !c.is_empty()).collect();
    let mut components = Vec::with_capacity(parts.len());
    let mut stream = Stream::Default;
    for (i, part) in parts.iter().enumerate() {
        let mut name = *part;
        if let Some((base, rest)) = part.split_once(':') {
            if i + 1 != parts.len() || base.is_empty() || rest.is_empty() {
                return Err(STATUS_OBJECT_NAME_INVALID);
            }
            // `rest` is `stream[:type]`; the default stream is `:$DATA`
            // (empty stream name, type $DATA).
            let (sname, stype) = rest.split_once(':').unwrap_or((rest, ""));
            if !stype.is_empty() && !stype.eq_ignore_ascii_case("$DATA") {
                return Err(STATUS_OBJECT_NAME_INVALID);
            }
            if sname.is_empty() && stype.is_empty() {
                return Err(STATUS_OBJECT_NAME_INVALID);
            }
            if !sname.is_empty() {
                if sname.chars().any(|c| matches!(c, '\\' | '/' | ':') || (c as u32) < 0x20) {
                    return Err(STATUS_OBJECT_NAME_INVALID);
                }
                stream = Stream::Alternate(sname.to_string());
            }
            name = base;
        }
        check_component(name)?;
        components.push(name.to_string());
    }
    Ok(WinPath { components, stream })
}

/// Whether a view entry name can be shown to (and opened by) Windows:
/// valid UTF-8, no character Windows forbids (feature-qualified archive
/// names such as `libfoo.so_gfx90a:xnack-.kpack` contain `:`; serve with
/// archive names by processor on Windows), at most 255 UTF-16 units.
/// Other entries are left out of listings.
pub fn windows_visible(name: &std::ffi::OsStr) -> Option<&str> {
    let s = name.to_str()?;
    check_component(s).ok().filter(|_| !s.is_empty()).map(|_| s)
}

/// Case folding for case-insensitive lookups (Unicode lower case; NTFS
/// uses a per-character upcase table, which agrees for every name a ROCm
/// install contains).
pub fn fold(s: &str) -> String {
    if s.is_ascii() {
        s.to_ascii_lowercase()
    } else {
        s.to_lowercase()
    }
}

/// Whether a `FindFirstFile` pattern has wildcards (`*`, `?`, and the
/// DOS wildcards `<`, `>`, `"` the kernel substitutes).
pub fn has_wildcards(pattern: &str) -> bool {
    pattern.contains(['*', '?', '<', '>', '"'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comps(p: &str) -> Vec<String> {
        parse(p).unwrap().components
    }

    #[test]
    fn splits_on_backslash() {
        assert_eq!(comps("\\"), Vec::<String>::new());
        assert_eq!(comps(""), Vec::<String>::new());
        assert_eq!(comps("\\lib"), ["lib"]);
        assert_eq!(comps("\\lib\\libfoo.so.1"), ["lib", "libfoo.so.1"]);
        assert_eq!(comps("\\lib\\.kpack\\libfoo.so_gfx90a.kpack"), ["lib", ".kpack", "libfoo.so_gfx90a.kpack"]);
        assert_eq!(comps("\\lib\\\\x\\"), ["lib", "x"]);
        assert_eq!(comps("\\names with spaces\\ü.txt"), ["names with spaces", "ü.txt"]);
        assert_eq!(parse("\\a\\b").unwrap().stream, Stream::Default);
    }

    #[test]
    fn rejects_dots_wildcards_and_slashes() {
        for p in ["\\.", "\\..", "\\lib\\..\\x", "\\a\\.\\b", "\\a*b", "\\a?", "\\a/b", "\\a<b", "\\a>b", "\\a\"b", "\\a|b", "\\a\u{1}b"] {
            assert_eq!(parse(p), Err(STATUS_OBJECT_NAME_INVALID), "{p:?}");
        }
        let long = format!("\\{}", "x".repeat(256));
        assert_eq!(parse(&long), Err(STATUS_OBJECT_NAME_INVALID));
        assert!(parse(&format!("\\{}", "x".repeat(255))).is_ok());
        // 255 UTF-16 units, not bytes.
        assert!(parse(&format!("\\{}", "ü".repeat(255))).is_ok());
    }

    #[test]
    fn streams() {
        let d = parse("\\lib\\a.dll::$DATA").unwrap();
        assert_eq!((d.components, d.stream), (vec!["lib".to_string(), "a.dll".to_string()], Stream::Default));
        assert_eq!(parse("\\a.dll::$data").unwrap().stream, Stream::Default);
        assert_eq!(parse("\\a.dll:zone.identifier").unwrap().stream, Stream::Alternate("zone.identifier".into()));
        assert_eq!(parse("\\a.dll:s:$DATA").unwrap().stream, Stream::Alternate("s".into()));
        assert_eq!(parse("\\a.dll:s").unwrap().components, ["a.dll"]);
        for p in ["\\a:b\\c", "\\a:", "\\:s", "\\a::", "\\a::$INDEX_ALLOCATION", "\\a:s:$BITMAP", "\\a:s:x:y"] {
            assert_eq!(parse(p), Err(STATUS_OBJECT_NAME_INVALID), "{p:?}");
        }
    }

    #[test]
    fn visible_names() {
        use std::ffi::OsStr;
        assert_eq!(windows_visible(OsStr::new("libfoo.so_gfx90a.kpack")), Some("libfoo.so_gfx90a.kpack"));
        assert_eq!(windows_visible(OsStr::new(".kpack")), Some(".kpack"));
        assert_eq!(windows_visible(OsStr::new("libfoo.so_gfx90a:xnack-.kpack")), None);
        assert_eq!(windows_visible(OsStr::new("a*b")), None);
        assert_eq!(windows_visible(OsStr::new("a\\b")), None);
        assert_eq!(windows_visible(OsStr::new("")), None);
        assert_eq!(windows_visible(OsStr::new(&"y".repeat(256))), None);
    }

    #[test]
    fn folding_and_patterns() {
        assert_eq!(fold("LibFoo.DLL"), "libfoo.dll");
        assert_eq!(fold("ÜBER"), "über");
        assert!(has_wildcards("*"));
        assert!(has_wildcards("lib?.dll"));
        assert!(has_wildcards("<.dll"));
        assert!(!has_wildcards("libfoo.dll"));
    }
}
