//! The kpack marker (`.rocm_kpack_ref` / `.kpackrf`): a two-key MessagePack
//! map telling the runtime where the archives are and which TOC key prefix
//! belongs to this binary (FORMATS.md §3.1).
//!
//! Encoding is byte-identical to Python's `msgpack.packb(use_bin_type=True)`
//! (smallest forms, keys in this order), which the goldens were made with.

use thiserror::Error;

use crate::formats::kpack::{ArchiveName, KPACK_DIR};
use crate::formats::msgpack::{self, Value};

/// The runtime reads at most this much from the marker pointer.
pub const MAX_MARKER: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub search_paths: Vec<String>,
    pub kernel_name: String,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MarkerError {
    #[error("marker is not valid MessagePack: {0}")]
    Decode(String),
    #[error("marker is not a map")]
    NotMap,
    #[error("marker lacks a string kernel_name")]
    NoKernelName,
    #[error("marker lacks a non-empty kpack_search_paths array of strings")]
    NoSearchPaths,
}

impl Marker {
    /// The splitter's convention: archives of `group` in a `.kpack/`
    /// directory `depth` levels above the binary's directory.
    pub fn for_group(group: &str, depth: usize, kernel_name: &str) -> Marker {
        Marker {
            search_paths: vec![format!("{}{KPACK_DIR}/{}", "../".repeat(depth), ArchiveName::search_pattern(group))],
            kernel_name: kernel_name.to_string(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.kernel_name.len());
        msgpack::write_map_len(&mut out, 2);
        msgpack::write_str(&mut out, "kpack_search_paths");
        msgpack::write_array_len(&mut out, self.search_paths.len() as u32);
        for p in &self.search_paths {
            msgpack::write_str(&mut out, p);
        }
        msgpack::write_str(&mut out, "kernel_name");
        msgpack::write_str(&mut out, &self.kernel_name);
        out
    }

    /// Decodes as the runtime does: first object only, keys by name, extra
    /// keys ignored, non-string path entries skipped.
    pub fn decode(bytes: &[u8]) -> Result<Marker, MarkerError> {
        let bytes = &bytes[..bytes.len().min(MAX_MARKER)];
        let v = msgpack::decode_first(bytes).map_err(|e| MarkerError::Decode(e.to_string()))?;
        let map = v.as_map().ok_or(MarkerError::NotMap)?;
        let kernel_name = msgpack::map_get(map, "kernel_name").and_then(Value::as_str).ok_or(MarkerError::NoKernelName)?.to_string();
        let search_paths: Vec<String> = msgpack::map_get(map, "kpack_search_paths")
            .and_then(Value::as_array)
            .ok_or(MarkerError::NoSearchPaths)?
            .iter()
            .filter_map(|p| p.as_str().map(str::to_string))
            .collect();
        if search_paths.is_empty() {
            return Err(MarkerError::NoSearchPaths);
        }
        Ok(Marker { search_paths, kernel_name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime reads up to 64 KiB from the marker pointer: a marker of
    /// 60 KiB decodes whole; one past the limit is cut there and fails.
    #[test]
    fn markers_are_read_up_to_64_kib() {
        let m = |len: usize| Marker { search_paths: vec!["../.kpack/x_@GFXARCH@.kpack".into()], kernel_name: "k".repeat(len) };
        let near = m(60 * 1024);
        let bytes = near.encode();
        assert!(bytes.len() > 60 * 1024 && bytes.len() <= MAX_MARKER, "{}", bytes.len());
        assert_eq!(Marker::decode(&bytes), Ok(near));
        let over = m(MAX_MARKER).encode();
        assert!(Marker::decode(&over).is_err());
    }

    #[test]
    fn reference_encoding() {
        // FORMATS.md §3.1, verified against the reference tool.
        let m = Marker::for_group("test", 1, "lib/libk.so");
        let mut want = vec![0x82, 0xb2];
        want.extend_from_slice(b"kpack_search_paths");
        want.extend_from_slice(&[0x91, 0xbe]);
        want.extend_from_slice(b"../.kpack/test_@GFXARCH@.kpack");
        want.push(0xab);
        want.extend_from_slice(b"kernel_name");
        want.push(0xab);
        want.extend_from_slice(b"lib/libk.so");
        assert_eq!(m.encode(), want);
        assert_eq!(want.len(), 76);
        assert_eq!(Marker::decode(&want).unwrap(), m);
    }

    #[test]
    fn tolerant_and_strict_decode() {
        // Extra key, non-string path entry, trailing garbage.
        let mut b = vec![0x83, 0xa1, b'x', 0x01, 0xb2];
        b.extend_from_slice(b"kpack_search_paths");
        b.extend_from_slice(&[0x92, 0x05, 0xa1, b'p', 0xab]);
        b.extend_from_slice(b"kernel_name");
        b.extend_from_slice(&[0xa1, b'k', 0xff, 0xff]);
        let m = Marker::decode(&b).unwrap();
        assert_eq!(m.search_paths, vec!["p"]);
        assert_eq!(m.kernel_name, "k");
        assert_eq!(Marker::decode(&[0x91, 0x01]), Err(MarkerError::NotMap));
        assert!(Marker::decode(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(Marker::decode(&[]).is_err());
    }

    #[test]
    fn long_strings_use_str8_and_str16() {
        let m = Marker { search_paths: vec!["a".repeat(40)], kernel_name: "b".repeat(300) };
        let e = m.encode();
        assert!(e.windows(2).any(|w| w == [0xd9, 40]));
        assert!(e.windows(3).any(|w| w == [0xda, 0x01, 0x2c]));
        assert_eq!(Marker::decode(&e).unwrap(), m);
    }
}
