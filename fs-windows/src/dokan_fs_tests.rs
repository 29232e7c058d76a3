//! Unit tests of the Dokan filesystem logic (`dokan_fs.rs`), run on
//! Windows (and under wine by `fs-windows/check.sh`).

//! The callbacks called directly, as the Dokan library would (the
//! driver cannot run under wine): `OperationInfo` is only handed
//! through, never read, by this handler.
use super::*;
use crate::access::*;
use kpackfs_core::formats::target::Selection;
use kpackfs_core::view::{ArchiveNaming, ViewConfig};
use std::path::Path;

fn fs() -> KpackDokan {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/demo-install");
    let cfg = ViewConfig {
        source: src,
        selection: Selection::parse("gfx90a").unwrap(),
        cache_bytes: 1 << 20,
        naming: ArchiveNaming::Processor,
        compression: Default::default(),
        db_rules: Default::default(),
    };
    KpackDokan::new(Arc::new(View::new(cfg).unwrap()), false)
}

fn info<'c, 'h: 'c>() -> OperationInfo<'c, 'h, KpackDokan> {
    OperationInfo::new(std::ptr::null_mut())
}

fn sc() -> IO_SECURITY_CONTEXT {
    // SAFETY: a plain C struct of integers and pointers; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

fn w(s: &str) -> U16CString {
    U16CString::from_str(s).unwrap()
}

fn open(fs: &KpackDokan, path: &str, access: u32, disposition: u32, options: u32) -> Result<CreateFileInfo<Context>, NtStatus> {
    fs.create_file(&w(path), &sc(), access, 0, 7, disposition, options, &mut info())
}

const READ: u32 = 0x0012_0089; // FILE_GENERIC_READ

#[test]
fn opens_reads_and_lists() {
    let fs = fs();
    let root = open(&fs, "\\", READ, FILE_OPEN, FILE_DIRECTORY_FILE).unwrap();
    assert!(root.is_dir);
    let mut names = Vec::new();
    fs.find_files(
        &w("\\"),
        |d: &FindData| {
            names.push(d.file_name.to_string_lossy());
            Ok(())
        },
        &info(),
        &root.context,
    )
    .unwrap();
    assert!(names.contains(&"lib".to_string()), "{names:?}");

    let lib = open(&fs, "\\LIB", READ, FILE_OPEN, 0).unwrap();
    let mut entries = Vec::new();
    fs.find_files(
        &w("\\lib"),
        |d: &FindData| {
            entries.push((d.file_name.to_string_lossy(), d.attributes, d.file_size));
            Ok(())
        },
        &info(),
        &lib.context,
    )
    .unwrap();
    assert!(entries.iter().any(|(n, a, _)| n == ".kpack" && *a == info::FILE_ATTRIBUTE_DIRECTORY), "{entries:?}");
    assert!(entries.iter().all(|(n, _, _)| !n.contains(':')));
    // `libdemo.so -> libdemo.so.1 -> libdemo.so.1.0` is presented as
    // the file it leads to.
    let size_of = |name: &str| entries.iter().find(|(n, _, _)| n == name).map(|(_, a, s)| (*a, *s));
    assert_eq!(size_of("libdemo.so"), size_of("libdemo.so.1.0"), "{entries:?}");
    assert_eq!(size_of("libdemo.so.1"), size_of("libdemo.so.1.0"), "{entries:?}");
    assert_eq!(size_of("libdemo.so").map(|(a, _)| a), Some(info::FILE_ATTRIBUTE_READONLY));

    let f = open(&fs, "\\lib\\libdemo.so.1.0", READ, FILE_OPEN, FILE_NON_DIRECTORY_FILE).unwrap();
    assert!(!f.is_dir);
    let fi = fs.get_file_information(&w("x"), &info(), &f.context).unwrap();
    assert_eq!(fi.attributes, info::FILE_ATTRIBUTE_READONLY);
    let Context::File { data, .. } = &f.context else { panic!("not a file") };
    let whole = {
        let of = data.get().expect("opened eagerly for GENERIC_READ");
        of.layout().expect("extents").materialize(of.source_file(), &of.blob_store()).unwrap()
    };
    assert_eq!(fi.file_size, whole.len() as u64);
    // Positional reads, from several threads at once on one handle.
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (fs, ctx, whole) = (&fs, &f.context, &whole);
            s.spawn(move || {
                for i in 0..50u64 {
                    let off = (i * 977 + t * 131) % whole.len() as u64;
                    let mut buf = vec![0u8; 4096];
                    let n = fs.read_file(&w("x"), off as i64, &mut buf, &info(), ctx).unwrap() as usize;
                    let end = (off as usize + 4096).min(whole.len());
                    assert_eq!(&buf[..n], &whole[off as usize..end]);
                }
            });
        }
    });
    let mut buf = [0u8; 16];
    assert_eq!(fs.read_file(&w("x"), whole.len() as i64, &mut buf, &info(), &f.context), Ok(0));
    assert_eq!(fs.read_file(&w("x"), -1, &mut buf, &info(), &f.context), Err(STATUS_INVALID_PARAMETER));
    assert_eq!(fs.read_file(&w("x"), 0, &mut buf, &info(), &lib.context), Err(STATUS_INVALID_DEVICE_REQUEST));

    // Opened for attributes only: data is opened on first read.
    let attrs = open(&fs, "\\lib\\libdemo.so.1.0", FILE_READ_ATTRIBUTES, FILE_OPEN, 0).unwrap();
    let Context::File { data, .. } = &attrs.context else { panic!("not a file") };
    assert!(data.get().is_none());
    assert_eq!(fs.read_file(&w("x"), 0, &mut buf, &info(), &attrs.context), Ok(16));
    assert_eq!(&buf[..4], b"\x7fELF");

    let mut streams = Vec::new();
    fs.find_streams(
        &w("x"),
        |s: &FindStreamData| {
            streams.push((s.name.to_string_lossy(), s.size));
            Ok(())
        },
        &info(),
        &f.context,
    )
    .unwrap();
    assert_eq!(streams, [("::$DATA".to_string(), whole.len() as i64)]);
}

