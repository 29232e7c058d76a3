//! `kpackfs generate`: man pages and shell completion scripts rendered from
//! the clap definitions this binary parses with, so what a package installs
//! cannot drift from the options the binary accepts.
//!
//! A hidden subcommand rather than a `build.rs`: a build script would have
//! to compile the whole CLI (and `kpackfs-core` with it) a second time for
//! the host and leave its output in an `OUT_DIR` that packaging cannot name,
//! while `cargo install --path fs-linux` should stay a plain build. The
//! Debian package runs it after the build (`fs-linux/package.sh`); a
//! `cargo install` user runs it once (README, "Install").

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

use crate::cli::{Cli, Generate};
use kpackfs_cli::Failure;

pub fn run(g: Generate) -> Result<(), Failure> {
    match g {
        Generate::Install => install(),
        Generate::Man { dir } => write_man_pages(&dir),
        Generate::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            out.write_all(&completions(shell)).and_then(|()| out.flush()).map_err(|e| Failure::runtime(format!("writing completions: {e}")))
        }
    }
}

/// An XDG base directory: `var` if set to an absolute path (the spec
/// ignores relative ones), else `$HOME/fallback`.
fn xdg_dir(var: &str, fallback: &str) -> Result<PathBuf, Failure> {
    if let Some(d) = std::env::var_os(var).map(PathBuf::from).filter(|d| d.is_absolute()) {
        return Ok(d);
    }
    match std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) {
        Some(h) => Ok(h.join(fallback)),
        None => Err(Failure::usage(format!("generate install: neither {var} nor HOME names an absolute directory; set one"))),
    }
}

/// Writes `bytes` at `path` under a temporary name, then renames it into
/// place: an interrupted install leaves the previous file, never half a one.
fn put(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let fail = |p: &Path, e: std::io::Error| Failure::runtime(format!("{}: {e}", p.display()));
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| fail(d, e))?;
    }
    let tmp = path.with_extension(format!("kpackfs-tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(path, e)
    })
}

/// `kpackfs generate install`: the files a package would put under /usr,
/// put where each tool looks for a user's own.
fn install() -> Result<(), Failure> {
    let data = xdg_dir("XDG_DATA_HOME", ".local/share")?;
    let config = xdg_dir("XDG_CONFIG_HOME", ".config")?;
    let man = data.join("man/man1");
    let files: Vec<(PathBuf, Vec<u8>)> = vec![
        // bash-completion looks in $XDG_DATA_HOME/bash-completion/completions.
        (data.join("bash-completion/completions/kpackfs"), completions(Shell::Bash)),
        // zsh has no per-user default: the hint below puts it on $fpath.
        (data.join("zsh/site-functions/_kpackfs"), completions(Shell::Zsh)),
        // fish reads $XDG_CONFIG_HOME/fish/completions itself.
        (config.join("fish/completions/kpackfs.fish"), completions(Shell::Fish)),
    ];
    let mut written = Vec::new();
    for (p, b) in files.into_iter().chain(man_pages().into_iter().map(|(n, b)| (man.join(n), b))) {
        put(&p, &b)?;
        written.push(p);
    }
    let mut out = String::new();
    for p in &written {
        out.push_str(&format!("{}\n", p.display()));
    }
    let mut o = std::io::stdout().lock();
    o.write_all(out.as_bytes()).and_then(|()| o.flush()).map_err(|e| Failure::runtime(format!("writing output: {e}")))?;
    // man-db looks in DIR/../share/man for each DIR on PATH.
    let man_hint = match data.parent().filter(|_| data.ends_with("share")) {
        Some(p) => format!("man finds the pages while {} is on PATH (else set MANPATH={}:)", p.join("bin").display(), data.join("man").display()),
        None => format!("man finds the pages with MANPATH={}:", data.join("man").display()),
    };
    eprintln!(
        "kpackfs: installed {} files; {man_hint}; zsh: add fpath=({} $fpath) before compinit in ~/.zshrc",
        written.len(),
        data.join("zsh/site-functions").display()
    );
    Ok(())
}

