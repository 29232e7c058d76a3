//! `kpackfs generate install` puts the man pages and completions where a
//! user's tools look (XDG base directories, with their fallbacks), so they
//! work after `cargo install` without a package. Checked with the tools
//! themselves: bash registers the completion, man(1) finds the page.

use std::path::{Path, PathBuf};
use std::process::Command;

use kpackfs_tests::*;

/// Runs `kpackfs generate install` in `cwd` with only `env` (and PATH)
/// set (in `cwd`, so that a build writing to a relative path writes into
/// the test's directory).
fn install(cwd: &Path, env: &[(&str, &Path)]) -> (Option<i32>, String, String) {
    let mut c = Command::new(kpackfs());
    c.args(["generate", "install"]).current_dir(cwd).env_clear().env("PATH", "/usr/bin:/bin");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run kpackfs");
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The files, by hand: one completion per shell, one man page per visible command.
fn expected(data: &Path, config: &Path) -> Vec<PathBuf> {
    let mut v = vec![data.join("bash-completion/completions/kpackfs"), data.join("zsh/site-functions/_kpackfs"), config.join("fish/completions/kpackfs.fish")];
    for page in [
        "kpackfs",
        "kpackfs-mount",
        "kpackfs-bake",
        "kpackfs-inspect",
        "kpackfs-archs",
        "kpackfs-resolve",
        "kpackfs-recompress",
        "kpackfs-split",
        "kpackfs-verify",
        "kpackfs-recombine",
        "kpackfs-split-wheel",
        "kpackfs-doctor",
    ] {
        v.push(data.join(format!("man/man1/{page}.1")));
    }
    v.sort();
    v
}

fn listed(stdout: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = stdout.lines().map(PathBuf::from).collect();
    v.sort();
    v
}

/// Every regular file under `root`.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn installs_into_the_home_fallbacks_where_bash_and_man_find_them() {
    let dir = tempdir();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".local/bin")).unwrap();
    // A relative XDG_DATA_HOME is ignored, as the XDG spec says.
    let (code, out, err) = install(dir.path(), &[("HOME", &home), ("XDG_DATA_HOME", Path::new("relative/data"))]);
    assert_eq!(code, Some(0), "{err}");
    let want = expected(&home.join(".local/share"), &home.join(".config"));
    assert_eq!(listed(&out), want);
    assert_eq!(files(&home), want, "exactly these files, no leftovers");
    assert!(err.contains(&format!("while {} is on PATH", home.join(".local/bin").display())), "{err}");

    let bash = Command::new("bash")
        .arg("-c")
        .arg("source \"$1\" && complete -p kpackfs")
        .arg("bash")
        .arg(home.join(".local/share/bash-completion/completions/kpackfs"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bash.stdout).trim_end().ends_with("-F _kpackfs kpackfs"), "{bash:?}");
    // man-db derives ~/.local/share/man from ~/.local/bin on PATH.
    let man = Command::new("man")
        .args(["-w", "kpackfs-doctor"])
        .env_clear()
        .env("HOME", &home)
        .env("PATH", format!("{}:/usr/bin:/bin", home.join(".local/bin").display()))
        .output()
        .expect("man (apt-get install man-db)");
    assert_eq!(String::from_utf8_lossy(&man.stdout).trim_end(), home.join(".local/share/man/man1/kpackfs-doctor.1").to_string_lossy(), "{man:?}");

    // Again: the same files, replaced in place.
    let (code, out, _) = install(dir.path(), &[("HOME", &home)]);
    assert_eq!(code, Some(0));
    assert_eq!(listed(&out), want);
    assert_eq!(files(&home), want);
}

#[test]
fn honours_xdg_data_home_and_xdg_config_home() {
    let dir = tempdir();
    let (home, data, config) = (dir.path().join("home"), dir.path().join("data"), dir.path().join("config"));
    std::fs::create_dir_all(&home).unwrap();
    let (code, out, err) = install(dir.path(), &[("HOME", &home), ("XDG_DATA_HOME", &data), ("XDG_CONFIG_HOME", &config)]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(listed(&out), expected(&data, &config));
    assert!(files(&home).is_empty(), "nothing under HOME: {:?}", files(&home));
    assert!(err.contains(&format!("MANPATH={}:", data.join("man").display())), "{err}");
}

#[test]
fn without_home_it_says_what_to_set() {
    let dir = tempdir();
    let (code, out, err) = install(dir.path(), &[]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("neither XDG_DATA_HOME nor HOME names an absolute directory; set one"), "{err}");
}
