//! The AMD GPU family table `split-wheel`'s family layout groups device
//! wheels by: each target belongs to a sub-family (`gfx1100` → `gfx110x`)
//! and a family (`gfx110x` → `gfx11`), and is packaged under its *owner*
//! (`gfx1250-strict` shares `gfx1250`'s wheel). The rows are data, in
//! `gfx_families.tsv`, transcribed from rocm-bootstrap 0.3.0 (the package
//! upstream's wheel splitter reads them from); keeping them as data lets a
//! reader compare them with their source line by line.
//!
//! A key of this table (a *bundle*) names one device wheel: a target-level
//! key (`gfx1100`), a sub-family (`gfx12_0`) or a family (`gfx11`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

const TABLE: &str = include_str!("gfx_families.tsv");

/// Where a bundle key sits in the three levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Target,
    SubFamily,
    Family,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    owner: String,
    sub_family: String,
    family: String,
}

/// The parsed table.
#[derive(Debug, Default)]
pub struct Families {
    targets: BTreeMap<String, Row>,
    generics: BTreeMap<String, String>,
    names: BTreeMap<String, String>,
}

/// The embedded table, parsed once.
pub fn table() -> &'static Families {
    static T: OnceLock<Families> = OnceLock::new();
    // The table is part of the program, not input; `table_parses` pins it.
    T.get_or_init(|| Families::parse(TABLE).expect("gfx_families.tsv is well-formed"))
}

impl Families {
    fn parse(text: &str) -> Result<Families, String> {
        let mut t = Families::default();
        for (n, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            let dup = |ok: bool| if ok { Ok(()) } else { Err(format!("line {}: {:?} listed twice", n + 1, f[1])) };
            match f[..] {
                ["target", target, owner, sub, fam] => {
                    dup(t.targets.insert(target.into(), Row { owner: owner.into(), sub_family: sub.into(), family: fam.into() }).is_none())?
                }
                ["generic", generic, bundle] => dup(t.generics.insert(generic.into(), bundle.into()).is_none())?,
                ["name", key, display] => dup(t.names.insert(key.into(), display.into()).is_none())?,
                _ => return Err(format!("line {}: unknown row {line:?}", n + 1)),
            }
        }
        Ok(t)
    }

    /// The level of bundle key `key`, `None` if the table has no such key.
    pub fn level(&self, key: &str) -> Option<Level> {
        let rows = || self.targets.values();
        if rows().any(|r| r.owner == key) {
            Some(Level::Target)
        } else if rows().any(|r| r.sub_family == key) {
            Some(Level::SubFamily)
        } else if rows().any(|r| r.family == key) {
            Some(Level::Family)
        } else {
            None
        }
    }

    /// The bundle a split artifact's processor (or generic target) is
    /// packaged in: a target's owner, a generic target's bundle, or the
    /// key itself when it already is one. `None`: not in the table.
    pub fn bundle_of(&self, name: &str) -> Option<String> {
        if let Some(r) = self.targets.get(name) {
            return Some(r.owner.clone());
        }
        if let Some(b) = self.generics.get(name) {
            return Some(b.clone());
        }
        self.level(name).map(|_| name.to_string())
    }

    /// The bundle of a database file named for a processor prefix
    /// (`gfx11*`, `gfx120*`): a prefix that is a target goes to its owner;
    /// else the one bundle whose targets are exactly the table's targets
    /// starting with the prefix (`gfx110` → `gfx110x`, `gfx12` → `gfx12`).
    /// `None` when no bundle covers exactly those targets.
    pub fn bundle_of_prefix(&self, prefix: &str) -> Option<String> {
        if let Some(r) = self.targets.get(prefix) {
            return Some(r.owner.clone());
        }
        let members: BTreeSet<&str> = self.targets.keys().filter(|t| t.starts_with(prefix)).map(String::as_str).collect();
        if members.is_empty() {
            return None;
        }
        let first = self.targets.get(*members.iter().next()?)?;
        [&first.sub_family, &first.family]
            .into_iter()
            .find(|key| {
                let covered: BTreeSet<&str> =
                    self.targets.iter().filter(|(_, r)| r.sub_family == **key || r.family == **key).map(|(t, _)| t.as_str()).collect();
                covered == members
            })
            .cloned()
    }

    /// A target-level key's parents (sub-family, then family).
    pub fn parents(&self, key: &str) -> Vec<String> {
        self.targets.get(key).map(|r| vec![r.sub_family.clone(), r.family.clone()]).unwrap_or_default()
    }

