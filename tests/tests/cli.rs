//! The README's exit-status table as a contract: each bad invocation of the
//! real binary gets its exit status (2: bad arguments or an unusable path;
//! 1: failure while working) and one line on stderr naming the path or
//! value and what to do. The expected codes and substrings are written out
//! by hand below, not derived from kpackfs.

use std::path::PathBuf;
use std::process::Command;

use kpackfs_tests::*;

/// The paths a row's arguments may name (`{…}` placeholders).
struct Fixture {
    _dir: TempDir,
    root: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempdir();
        let root = dir.path().to_path_buf();
        std::fs::write(root.join("afile"), b"not a directory").unwrap();
        std::fs::create_dir(root.join("empty")).unwrap();
        // An install-looking directory with content (like /opt/rocm).
        std::fs::create_dir_all(root.join("inst/lib")).unwrap();
        std::fs::write(root.join("inst/lib/libx.so"), b"x").unwrap();
        // A kpack'd tree for gfx90a:xnack- (the demo baked).
        let st = Command::new(kpackfs())
            .arg("bake")
            .arg(assets().join("demo-install"))
            .arg(root.join("baked"))
            .args(["--arch", "gfx90a:xnack-", "-q", "--cache-dir", "none"])
            .status()
            .unwrap();
        assert!(st.success());
        Fixture { _dir: dir, root }
    }

    fn arg(&self, a: &str) -> String {
        a.replace("{tmp}", &self.root.to_string_lossy()).replace("{demo}", &assets().join("demo-install").to_string_lossy())
    }

    /// Directories a wrong reading of a row could have mounted something on.
    fn mountpoints(&self) -> Vec<PathBuf> {
        ["empty", "inst", "inst/lib"].iter().map(|d| self.root.join(d)).collect()
    }
}

/// Runs kpackfs with `args`; returns its exit status and stderr. Anything
/// a broken build mounted is unmounted before the assertion can fail.
fn run(fx: &Fixture, args: &[&str]) -> (Option<i32>, String, Vec<PathBuf>) {
    let mut argv: Vec<String> = args.iter().map(|a| fx.arg(a)).collect();
    // Never the machine's cache directory.
    if matches!(args.first(), Some(&"mount") | Some(&"bake")) && !args.contains(&"--cache-dir") {
        argv.extend(["--cache-dir".to_string(), fx.arg("{tmp}/cache")]);
    }
    let out = Command::new(kpackfs()).args(&argv).output().expect("run kpackfs");
    let mut stray = Vec::new();
    for m in fx.mountpoints() {
        if mounted(&m) {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
            stray.push(m);
        }
    }
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), stray)
}

