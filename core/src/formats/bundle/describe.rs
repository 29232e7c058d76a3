//! Human-readable description of a fat section's bundles (`kpackfs
//! inspect`), shared by both host formats.

use std::fmt::Write as _;

use crate::io::ReadAt;

use super::{chunk_objects, scan_fatbin, Chunk};

/// Describes the chunks (bundles) of a fat section `[start, end)`.
pub fn describe_fatbin(out: &mut String, src: &dyn ReadAt, start: u64, end: u64) {
    match scan_fatbin(src, start, end) {
        Err(e) => {
            let _ = writeln!(out, "  fat section unreadable: {e}");
        }
        Ok(chunks) => {
            let _ = writeln!(out, "  {} bundle(s):", chunks.len());
            for (i, c) in chunks.iter().enumerate() {
                match c {
                    Chunk::Plain { at, bundle } => {
                        let _ = writeln!(out, "   [{i}] offset {:#x}: uncompressed bundle, {} bytes", at - start, bundle.len);
                    }
                    Chunk::Compressed { at, len, header } => {
                        let _ = writeln!(
                            out,
                            "   [{i}] offset {:#x}: CCOB v{} {:?}, {len} bytes -> {} bytes",
                            at - start,
                            header.version,
                            header.method,
                            header.uncompressed_size
                        );
                    }
                }
                match chunk_objects(src, c, i) {
                    Ok(objs) => {
                        for o in objs {
                            let _ = writeln!(out, "       {:<28} {:>10} bytes  ({})", o.arch, o.location.len(), o.entry_id);
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(out, "       entries unreadable: {e}");
                    }
                }
            }
        }
    }
}
