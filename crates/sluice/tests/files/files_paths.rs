//! Path confinement: every way out of the served root is refused, symlinks inside it are fine.

use std::os::unix::fs::symlink;
use std::path::Path;

use sluice::files::{PathError, resolve_under_root};

struct Tree {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

/// `base/root/{a.txt, sub/b.txt}` and `base/outside/secret.txt`.
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("a.txt"), b"a").unwrap();
    std::fs::write(root.join("sub/b.txt"), b"b").unwrap();
    std::fs::write(outside.join("secret.txt"), b"secret").unwrap();
    Tree { root: root.canonicalize().unwrap(), outside: outside.canonicalize().unwrap(), _dir: dir }
}

#[test]
fn plain_paths_resolve_inside_the_root() {
    let t = tree();
    assert_eq!(resolve_under_root(&t.root, "a.txt").unwrap(), t.root.join("a.txt"));
    assert_eq!(resolve_under_root(&t.root, "./sub/b.txt").unwrap(), t.root.join("sub/b.txt"));
    assert_eq!(resolve_under_root(&t.root, "sub//b.txt").unwrap(), t.root.join("sub/b.txt"));
    assert_eq!(resolve_under_root(&t.root, ".").unwrap(), t.root);
    // Not there yet (an upload): the parent exists inside the root.
    assert_eq!(resolve_under_root(&t.root, "sub/new.bin").unwrap(), t.root.join("sub/new.bin"));
}

#[test]
fn empty_nul_absolute_and_parent_components_are_refused() {
    let t = tree();
    assert!(matches!(resolve_under_root(&t.root, ""), Err(PathError::Empty)));
    assert!(matches!(resolve_under_root(&t.root, "a\0.txt"), Err(PathError::Invalid(..))));
    for abs in ["/etc/passwd", "/", "//x"] {
        let r = resolve_under_root(&t.root, abs);
        assert!(matches!(r, Err(PathError::Absolute(_))), "{abs}: {r:?}");
    }
    let secret = t.outside.join("secret.txt");
    let r = resolve_under_root(&t.root, secret.to_str().unwrap());
    assert!(matches!(r, Err(PathError::Absolute(_))), "{r:?}");
    for up in ["..", "../outside/secret.txt", "sub/../a.txt", "sub/../../outside", "a/.."] {
        let r = resolve_under_root(&t.root, up);
        assert!(matches!(r, Err(PathError::ParentComponent(_))), "{up}: {r:?}");
    }
}

#[test]
fn symlinks_out_of_the_root_are_refused_and_inside_allowed() {
    let t = tree();
    symlink(t.outside.join("secret.txt"), t.root.join("to_secret")).unwrap();
    symlink(&t.outside, t.root.join("to_outside_dir")).unwrap();
    symlink(t.root.join("sub/b.txt"), t.root.join("to_b")).unwrap();
    symlink("sub", t.root.join("to_sub")).unwrap();
    symlink(t.outside.join("not_yet"), t.root.join("dangling")).unwrap();

    for escape in ["to_secret", "to_outside_dir/secret.txt", "to_outside_dir/new_upload"] {
        let r = resolve_under_root(&t.root, escape);
        assert!(matches!(r, Err(PathError::Escapes(_))), "{escape}: {r:?}");
    }
    // A dangling link would create the file wherever it points.
    let r = resolve_under_root(&t.root, "dangling");
    assert!(matches!(r, Err(PathError::Invalid(..))), "{r:?}");
    assert!(!t.outside.join("not_yet").exists());

    assert_eq!(resolve_under_root(&t.root, "to_b").unwrap(), t.root.join("sub/b.txt"));
    assert_eq!(resolve_under_root(&t.root, "to_sub/b.txt").unwrap(), t.root.join("sub/b.txt"));
    assert_eq!(resolve_under_root(&t.root, "to_sub/up.bin").unwrap(), t.root.join("sub/up.bin"));
}

#[test]
fn a_root_reached_through_a_symlink_still_confines() {
    let t = tree();
    let link = t.root.parent().unwrap().join("root_link");
    symlink(&t.root, &link).unwrap();
    assert_eq!(resolve_under_root(&link, "a.txt").unwrap(), t.root.join("a.txt"));
    let r = resolve_under_root(&link, "../outside/secret.txt");
    assert!(matches!(r, Err(PathError::ParentComponent(_))), "{r:?}");
}

#[test]
fn a_missing_parent_is_refused() {
    let t = tree();
    let r = resolve_under_root(&t.root, "no/such/dir/file.bin");
    assert!(matches!(r, Err(PathError::Io(..))), "{r:?}");
    let r = resolve_under_root(Path::new("/no/such/root"), "a.txt");
    assert!(matches!(r, Err(PathError::Io(..))), "{r:?}");
}