/// (arguments, exit status, substring of stderr): one row per mistake.
const TABLE: &[(&[&str], i32, &str)] = &[
    // Unknown commands are not taken for a mount SOURCE.
    (&["inpsect", "{tmp}/afile"], 2, "unrecognized subcommand 'inpsect'"),
    (&["status"], 2, "unrecognized subcommand 'status'"),
    (&["umount", "{tmp}/empty"], 2, "fusermount3 -u"),
    (&["unmount", "{tmp}/empty"], 2, "umount MOUNTPOINT"),
    // mount(8)'s helper form only with exactly two paths and -o.
    (&["{tmp}/inst", "--arch", "gfx90a"], 2, "unrecognized subcommand"),
    (&["{tmp}/inst", "{tmp}/empty"], 2, "unrecognized subcommand"),
    // The demo only by name: a forgotten SOURCE mounts nothing.
    (&["mount", "{tmp}/inst", "--arch", "gfx90a"], 2, "--demo"),
    (&["mount", "{tmp}/empty", "--arch", "gfx90a"], 2, "needs SOURCE and MOUNTPOINT"),
    (&["mount", "--demo", "{demo}", "{tmp}/empty", "--arch", "gfx90a"], 2, "only the MOUNTPOINT"),
    (&["archs"], 2, "--demo"),
    // Mountpoints that would hide something.
    (&["mount", "{demo}", "{tmp}/inst", "--arch", "gfx90a"], 2, "is not empty"),
    (&["mount", "{tmp}/inst", "{tmp}/inst", "--arch", "gfx90a"], 2, "is the source"),
    (&["mount", "{tmp}/inst", "{tmp}/inst/lib", "--arch", "gfx90a", "--nonempty"], 2, "inside the source"),
    (&["mount", "{tmp}/inst/lib", "{tmp}/inst", "--arch", "gfx90a", "--nonempty"], 2, "lies inside the mountpoint"),
    (&["mount", "{demo}", "{tmp}/afile", "--arch", "gfx90a"], 2, "not a directory"),
    (&["mount", "{tmp}/nonexistent", "{tmp}/empty", "--arch", "gfx90a"], 2, "nonexistent"),
    // A target the install does not carry: refused, naming the nearest.
    (
        &["bake", "{demo}", "{tmp}/out", "--arch", "gfx90"],
        2,
        "--arch gfx90: {demo} carries no code for it (it carries: gfx1030, gfx906, gfx90a, gfx90a:xnack+, gfx90a:xnack-); did you mean gfx906 or gfx90a?",
    ),
    (
        &["bake", "{demo}", "{tmp}/out", "--arch", "gfx90a,gfx1100"],
        2,
        "--arch gfx1100: {demo} carries no code for it (it carries: gfx1030, gfx906, gfx90a, gfx90a:xnack+, gfx90a:xnack-)\n",
    ),
    (&["split", "{demo}", "{tmp}/split", "--component", "c", "--targets", "gfx1031"], 2, "did you mean gfx1030?"),
    (&["verify", "{tmp}/baked", "--targets", "gfx90"], 2, "did you mean gfx90a?"),
    (&["resolve", "{tmp}/baked/lib/libdemo.so", "--arch", "gfx90"], 2, "carries: gfx90a:xnack-); did you mean gfx90a?"),
    (&["resolve", "{tmp}/baked/lib/libdemo.so", "--arch", "gfx1030"], 2, "{tmp}/baked/lib/.kpack/libdemo.so.1.0_@GFXARCH@.kpack"),
    (&["resolve", "{tmp}/baked/lib", "--arch", "gfx90a"], 2, "is a directory"),
    (&["resolve", "{tmp}/baked/lib/libdemo.so", "--arch", "gfx90a:xnack-,gfx1030:"], 2, "\"gfx1030:\""),
    // A bare processor stands for its devices; lists are devices.
    (&["resolve", "{tmp}/baked/lib/libdemo.so", "--arch", "gfx90a"], 0, ""),
    (&["resolve", "{tmp}/baked/lib/libdemo.so", "--arch", "gfx90a:sramecc+:xnack-,gfx90a:sramecc-:xnack-"], 0, ""),
    (&["resolve", "{tmp}/baked/lib/libdemo.so", "--arch", "gfx90a:xnack+"], 2, "did you mean gfx90a:xnack-?"),
    // A file where a directory is wanted: named, with the option.
    (&["mount", "{demo}", "{tmp}/empty", "--arch", "gfx90a", "--cache-dir", "{tmp}/afile"], 2, "--cache-dir {tmp}/afile: is a file, not a directory"),
    (&["bake", "{demo}", "{tmp}/out", "--arch", "gfx90a", "--cache-dir", "{tmp}/afile"], 2, "--cache-dir {tmp}/afile: is a file, not a directory"),
    (&["bake", "{demo}", "{tmp}/afile", "--arch", "gfx90a"], 2, "DEST {tmp}/afile: is a file, not a directory"),
    (&["split", "{demo}", "{tmp}/afile", "--component", "c"], 2, "OUTPUT {tmp}/afile: is a file, not a directory"),
    (&["resolve", "{tmp}/baked/lib/libdemo.so", "--arch", "gfx90a:xnack-", "--out", "{tmp}/afile"], 2, "--out {tmp}/afile: is a file, not a directory"),
    // Paths that are not there are bad arguments (2), said once.
    (&["split-wheel", "{tmp}/nonexistent.whl", "{tmp}/w"], 2, "{tmp}/nonexistent.whl: no such file"),
    (&["verify", "{tmp}/nonexistent"], 2, "{tmp}/nonexistent: No such file or directory"),
    (&["verify", "{tmp}/baked", "--against", "{tmp}/nonexistent"], 2, "--against {tmp}/nonexistent: No such file or directory"),
    // doctor: a PREFIX not there is a bad argument; nothing checked or a
    // GPU without code is a failure (1), a mistyped target named as such.
    (&["doctor", "{tmp}/nonexistent", "--arch", "gfx90a"], 2, "{tmp}/nonexistent: No such file or directory"),
    (&["doctor", "{tmp}/baked", "--arch", "gfx90a:"], 2, "--arch \"gfx90a:\""),
    (&["doctor", "{tmp}/empty", "--arch", "gfx90a"], 1, "{tmp}/empty: no HIP binary found; nothing was checked"),
    (&["doctor", "{tmp}/baked", "--arch", "gfx90"], 1, "carries: gfx90a, gfx90a:xnack-); did you mean gfx90a?"),
    (&["doctor", "{tmp}/baked", "--arch", "gfx90a:sramecc+:xnack-"], 0, ""),
    // fstab's comma trap.
    (&["mount", "{demo}", "{tmp}/empty", "-o", "arch=gfx90a,gfx1030"], 2, "repeat arch= for each target (-o arch=…,arch=gfx1030)"),
    // Piped output: the summary alone, plain.
    (&["bake", "{demo}", "{tmp}/baked2", "--arch", "gfx90a"], 0, "baked {tmp}/baked2 in "),
];

