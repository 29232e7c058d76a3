//! `kpackfs.exe`: serve a fat ROCm install as a slim per-GPU prefix with
//! Dokan. Built with `--features exe` (see Cargo.toml).

#[cfg(not(windows))]
compile_error!("the kpackfs-windows binary is for Windows; on Linux build the FUSE `kpackfs` (fs-linux)");

fn main() -> std::process::ExitCode {
    kpackfs_windows::app::main()
}
