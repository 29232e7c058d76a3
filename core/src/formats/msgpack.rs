//! MessagePack helpers shared by the marker and the `.kpack` TOC.
//!
//! Encoding goes through `rmp`'s primitive writers so that every form is the
//! smallest one, exactly as Python's `msgpack.packb(use_bin_type=True)` emits
//! (byte identity with the reference). Decoding uses `rmpv`, which never
//! pre-allocates from a claimed length and limits nesting depth.

pub use rmpv::Value;

/// Nesting limit for untrusted input (the TOC is three levels deep).
const MAX_DEPTH: usize = 32;

// Writes into a Vec cannot fail; the Results are discarded on purpose.
pub fn write_map_len(out: &mut Vec<u8>, n: u32) {
    let _ = rmp::encode::write_map_len(out, n);
}
pub fn write_array_len(out: &mut Vec<u8>, n: u32) {
    let _ = rmp::encode::write_array_len(out, n);
}
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let _ = rmp::encode::write_str(out, s);
}
pub fn write_uint(out: &mut Vec<u8>, v: u64) {
    let _ = rmp::encode::write_uint(out, v);
}

/// Writes any value with the smallest forms (used to re-emit parsed
/// metadata verbatim).
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    let _ = rmpv::encode::write_value(out, v);
}

/// Decodes the first object of `bytes`; trailing bytes are ignored, as the
/// runtime does.
pub fn decode_first(bytes: &[u8]) -> Result<Value, rmpv::decode::Error> {
    let mut rd = bytes;
    rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH)
}

/// Looks a string key up in a decoded map (first match wins).
pub fn map_get<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
}
