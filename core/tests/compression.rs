//! `zstd-per-kernel` archives of a CCOB source, through the view (scheme
//! `auto`): every frame is exactly an independent level-3 zstd compression
//! of its code object with a content checksum (so the archive is the sum of its level-3 frames plus
//! header, frame table and TOC — the 1.05x bound holds with room),
//! and every TOC entry decodes to the object the `none` archive of the same
//! view holds.

mod common;

use std::fs;
use std::path::Path;

use common::{assets, without_checksum};
use kpackfs_core::formats::bundle::CcobMethod;
use kpackfs_core::formats::kpack::{Archive, Scheme};
use kpackfs_core::formats::target::Selection;
use kpackfs_core::view::{ArchiveCompression, ArchiveNaming, View, ViewConfig};

fn view(src: &Path, compression: ArchiveCompression) -> View {
    View::new(ViewConfig {
        source: src.to_path_buf(),
        selection: Selection::parse("gfx90a,gfx1030").unwrap(),
        cache_bytes: 1 << 20,
        naming: ArchiveNaming::TargetId,
        compression,
        db_rules: Default::default(),
    })
    .unwrap()
}

fn read_all(v: &View, rel: &str) -> Vec<u8> {
    let f = v.open_path(Path::new(rel)).unwrap();
    let mut b = vec![0u8; f.len() as usize];
    assert_eq!(f.read_at(0, &mut b).unwrap(), b.len());
    b
}

#[test]
fn auto_archives_of_ccob_sources_are_level3_frames_of_the_objects() {
    let t = tempfile::tempdir().unwrap();
    let lib = t.path().join("lib");
    fs::create_dir_all(&lib).unwrap();
    for (asset, version, method) in [("libmulti.so", 3, CcobMethod::Zstd), ("libtwo.so", 2, CcobMethod::Zlib)] {
        kpackfs_core::tools::recompress::recompress(&assets().join("bin").join(asset), &lib.join(asset), version, method, 3).unwrap();
    }
    let auto = view(t.path(), ArchiveCompression::Auto);
    let plain = view(t.path(), ArchiveCompression::None);
    let mut checked = 0;
    for name in
        ["libmulti.so_gfx90a:xnack-.kpack", "libmulti.so_gfx90a:xnack+.kpack", "libmulti.so_gfx1030.kpack", "libtwo.so_gfx90a.kpack", "libtwo.so_gfx1030.kpack"]
    {
        let rel = format!("lib/.kpack/{name}");
        let z = read_all(&auto, &rel);
        let n = read_all(&plain, &rel);
        let (za, na) = (Archive::open(&z).unwrap(), Archive::open(&n).unwrap());
        assert!(matches!(za.toc.scheme, Scheme::Zstd { .. }), "{name}: auto chose {}", za.toc.scheme_name());
        assert!(matches!(na.toc.scheme, Scheme::None { .. }));
        let mut frames = 0u64;
        for (ordinal, _) in za.frames.iter().enumerate() {
            let frame = za.stored_blob(&z, ordinal as u64).unwrap();
            let object = na.stored_blob(&n, ordinal as u64).unwrap();
            assert_eq!(without_checksum(&frame), zstd::bulk::compress(&object, 3).unwrap(), "{name}: frame {ordinal} is not level-3 zstd of its object");
            frames += frame.len() as u64;
        }
        let toc = z.len() as u64 - za.toc_offset;
        assert!((z.len() as u64) * 100 <= (frames + 64 + toc) * 105, "{name}: {} bytes for {frames} bytes of frames", z.len());
        for (key, archs) in &na.toc.toc {
            for (arch, _) in archs {
                assert_eq!(za.get_kernel(&z, key, arch).unwrap(), na.get_kernel(&n, key, arch).unwrap(), "{name} {key} {arch}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 5, "{checked} entries");
}