fn write_man_pages(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    for (name, page) in man_pages() {
        let p = dir.join(&name);
        std::fs::write(&p, page).map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

/// kpackfs(1)'s DESCRIPTION (`--help` keeps the one-line summary).
const DESCRIPTION: &str = "kpackfs serves a fat ROCm install, whose host libraries carry GPU code objects for many \
architectures, as a read-only FUSE view for the GPU targets you select: host binaries are served in the kpack \
layout the ROCm runtime loads, their code objects in per-target .kpack archives built on first use, and \
architecture-specific database files of other targets are hidden; everything else passes through. bake writes \
the same view to disk; inspect, archs and resolve look into installs and binaries without a GPU; split, verify, \
recombine and split-wheel write the same split out for packaging pipelines (build artifacts and Python wheels); \
doctor says why a GPU gets no code from an install.";

/// The command tree as documented: built (so subcommands carry their
/// `kpackfs-mount` display names) and without clap's `help` subcommand.
fn command() -> Command {
    let mut cmd = Cli::command().disable_help_subcommand(true).long_about(DESCRIPTION);
    cmd.build();
    cmd
}

/// `(file name, roff)` for `kpackfs` and each visible subcommand.
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let top = command();
    let subs: Vec<Command> = top.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    let names: Vec<String> = subs.iter().map(|s| page_name(s).to_string()).collect();
    let mut pages = vec![render(&top, top_sections(&names))];
    for s in &subs {
        let extra = if s.get_name() == "mount" { mount_sections() } else { Roff::new() };
        pages.push(render(s, extra));
    }
    pages
}

fn page_name(cmd: &Command) -> &str {
    cmd.get_display_name().unwrap_or_else(|| cmd.get_name())
}

/// clap_mangen's sections with ours before VERSION, where man pages keep
/// EXIT STATUS, FILES, EXAMPLES and SEE ALSO. Every page's footer names the
/// release (subcommands have no version of their own).
fn render(cmd: &Command, extra: Roff) -> (String, Vec<u8>) {
    let man = Man::new(cmd.clone()).manual("kpackfs manual").source(concat!("kpackfs ", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    let io = |r: std::io::Result<()>| r.expect("writing to a Vec");
    io(man.render_title(&mut out));
    io(man.render_name_section(&mut out));
    io(man.render_synopsis_section(&mut out));
    io(man.render_description_section(&mut out));
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        io(man.render_options_section(&mut out));
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        io(man.render_subcommands_section(&mut out));
    }
    io(extra.to_writer(&mut out));
    if cmd.get_version().is_some() {
        io(man.render_version_section(&mut out));
    }
    (man.get_filename(), out)
}

/// A `.nf` block: command lines shown as typed.
fn example(r: &mut Roff, lines: &[&str]) {
    r.control("PP", []).control("RS", ["4"]).control("nf", []);
    for l in lines {
        r.text([roman(*l)]);
    }
    r.control("fi", []).control("RE", []);
}

fn para(r: &mut Roff, text: &str) {
    r.control("PP", []).text([roman(text)]);
}

fn top_sections(pages: &[String]) -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["EXIT STATUS"]);
    para(&mut r, "0 success, 1 failure while working, 2 bad arguments or an unusable source or mountpoint; one line on standard error says why.");
    r.control("SH", ["ENVIRONMENT"]);
    r.control("TP", []).text([bold("RUST_LOG")]);
    r.text([roman("Log level: warn by default; info shows mount, unmount and counters, debug every plan.")]);
    r.control("TP", []).text([bold("HSA_XNACK, HSA_ENABLE_SRAMECC, HSA_OVERRIDE_GFX_VERSION")]);
    r.text([roman("Change the target IDs --arch auto gives this machine's GPUs, as they change the HIP runtime's.")]);
    r.control("TP", []).text([bold("KPACKFS_SYSFS_ROOT")]);
    r.text([roman("Read the KFD topology for --arch auto under this directory instead of /sys.")]);
    r.control("TP", []).text([bold("XDG_CACHE_HOME")]);
    r.text([roman("Where a non-root user's default cache directory lives (kpackfs under it).")]);
    r.control("SH", ["FILES"]);
    r.control("TP", []).text([italic("/var/cache/kpackfs")]);
    r.text([roman("Default cache directory for root (compressed archives, local copies); see --cache-dir.")]);
    r.control("TP", []).text([italic("/usr/share/doc/kpackfs/examples/")]);
    r.text([roman("A systemd mount unit and Kubernetes, Docker and Podman examples.")]);
    r.control("SH", ["MOUNT HELPER"]);
    para(
        &mut r,
        "Called with a first argument that is not a command, kpackfs runs mount with the arguments mount.fuse3(8) passes, so an installed kpackfs is a filesystem type for mount(8), fstab(5) and systemd:",
    );
    example(&mut r, &["mount -t fuse.kpackfs /opt/rocm /opt/kpackfs/gfx90a -o arch=gfx90a,allow_other"]);
    para(&mut r, "See kpackfs-mount(1) for the options.");
    r.control("SH", ["SEE ALSO"]);
    let mut refs: Vec<String> = pages.iter().map(|p| format!("{p}(1)")).collect();
    refs.extend(["mount.fuse3(8)".into(), "fusermount3(1)".into(), "fstab(5)".into(), "systemd.mount(5)".into()]);
    r.text([roman(refs.join(", "))]);
    r
}