#[test]
fn exit_status_table() {
    require_root();
    let fx = Fixture::new();
    let mut failures = Vec::new();
    for (args, code, want) in TABLE {
        let (got, err, stray) = run(&fx, args);
        let ok = got == Some(*code) && err.contains(&fx.arg(want)) && stray.is_empty();
        // kpackfs's own errors are one line; clap's usage errors add a usage block.
        let one_line = err.starts_with("error:") || err.trim_end().lines().count() == usize::from(!want.is_empty());
        let ok = ok && !err.contains('\r');
        if !ok || !one_line {
            failures.push(format!(
                "kpackfs {}: exit {got:?} (want {code}), stderr {err:?} (want {want:?}){}",
                args.join(" "),
                if stray.is_empty() { String::new() } else { format!(", MOUNTED {stray:?}") }
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} rows wrong:\n{}", failures.len(), TABLE.len(), failures.join("\n"));
}

/// `resolve --arch auto` names this machine's GPUs as the runtime does
/// (the MI210 fixture: gfx90a:sramecc+:xnack-) and a bare processor
/// resolves for the variant the archives serve: the same table as the
/// fully named device.
#[test]
fn resolve_takes_auto_and_bare_processors() {
    let fx = Fixture::new();
    let lib = fx.root.join("baked/lib/libdemo.so");
    let resolve = |arch: &str| {
        let o = Command::new(kpackfs())
            .arg("resolve")
            .arg(&lib)
            .args(["--arch", arch])
            .env("KPACKFS_SYSFS_ROOT", repo().join("tests/fixtures/kfd/mi210"))
            .output()
            .unwrap();
        assert!(o.status.success(), "--arch {arch}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let named = resolve("gfx90a:sramecc+:xnack-");
    assert!(named.contains("libdemo.so.1.0_gfx90a:xnack-.kpack"), "{named}");
    assert_eq!(resolve("auto"), named);
    assert_eq!(resolve("gfx90a"), format!("device gfx90a:sramecc+:xnack-\n{named}"));
}
