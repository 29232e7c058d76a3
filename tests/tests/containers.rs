//! Containers without a container engine: the mount propagation the
//! Kubernetes DaemonSet and `docker run`/`podman run` examples of
//! docs/containers.md rely on (the kpackfs pod's hostPath `Bidirectional`,
//! consumers' `HostToContainer`, read-only), acted out with mount namespaces
//! by `tests/propagation.sh`; the script's header says what it checks.

use std::process::{Command, Stdio};

use kpackfs_tests::*;

#[test]
fn daemonset_propagation_reaches_consumers_and_unmounts_everywhere() {
    require_root();
    let work = tempdir();
    // The outer private namespace keeps every mount of the script away from ours.
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "bash"])
        .arg(repo().join("tests/propagation.sh"))
        .arg(kpackfs())
        .arg(work.path())
        .stdin(Stdio::null())
        .output()
        .expect("unshare (util-linux)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "tests/propagation.sh failed:\n{text}");
    assert!(text.contains("propagation: all checks passed"), "{text}");
    assert!(!mounted(&work.path().join("node/kpackfs/rocm")));
}