fn mount_sections() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["MOUNT HELPER, FSTAB AND SYSTEMD"]);
    para(
        &mut r,
        "mount(8) with type fuse.kpackfs runs mount.fuse3(8), which runs kpackfs SOURCE MOUNTPOINT -o OPTIONS from the PATH; -o takes the options above in fstab form (arch=, allow_other, auto_unmount, cache_size=, cache_dir=, threads=, ttl=, …). Commas separate options, so several targets are several arch= options.",
    );
    example(
        &mut r,
        &[
            "mount -t fuse.kpackfs /opt/rocm /opt/kpackfs/gfx90a -o arch=gfx90a,arch=gfx1030,allow_other",
            "",
            "# /etc/fstab",
            "/opt/rocm  /opt/kpackfs/gfx90a  fuse.kpackfs  arch=gfx90a,allow_other,auto_unmount,nofail  0 0",
        ],
    );
    para(&mut r, "A systemd mount unit doing the same is in /usr/share/doc/kpackfs/examples/opt-kpackfs-gfx90a.mount.");
    r.control("SH", ["UNMOUNTING"]);
    para(
        &mut r,
        "umount MOUNTPOINT, or SIGINT, SIGTERM or SIGHUP to the daemon. A busy mount is detached lazily and its users get 5 seconds. A daemon killed with SIGKILL leaves a dead mount unless it ran with --auto-unmount: remove it with umount -l MOUNTPOINT.",
    );
    r.control("SH", ["EXAMPLES"]);
    para(&mut r, "The embedded demo install, for one target; the mount is live when the command returns:");
    example(&mut r, &["kpackfs mount /tmp/kpackfs-demo --arch gfx90a:xnack-", "kpackfs archs /tmp/kpackfs-demo", "umount /tmp/kpackfs-demo"]);
    para(&mut r, "A ROCm install for this machine's GPUs, readable by containers and other users:");
    example(&mut r, &["kpackfs archs --machine", "kpackfs mount /opt/rocm /opt/kpackfs/local --arch auto --allow-other --auto-unmount"]);
    para(&mut r, "Containers and Kubernetes: /usr/share/doc/kpackfs/containers.md.");
    r
}

/// The completion script for `shell`, for the binary named `kpackfs`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kpackfs", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(name: &str) -> String {
        let pages = man_pages();
        let (_, p) = pages.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name} in {:?}", pages.iter().map(|p| &p.0).collect::<Vec<_>>()));
        String::from_utf8(p.clone()).unwrap()
    }

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_is_known_to_the_helper_form() {
        // A command missing from SUBCOMMANDS would be taken for a mount SOURCE.
        for s in Cli::command().get_subcommands() {
            assert!(kpackfs_cli::SUBCOMMANDS.contains(&s.get_name()), "{} missing from SUBCOMMANDS", s.get_name());
        }
    }

    #[test]
    fn one_man_page_per_visible_command() {
        let names: Vec<String> = man_pages().into_iter().map(|(n, _)| n).collect();
        for n in [
            "kpackfs.1",
            "kpackfs-mount.1",
            "kpackfs-bake.1",
            "kpackfs-inspect.1",
            "kpackfs-archs.1",
            "kpackfs-resolve.1",
            "kpackfs-recompress.1",
            "kpackfs-split.1",
            "kpackfs-verify.1",
            "kpackfs-recombine.1",
            "kpackfs-split-wheel.1",
            "kpackfs-doctor.1",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} not in {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("generate") || n.contains("help") || n.contains("watchdog")), "{names:?}");
    }

    #[test]
    fn man_pages_carry_the_options_and_the_helper_form() {
        let top = page("kpackfs.1");
        assert!(top.contains("\n.TH kpackfs 1 "), "{top}");
        for s in ["EXIT STATUS", "fuse.kpackfs", "kpackfs\\-mount(1)", "\\-\\-version", "HSA_XNACK"] {
            assert!(top.contains(s), "kpackfs.1 lacks {s}");
        }
        let mount = page("kpackfs-mount.1");
        for s in
            ["\\-\\-arch", "\\-\\-allow\\-other", "\\-\\-auto\\-unmount", "\\-\\-cache\\-dir", "fuse.kpackfs", "/etc/fstab", "opt\\-kpackfs\\-gfx90a.mount"]
        {
            assert!(mount.contains(s), "kpackfs-mount.1 lacks {s}");
        }
        assert!(page("kpackfs-bake.1").contains("\\-\\-archive\\-compression"));
        for (p, opt) in [
            ("kpackfs-split.1", "\\-\\-component"),
            ("kpackfs-verify.1", "\\-\\-against"),
            ("kpackfs-recombine.1", "\\-\\-config"),
            ("kpackfs-split-wheel.1", "\\-\\-targets"),
        ] {
            assert!(page(p).contains(opt), "{p} lacks {opt}");
        }
    }

    #[test]
    fn completions_name_the_commands_and_options() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let s = String::from_utf8(completions(shell)).unwrap();
            for w in ["mount", "bake", "resolve", "allow-other", "archive-compression"] {
                assert!(s.contains(w), "{shell} completions lack {w}");
            }
        }
    }
}