#[test]
fn exact_patterns_are_looked_up() {
    let fs = fs();
    let lib = open(&fs, "\\lib", READ, FILE_OPEN, 0).unwrap();
    let mut got = Vec::new();
    fs.find_files_with_pattern(
        &w("\\lib"),
        &w("LIBDEMO.SO.1.0"),
        |d: &FindData| {
            got.push(d.file_name.to_string_lossy());
            Ok(())
        },
        &info(),
        &lib.context,
    )
    .unwrap();
    assert_eq!(got, ["libdemo.so.1.0"]);
    got.clear();
    fs.find_files_with_pattern(
        &w("\\lib"),
        &w("nothing.dll"),
        |d: &FindData| {
            got.push(d.file_name.to_string_lossy());
            Ok(())
        },
        &info(),
        &lib.context,
    )
    .unwrap();
    assert!(got.is_empty());
    let r = fs.find_files_with_pattern(&w("\\lib"), &w("*.so"), |_: &FindData| Ok(()), &info(), &lib.context);
    assert_eq!(r, Err(STATUS_NOT_IMPLEMENTED));
}

#[test]
fn not_found_and_invalid_names() {
    let fs = fs();
    let e = |p: &str, d: u32| open(&fs, p, READ, d, 0).err();
    assert_eq!(e("\\nope", FILE_OPEN), Some(STATUS_OBJECT_NAME_NOT_FOUND));
    assert_eq!(e("\\nope\\x", FILE_OPEN), Some(STATUS_OBJECT_PATH_NOT_FOUND));
    assert_eq!(e("\\lib\\libdemo.so.1.0\\x", FILE_OPEN), Some(STATUS_OBJECT_PATH_NOT_FOUND));
    assert_eq!(e("\\nope", FILE_OPEN_IF), Some(READ_ONLY));
    assert_eq!(e("\\lib\\libdemo.so.1.0:zone.identifier", FILE_OPEN), Some(STATUS_OBJECT_NAME_NOT_FOUND));
    assert!(open(&fs, "\\lib\\libdemo.so.1.0::$DATA", READ, FILE_OPEN, 0).is_ok());
    assert_eq!(e("\\lib\\..\\lib", FILE_OPEN), Some(STATUS_OBJECT_NAME_INVALID));
    assert_eq!(e("\\lib\\a*", FILE_OPEN), Some(STATUS_OBJECT_NAME_INVALID));
    assert_eq!(e("\\lib:x\\a", FILE_OPEN), Some(STATUS_OBJECT_NAME_INVALID));
    assert_eq!(e("\\lib", 9), Some(STATUS_INVALID_PARAMETER));
    assert_eq!(open(&fs, "\\lib", READ, FILE_OPEN, FILE_NON_DIRECTORY_FILE).err(), Some(STATUS_FILE_IS_A_DIRECTORY));
    assert_eq!(open(&fs, "\\lib\\libdemo.so.1.0", READ, FILE_OPEN, FILE_DIRECTORY_FILE).err(), Some(STATUS_NOT_A_DIRECTORY));
}

