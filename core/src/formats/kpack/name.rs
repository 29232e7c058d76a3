//! Where archives live and what they are called: the one statement of the
//! naming rule every writer and reader of archive names uses — the view
//! (which archives to show), the packagers (which to write), the marker
//! (the search path the runtime expands), `archs` (which targets an
//! installed tree holds) and the adapters (which cached names to forget
//! when a binary changes).
//!
//! An archive of the code objects of binary (group) `G` for target `T` is
//! `G_T.kpack` in a `.kpack` directory; the runtime finds it by expanding
//! `@GFXARCH@` in the marker's search path `G_@GFXARCH@.kpack`. `T` is a
//! target ID (`gfx90a:xnack-`) or a bare processor (`gfx90a`); names made
//! for file systems without `:` may write `_` for it.

use std::fmt;

use crate::formats::target::{TargetId, SPIRV_ARCH};

/// The directory holding archives, next to (or above) the binaries.
pub const KPACK_DIR: &str = ".kpack";

/// The file-name suffix of archives.
pub const SUFFIX: &str = ".kpack";

/// What the runtime replaces with a device's target in a search path.
pub const ARCH_PLACEHOLDER: &str = "@GFXARCH@";

/// `<group>_<target>.kpack`, parsed or to be written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArchiveName {
    /// The binary (or packaging component) whose code objects it holds.
    pub group: String,
    /// The target as written in the name.
    pub target: String,
}

impl ArchiveName {
    pub fn new(group: impl Into<String>, target: impl Into<String>) -> ArchiveName {
        ArchiveName { group: group.into(), target: target.into() }
    }

    /// Splits a file name at the last `_` after which a target ID (or the
    /// SPIR-V identity `amdgcnspirv`) follows (groups may contain `_`:
    /// `libamd_comgr.so_gfx90a.kpack`). `None` for anything else, so a
    /// stray `.kpack` file is never taken for an archive of some binary.
    pub fn parse(name: &str) -> Option<ArchiveName> {
        let stem = name.strip_suffix(SUFFIX)?;
        if let Some(group) = stem.strip_suffix(SPIRV_ARCH).and_then(|g| g.strip_suffix('_')) {
            return Some(ArchiveName::new(group, SPIRV_ARCH));
        }
        stem.match_indices('_').map(|(i, _)| i).rev().find_map(|i| {
            let target = &stem[i + 1..];
            TargetId::parse(&target.replace('_', ":")).ok().map(|_| ArchiveName::new(&stem[..i], target))
        })
    }

    /// Whether it is a portable SPIR-V archive (`<group>_amdgcnspirv.kpack`),
    /// useful to every GPU; [`Self::target`] is `None` for it.
    pub fn is_spirv(&self) -> bool {
        self.target == SPIRV_ARCH
    }

    /// The target the name encodes.
    pub fn target(&self) -> Option<TargetId> {
        TargetId::parse(&self.target.replace('_', ":")).ok()
    }

    /// The marker's search pattern for the archives of `group`.
    pub fn search_pattern(group: &str) -> String {
        format!("{group}_{ARCH_PLACEHOLDER}{SUFFIX}")
    }

    /// Whether `name` may be an archive of `group` (its prefix): what an
    /// adapter forgets when that binary changes.
    pub fn may_belong_to(name: &[u8], group: &[u8]) -> bool {
        name.len() > group.len() && name.starts_with(group) && name[group.len()] == b'_'
    }
}

impl fmt::Display for ArchiveName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}{SUFFIX}", self.group, self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names written by hand from the rule, not by `Display`.
    #[test]
    fn parse_splits_at_the_last_underscore_before_a_target() {
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("libk.so_gfx90a.kpack", Some(("libk.so", "gfx90a"))),
            ("libamd_comgr.so_gfx1030.kpack", Some(("libamd_comgr.so", "gfx1030"))),
            ("libk.so_gfx90a:xnack-.kpack", Some(("libk.so", "gfx90a:xnack-"))),
            ("libk.so_gfx90a_xnack-.kpack", Some(("libk.so", "gfx90a_xnack-"))),
            ("rocblas_gfx942.kpack", Some(("rocblas", "gfx942"))),
            ("libk.so_notatarget.kpack", None),
            ("libk.so_gfx90a.kpm", None),
            ("gfx90a.kpack", None),
            ("_gfx90a.kpack", Some(("", "gfx90a"))),
            ("libk.so_amdgcnspirv.kpack", Some(("libk.so", "amdgcnspirv"))),
            ("lib_amdgcnspirv.so_amdgcnspirv.kpack", Some(("lib_amdgcnspirv.so", "amdgcnspirv"))),
            ("libk.so_xamdgcnspirv.kpack", None),
            ("amdgcnspirv.kpack", None),
        ];
        for (name, want) in cases {
            let got = ArchiveName::parse(name);
            assert_eq!(got.as_ref().map(|a| (a.group.as_str(), a.target.as_str())), *want, "{name}");
        }
    }

    #[test]
    fn display_and_target_follow_the_rule() {
        let a = ArchiveName::new("libk.so", "gfx90a:xnack+");
        assert_eq!(a.to_string(), "libk.so_gfx90a:xnack+.kpack");
        assert_eq!(a.target().map(|t| t.to_string()).as_deref(), Some("gfx90a:xnack+"));
        assert_eq!(ArchiveName::new("g", "gfx90a_xnack-").target().map(|t| t.to_string()).as_deref(), Some("gfx90a:xnack-"));
        assert_eq!(ArchiveName::search_pattern("libk.so"), "libk.so_@GFXARCH@.kpack");
        let s = ArchiveName::new("libk.so", "amdgcnspirv");
        assert!(s.is_spirv() && s.target().is_none() && !a.is_spirv());
    }

    #[test]
    fn membership_needs_the_separator() {
        assert!(ArchiveName::may_belong_to(b"libk.so_gfx90a.kpack", b"libk.so"));
        assert!(!ArchiveName::may_belong_to(b"libk.so.1_gfx90a.kpack", b"libk.so"));
        assert!(!ArchiveName::may_belong_to(b"libk.so", b"libk.so"));
    }
}
