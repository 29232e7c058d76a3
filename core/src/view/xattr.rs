//! Operator attributes (`user.kpackfs.*`): the origin of every node; on
//! the root the counters, selection and source; on transformed binaries the
//! targets their source carries.

use super::{Attr, Node, Origin, Result, View};

/// The namespace of every operator attribute: a name outside it is never
/// looked up (adapters answer "no such attribute" without asking).
pub const XATTR_PREFIX: &str = "user.kpackfs.";
/// Where a node's content comes from ([`Origin`]), on every node.
pub const XATTR_ORIGIN: &str = "user.kpackfs.origin";
/// The counters, on the root: they grow between two reads.
pub const XATTR_STATS: &str = "user.kpackfs.stats";
/// The selection, on the root.
pub const XATTR_ARCH: &str = "user.kpackfs.arch";
/// The source directory, on the root.
pub const XATTR_SOURCE: &str = "user.kpackfs.source";
/// The targets a transformed binary's source carries.
pub const XATTR_TARGETS: &str = "user.kpackfs.targets";

impl View {
    /// Names of the operator attributes of node `ino`: `user.kpackfs.origin`
    /// everywhere; on the root also the counters, selection and source; on
    /// transformed binaries the targets their source carries. Cheap (no
    /// planning): `ls -l`, `cp -a` and `rsync -X` list attributes of every
    /// file they touch.
    pub fn xattr_names(&self, ino: u64) -> Result<Vec<&'static str>> {
        Ok(self.xattr_names_of(ino, &self.getattr(ino)?))
    }

    fn xattr_names_of(&self, ino: u64, attr: &Attr) -> Vec<&'static str> {
        let mut v = vec![XATTR_ORIGIN];
        if ino == self.root_ino() {
            v.extend([XATTR_STATS, XATTR_ARCH, XATTR_SOURCE]);
        }
        if attr.origin == Origin::Transformed {
            v.push(XATTR_TARGETS);
        }
        v
    }

    /// The value of attribute `name` of node `ino`, or `None` if it has no
    /// such attribute. Only the asked-for value is computed: `targets`
    /// plans the binary's archives (a scan of its bundle headers), which
    /// nothing else about a listing needs.
    pub fn xattr(&self, ino: u64, name: &str) -> Result<Option<Vec<u8>>> {
        let attr = self.getattr(ino)?;
        if !self.xattr_names_of(ino, &attr).contains(&name) {
            return Ok(None);
        }
        Ok(Some(match name {
            XATTR_ORIGIN => attr.origin.to_string().into_bytes(),
            XATTR_STATS => self.stats().to_string().into_bytes(),
            XATTR_ARCH => self.cfg.selection.to_string().into_bytes(),
            XATTR_SOURCE => self.cfg.source.to_string_lossy().into_owned().into_bytes(),
            XATTR_TARGETS => match self.resolve_ino(ino)? {
                (p, Node::Transformed(_, fb)) => {
                    let t: Vec<String> = self.archives(&p, &fb)?.objects.targets.iter().map(ToString::to_string).collect();
                    t.join(",").into_bytes()
                }
                // Changed since getattr: no longer a transformed binary.
                _ => return Ok(None),
            },
            _ => return Ok(None),
        }))
    }
}