#[test]
fn everything_that_writes_is_write_protected() {
    let fs = fs();
    let f = "\\lib\\libdemo.so.1.0";
    for d in [FILE_SUPERSEDE, FILE_CREATE, FILE_OVERWRITE, FILE_OVERWRITE_IF] {
        assert_eq!(open(&fs, f, READ, d, 0).err(), Some(READ_ONLY), "disposition {d}");
        assert_eq!(open(&fs, "\\lib\\new.txt", READ, d, 0).err(), Some(READ_ONLY), "new file, disposition {d}");
    }
    for a in [GENERIC_WRITE, FILE_WRITE_DATA, FILE_APPEND_DATA, DELETE, FILE_WRITE_ATTRIBUTES, WRITE_DAC, GENERIC_ALL] {
        assert_eq!(open(&fs, f, a, FILE_OPEN, 0).err(), Some(READ_ONLY), "access {a:#x}");
        assert_eq!(open(&fs, "\\lib", a, FILE_OPEN, 0).err(), Some(READ_ONLY), "directory, access {a:#x}");
    }
    assert_eq!(open(&fs, f, READ, FILE_OPEN, FILE_DELETE_ON_CLOSE).err(), Some(READ_ONLY));
    assert_eq!(open(&fs, "\\lib\\sub", READ, FILE_CREATE, FILE_DIRECTORY_FILE).err(), Some(READ_ONLY));

    let h = open(&fs, f, READ, FILE_OPEN, 0).unwrap();
    let c = &h.context;
    let n = w(f);
    let i = info();
    assert_eq!(fs.write_file(&n, 0, b"x", &i, c), Err(READ_ONLY));
    assert_eq!(fs.flush_file_buffers(&n, &i, c), Err(READ_ONLY));
    assert_eq!(fs.set_file_attributes(&n, 0, &i, c), Err(READ_ONLY));
    let t = FileTimeOperation::DontChange;
    assert_eq!(fs.set_file_time(&n, t, t, t, &i, c), Err(READ_ONLY));
    assert_eq!(fs.delete_file(&n, &i, c), Err(READ_ONLY));
    assert_eq!(fs.delete_directory(&n, &i, c), Err(READ_ONLY));
    assert_eq!(fs.move_file(&n, &w("\\x"), true, &i, c), Err(READ_ONLY));
    assert_eq!(fs.set_end_of_file(&n, 0, &i, c), Err(READ_ONLY));
    assert_eq!(fs.set_allocation_size(&n, 0, &i, c), Err(READ_ONLY));
    assert_eq!(fs.set_file_security(&n, 0, std::ptr::null_mut(), 0, &i, c), Err(READ_ONLY));
}

#[test]
fn volume() {
    let fs = fs();
    let v = fs.get_volume_information(&info()).unwrap();
    assert_ne!(v.fs_flags & info::FILE_READ_ONLY_VOLUME, 0);
    assert_eq!(v.fs_flags & info::FILE_CASE_SENSITIVE_SEARCH, 0);
    assert_eq!(v.name.to_string_lossy(), "kpackfs gfx90a");
    assert_eq!(v.max_component_length, 255);
    let d = fs.get_disk_free_space(&info()).unwrap();
    assert_eq!((d.free_byte_count, d.available_byte_count), (0, 0));
}
