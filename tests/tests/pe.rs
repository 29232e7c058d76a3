//! Windows PE/COFF fat binaries served from Linux: every PE test asset's
//! code objects are recovered by the loader emulation (`resolve`, both
//! loader generations) from the baked view and from the mounted view, and
//! equal clang-offload-bundler's. Both archive namings are covered: target
//! IDs (Linux) and processor-only names (what Windows needs, no ':').

use std::fs;
use std::path::Path;

use kpackfs_core::formats::target::TargetId;
use kpackfs_core::tools::resolve::{self, LoaderEnv, LoaderGen};
use kpackfs_tests::*;

const PE: &[&str] = &["hip_one.dll", "hip_two.dll", "hip_app.exe", "hip_cert.dll", "hip_dbg.dll"];

fn source() -> TempDir {
    let dir = tempdir();
    fs::create_dir_all(dir.path().join("bin")).unwrap();
    for f in PE {
        fs::copy(assets().join("bin").join(f), dir.path().join("bin").join(f)).unwrap();
    }
    dir
}

fn wrapper_bundles(file: &str) -> Vec<usize> {
    let t = fs::read_to_string(assets().join("expected").join(file).join("layout.tsv")).unwrap();
    let get = |k: &str| t.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('\t'))).map(|v| v.trim().parse::<usize>().unwrap());
    (0..get("wrappers").unwrap()).map(|i| get(&format!("wrapper_bundle_{i}")).unwrap()).collect()
}

/// The entry the fat runtime picks for each device from these assets.
fn arch_for(file: &str, device: &str) -> &'static str {
    match (device, file) {
        ("gfx1030", _) => "gfx1030",
        (_, "hip_two.dll" | "hip_cert.dll" | "hip_dbg.dll") => "gfx90a",
        _ => "gfx90a:xnack-",
    }
}

fn check_tree(bin_dir: &Path, under: &Path) {
    for file in PE {
        for device in ["gfx90a:sramecc+:xnack-", "gfx1030"] {
            let isa = TargetId::parse(device).unwrap();
            for gen in [LoaderGen::Feb2026, LoaderGen::Newest] {
                let res = resolve::resolve(&bin_dir.join(file), &isa, gen, &LoaderEnv::default()).unwrap_or_else(|e| panic!("{file}: {e}"));
                let bundles = wrapper_bundles(file);
                assert_eq!(res.len(), bundles.len(), "{file}");
                for (i, w) in res.iter().enumerate() {
                    let r = w.result.as_ref().unwrap_or_else(|e| panic!("{file} wrapper {i} on {device} ({gen:?}): {e}"));
                    assert!(r.archive.as_ref().is_some_and(|a| a.starts_with(under)), "{file}: {:?}", r.archive);
                    let want = expected_object(file, bundles[i], arch_for(file, device));
                    assert!(r.bytes == want, "{file} wrapper {i} on {device} ({gen:?}): differs from clang-offload-bundler's");
                }
            }
        }
    }
}

#[test]
fn pe_assets_resolve_from_the_baked_view() {
    let src = source();
    for naming in ["target", "processor"] {
        let baked = bake(src.path(), "gfx90a,gfx1030", &["--archive-names", naming]);
        let out = baked.path().join("out");
        check_tree(&out.join("bin"), &out);
        if naming == "processor" {
            // No ':' anywhere: the names Windows can hold.
            for e in fs::read_dir(out.join("bin/.kpack")).unwrap() {
                let n = e.unwrap().file_name();
                assert!(!n.to_string_lossy().contains(':'), "{n:?}");
            }
        }
        // The signed DLL lost its (now invalid) certificate, nothing else.
        let cert = fs::read(out.join("bin/hip_cert.dll")).unwrap();
        let plain = fs::read(out.join("bin/hip_two.dll")).unwrap();
        assert_eq!(cert.len(), plain.len());
    }
}

#[test]
fn pe_assets_resolve_from_the_mounted_view() {
    require_root();
    let src = source();
    for naming in ["target", "processor"] {
        let m = Mount::new(Some(src.path()), "gfx90a,gfx1030", &["--archive-names", naming]);
        check_tree(&m.path("bin"), &m.mnt);
        let baked = bake(src.path(), "gfx90a,gfx1030", &["--archive-names", naming]);
        assert_same_tree(&snapshot(&m.mnt), &snapshot(&baked.path().join("out")), "PE mount vs bake");
    }
}