    /// The name a device wheel's Summary uses for `key`.
    pub fn display<'a>(&'a self, key: &'a str) -> &'a str {
        self.names.get(key).map_or(key, String::as_str)
    }
}

/// The part of a distribution name a bundle key gives (`gfx12_0` → `gfx12-0`).
pub fn dist_part(key: &str) -> String {
    key.replace('_', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows pinned against rocm-bootstrap 0.3.0 as docs/research/wheels.md
    /// §1 lists them.
    #[test]
    fn table_parses() {
        let t = table();
        assert_eq!(t.targets.len(), 34);
        assert_eq!(t.generics.len(), 7);
        let row = |k: &str| {
            let r = &t.targets[k];
            (r.owner.as_str(), r.sub_family.as_str(), r.family.as_str())
        };
        assert_eq!(row("gfx906"), ("gfx906", "gfx9_0", "gfx9"));
        assert_eq!(row("gfx90a"), ("gfx90a", "gfx9_0", "gfx9"));
        assert_eq!(row("gfx942"), ("gfx942", "gfx9_4", "gfx9"));
        assert_eq!(row("gfx1030"), ("gfx1030", "gfx10_3", "gfx10"));
        assert_eq!(row("gfx1100"), ("gfx1100", "gfx110x", "gfx11"));
        assert_eq!(row("gfx1151"), ("gfx1151", "gfx115x", "gfx11"));
        assert_eq!(row("gfx1201"), ("gfx1201", "gfx12_0", "gfx12"));
        assert_eq!(row("gfx1250-strict"), ("gfx1250", "gfx12_5", "gfx12"));
        assert!(!t.targets.contains_key("gfx940") && !t.targets.contains_key("gfx941"));
        assert_eq!(t.display("gfx11"), "RDNA3");
        assert_eq!(t.display("gfx90a"), "gfx90a (MI200)");
        assert_eq!(t.display("gfx1100"), "gfx1100");
    }

    #[test]
    fn levels_bundles_and_parents() {
        let t = table();
        assert_eq!(t.level("gfx1100"), Some(Level::Target));
        assert_eq!(t.level("gfx1250-strict"), None, "not a bundle: it is packaged as gfx1250");
        assert_eq!(t.level("gfx110x"), Some(Level::SubFamily));
        assert_eq!(t.level("gfx12_0"), Some(Level::SubFamily));
        assert_eq!(t.level("gfx11"), Some(Level::Family));
        assert_eq!(t.level("gfx940"), None);
        assert_eq!(t.bundle_of("gfx1250-strict").as_deref(), Some("gfx1250"));
        assert_eq!(t.bundle_of("gfx11-generic").as_deref(), Some("gfx11"));
        assert_eq!(t.bundle_of("gfx10-3-generic").as_deref(), Some("gfx10_3"));
        assert_eq!(t.bundle_of("gfx12_0").as_deref(), Some("gfx12_0"));
        assert_eq!(t.bundle_of("gfx940"), None);
        assert_eq!(t.parents("gfx1100"), ["gfx110x", "gfx11"]);
        assert_eq!(t.parents("gfx90a"), ["gfx9_0", "gfx9"]);
        assert!(t.parents("gfx11").is_empty());
        for (prefix, bundle) in [
            ("gfx9", Some("gfx9")),
            ("gfx90", Some("gfx9_0")),
            ("gfx10", Some("gfx10")),
            ("gfx103", Some("gfx10_3")),
            ("gfx11", Some("gfx11")),
            ("gfx110", Some("gfx110x")),
            ("gfx115", Some("gfx115x")),
            ("gfx12", Some("gfx12")),
            ("gfx120", Some("gfx12_0")),
            ("gfx125", Some("gfx12_5")),
            ("gfx1250", Some("gfx1250")),
            ("gfx942", Some("gfx942")),
            ("gfx13", None),
        ] {
            assert_eq!(t.bundle_of_prefix(prefix).as_deref(), bundle, "{prefix}");
        }
        assert_eq!(dist_part("gfx12_0"), "gfx12-0");
    }

    #[test]
    fn malformed_rows_are_refused() {
        assert!(Families::parse("target\tgfx1\tgfx1\n").is_err());
        assert!(Families::parse("generic\ta\tb\ngeneric\ta\tc\n").is_err());
    }
}
