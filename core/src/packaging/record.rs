//! A wheel's `RECORD` (the installed-files list of PEP 376/427: CSV rows
//! `path,algorithm=urlsafe-b64-digest,size`): read and checked against the
//! unpacked entries before `split-wheel` trusts them, and the quoting used
//! when writing one.
//!
//! A wheel whose bytes do not match its RECORD was changed after it was
//! built (or damaged in transit); splitting it would give the change a
//! fresh, valid RECORD in every output wheel. So every entry must be
//! listed with a hash of at least SHA-256 strength that matches, sizes
//! must match, and nothing may be listed that the wheel lacks.

use std::collections::BTreeSet;
use std::path::Path;

use sha2::Digest;

use super::manifest::digest_file;

/// Splits one CSV row (RFC 4180 quoting: `"a,b"`, `""` for a quote).
pub(crate) fn csv_row(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => out.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    out.push(field);
    out
}

/// A field as CSV writes it: quoted when it holds `,`, `"` or a line break.
pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The URL-safe, unpadded base64 digest of `path` with `algo`, or `None`
/// for an algorithm weaker than SHA-256 or unknown.
fn digest(path: &Path, algo: &str) -> Option<std::io::Result<String>> {
    fn run<D: Digest>(path: &Path) -> std::io::Result<String> {
        digest_file::<D>(path).map(|d| b64url(&d))
    }
    Some(match algo {
        "sha256" => run::<sha2::Sha256>(path),
        "sha384" => run::<sha2::Sha384>(path),
        "sha512" => run::<sha2::Sha512>(path),
        _ => return None,
    })
}

/// Checks the unpacked wheel at `dir` (its file entries `names`) against
/// `record` (the RECORD's entry name). The error names the entry.
pub(crate) fn check(dir: &Path, names: &[String], record: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(dir.join(record)).map_err(|e| format!("{record}: {e} (a wheel must have a RECORD)"))?;
    let signatures = [format!("{record}.jws"), format!("{record}.p7s")];
    let present: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let mut listed = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let row = csv_row(line);
        let [path, hash, size] = &row[..] else {
            return Err(format!("{record}: line {line:?} is not path,hash,size"));
        };
        if !listed.insert(path.clone()) {
            return Err(format!("{record}: {path} is listed twice"));
        }
        if path == record || signatures.contains(path) {
            continue;
        }
        if !present.contains(path.as_str()) {
            return Err(format!("{path}: listed in RECORD but not in the wheel"));
        }
        let Some((algo, want)) = hash.split_once('=') else {
            return Err(format!("{path}: RECORD has no hash for it"));
        };
        let p = dir.join(path);
        let got = digest(&p, algo).ok_or_else(|| format!("{path}: RECORD hash algorithm {algo:?} (need sha256 or stronger)"))?;
        let got = got.map_err(|e| format!("{path}: {e}"))?;
        if got != want.trim_end_matches('=') {
            return Err(format!(
                "{path}: does not match its RECORD hash ({algo}={want}, the entry has {algo}={got}): the wheel was changed after it was built"
            ));
        }
        if !size.is_empty() {
            let len = std::fs::metadata(&p).map_err(|e| format!("{path}: {e}"))?.len();
            if size.parse::<u64>().ok() != Some(len) {
                return Err(format!("{path}: RECORD says {size} bytes, the entry has {len}"));
            }
        }
    }
    if let Some(n) = names.iter().find(|n| !listed.contains(*n) && !signatures.contains(n) && n.as_str() != record) {
        return Err(format!("{n}: in the wheel but not in its RECORD"));
    }
    Ok(())
}

/// URL-safe base64 without padding (the RECORD hash encoding).
pub(crate) fn b64url(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quoting_round_trips() {
        assert_eq!(csv_row("a,sha256=x,1"), ["a", "sha256=x", "1"]);
        assert_eq!(csv_row(r#""a,b",,"#), ["a,b", "", ""]);
        assert_eq!(csv_row(r#""say ""hi""",h,2"#), [r#"say "hi""#, "h", "2"]);
        for s in ["plain", "a,b", r#"q"uote"#] {
            assert_eq!(csv_row(&format!("{},x", csv_field(s))), [s, "x"]);
        }
    }

    #[test]
    fn record_checks() {
        let d = std::env::temp_dir().join(format!("kpackfs-record-test.{}", std::process::id()));
        std::fs::create_dir_all(d.join("p-1.dist-info")).unwrap();
        std::fs::write(d.join("a.py"), b"foob").unwrap();
        let names = vec!["a.py".to_string(), "p-1.dist-info/RECORD".to_string()];
        let rec = "p-1.dist-info/RECORD";
        // sha256("foob"), URL-safe base64, from Python's hashlib.
        let good = "a.py,sha256=p0UhGL_IOO57KqwUqLyIxQoa5GIJA8T4zdMnu3mWGJk,4\np-1.dist-info/RECORD,,\n";
        let cases: [(&str, Option<&str>); 6] = [
            (good, None),
            ("a.py,sha256=p0UhGL_IOO57KqwUqLyIxQoa5GIJA8T4zdMnu3mWGJl,4\n", Some("does not match")),
            ("a.py,sha256=p0UhGL_IOO57KqwUqLyIxQoa5GIJA8T4zdMnu3mWGJk,5\n", Some("RECORD says 5")),
            ("a.py,md5=x,4\n", Some("sha256 or stronger")),
            ("p-1.dist-info/RECORD,,\n", Some("not in its RECORD")),
            ("a.py,sha256=p0UhGL_IOO57KqwUqLyIxQoa5GIJA8T4zdMnu3mWGJk,4\nb.py,sha256=x,1\n", Some("not in the wheel")),
        ];
        for (text, want) in cases {
            std::fs::write(d.join(rec), text).unwrap();
            match (check(&d, &names, rec), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{text:?}: {e}"),
                (r, w) => panic!("{text:?}: {r:?}, expected {w:?}"),
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
